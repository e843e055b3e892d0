//! Engines: who computes the limiters on the server. The module's native `RL.*` commands, or, where no
//! module can be loaded (managed Redis), the same limiters as one Lua library (`lua/ratelimit.lua`,
//! equal to the module reply for reply and byte for byte): called with `FCALL` (Redis 7+, Valkey) or,
//! for servers and users without FUNCTION, with `EVALSHA`. The client builds every call as the
//! module's command; here it is sent as the chosen engine takes it (`FCALL rl_token <numkeys> <keys>
//! <the other arguments in order>`), and a call answered NOSCRIPT or "Function not found" (it never
//! ran: a restart, a failover, a flush, a cluster node that has not seen the library yet) loads the
//! library on that node and is sent again, once.

use crate::connection::Transport;
use crate::engine_machine::{self as machine, Answer, Sent, State, Then, Wanted};
use crate::error::CallError;
use crate::reply_class::{reply_text, ReplyClass};
use ratelimit_core::commands::CommandInfo;
use redis::{Cmd, RedisError, RedisResult, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

/// The library's one source, `lua/ratelimit.lua` (`client/lua/ratelimit.lua` is a link to it, which
/// `cargo package` ships as the file; a test holds the two equal): what `FUNCTION LOAD` takes.
pub const LIBRARY: &str = include_str!("../lua/ratelimit.lua");

/// Which engine the limiter uses (see [`LimiterBuilder::backend`](crate::LimiterBuilder::backend)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The module when the server answers its commands, else the library through `FCALL` (loading
    /// it when this user may), else through `EVALSHA`. Asked on the first call, and again after an
    /// outage (a failover may land on another server); "not yet known" until then (docs/errors.md).
    #[default]
    Auto,
    /// The module's commands only: an unknown command is a configuration fault.
    Module,
    /// The library through `FCALL`, loaded with `FUNCTION LOAD` where it is missing.
    Functions,
    /// The library through `EVALSHA` (`EVAL` where the script is not cached).
    Scripts,
}

impl Backend {
    /// The engine machine's name for what the limiter asked for.
    fn machine(self) -> Wanted {
        match self {
            Backend::Auto => Wanted::Auto,
            Backend::Module => Wanted::Module,
            Backend::Functions => Wanted::Fcall,
            Backend::Scripts => Wanted::Evalsha,
        }
    }

    /// Its name in what `verify` says.
    pub fn describe(self) -> &'static str {
        match self {
            Backend::Auto => "not yet known",
            Backend::Module => "the ratelimit module",
            Backend::Functions => "the Lua library through FCALL",
            Backend::Scripts => "the Lua library through EVALSHA scripts",
        }
    }
}

/// The engine a limiter asked for, the one it uses, and why.
pub(crate) struct Engine {
    wanted: Backend,
    /// The machine's state (`engine_machine::State`), as a code.
    state: AtomicU8,
    why: Mutex<String>,
    /// Whether a call has found the engine that answers (since the last outage): until then, a
    /// waited decision asks first with a read-only call, since a pipelined error hides its code.
    settled: std::sync::atomic::AtomicBool,
    /// One load of the library at a time: calls that find it missing together wait for one load
    /// instead of each sending the whole library.
    loading: tokio::sync::Mutex<()>,
    /// Loads done so far: a call that waited for another's load finds the count moved and sends again.
    loads: AtomicU64,
}

impl Engine {
    pub(crate) fn new(wanted: Backend) -> Engine {
        Engine {
            wanted,
            state: AtomicU8::new(state_code(machine::start(wanted.machine()))),
            why: Mutex::new(String::new()),
            settled: std::sync::atomic::AtomicBool::new(false),
            loading: tokio::sync::Mutex::new(()),
            loads: AtomicU64::new(0),
        }
    }

    fn state(&self) -> State {
        state_of(self.state.load(Ordering::Relaxed))
    }

    /// The engine in use as the engine machine reports it ("not yet known", "the ratelimit module", ...).
    pub(crate) fn reports(&self) -> &'static str {
        let state = self.state();
        machine::STATES.iter().find(|s| s.0 == state).map_or(machine::STATES[0].3, |s| s.3)
    }

    /// The engine in use (`Auto` while not yet known) and the reason it was chosen.
    pub(crate) fn chosen(&self) -> (Backend, String) {
        let why = self.why.lock().map(|w| w.clone()).unwrap_or_default();
        let chosen = match self.state() {
            State::Unknown => Backend::Auto,
            State::Module => Backend::Module,
            State::Fcall => Backend::Functions,
            State::Evalsha => Backend::Scripts,
        };
        let why = match (self.wanted, chosen, why.is_empty()) {
            (Backend::Auto, Backend::Auto, _) => "no call has been decided yet".to_string(),
            (Backend::Auto, _, true) => "the module answered".to_string(),
            (Backend::Auto, _, false) => why,
            (_, _, _) => "asked for".to_string(),
        };
        (chosen, why)
    }

    /// Chooses anew on the next call (after an outage: a failover may land on another server).
    pub(crate) fn forget(&self) {
        self.settled.store(false, Ordering::Relaxed);
        self.move_to(machine::start(self.wanted.machine()), None);
    }

    fn move_to(&self, state: State, why: Option<String>) {
        let before = self.state.swap(state_code(state), Ordering::Relaxed);
        if before != state_code(state) {
            if let Ok(mut w) = self.why.lock() {
                *w = why.unwrap_or_default();
            }
        }
    }

    /// Sends `cmd`, a module command or any other, as the engine in use takes it (see the module's
    /// documentation), following the engine machine (`engine_machine`) where the server refuses one.
    pub(crate) async fn query(
        &self,
        transport: &Transport,
        cmd: &Cmd,
        check_first: bool,
    ) -> RedisResult<Value> {
        let wanted = self.wanted.machine();
        let mut state = self.state();
        // The common case, on the request path: the module is the engine and its command goes as it
        // is, without translating it. Only an answer that steers goes on through the machine.
        let mut answered = None;
        if state == State::Module {
            let result = transport.query(cmd, check_first).await;
            if !matches!(&result, Err(e) if steers(e)) {
                return result;
            }
            answered = Some(result);
        }
        let Some(call) = Call::of(cmd) else {
            return match answered {
                Some(result) => result,
                None => transport.query(cmd, check_first).await,
            };
        };
        let mut sent = machine::STATES.iter().find(|s| s.0 == state).map_or(Sent::Module, |s| s.2);
        let mut reasons: Vec<String> = vec![];
        let mut sends = 0;
        loop {
            sends += 1;
            let loads = self.loads.load(Ordering::Acquire);
            let result = match (answered.take(), sent) {
                (Some(result), _) => result,
                (None, Sent::Module) => transport.query(cmd, check_first).await,
                (None, Sent::Fcall) => transport.query(&call.fcall(), check_first).await,
                (None, Sent::FunctionLoad) => self.load_once(transport, &call, loads).await,
                (None, Sent::Evalsha) => transport.query(&call.evalsha(), check_first).await,
                (None, Sent::Eval) => {
                    transport.query(&call.with_script("EVAL", &call.script().code), false).await
                }
            };
            let answer = match &result {
                Ok(_) => Answer::Ok,
                Err(e) if ReplyClass::of(&CallError::Redis(e.clone())) == ReplyClass::Outage => {
                    Answer::Outage
                }
                Err(e) => machine::answer_of_reply(&reply_text(e)),
            };
            let (next, then) = machine::step(wanted, state, sent, answer, sends);
            if next != state && matches!(next, State::Fcall | State::Evalsha) {
                reasons.push(reason(sent, answer).to_string());
            }
            state = next;
            match then {
                Then::Send(next_sent) => {
                    sent = next_sent;
                    continue;
                }
                Then::Decided => self.settled.store(true, Ordering::Relaxed),
                Then::Outage | Then::Misconfigured | Then::Error => {}
            }
            if !reasons.is_empty() {
                reasons.push(format!(
                    "using {}",
                    machine::STATES.iter().find(|s| s.0 == state).map_or("", |s| s.3)
                ));
            }
            self.move_to(state, (!reasons.is_empty()).then(|| reasons.join("; ")));
            if then == Then::Misconfigured && result.is_ok() {
                return Err(redis::make_extension_error(
                    "ERR".into(),
                    Some(format!("no engine answers: the library went missing again after {sends} commands")),
                ));
            }
            return result;
        }
    }

    /// Sends `cmd` followed by `WAIT` (see `Transport::query_waited`) as the engine in use takes it;
    /// under `Auto`, a refused engine is replaced by asking the server with a read-only call of
    /// `key` (RL.INSPECT), so the decision itself is sent once.
    pub(crate) async fn query_waited(
        &self,
        transport: &Transport,
        cmd: &Cmd,
        key: &str,
        replicas: u32,
        timeout: std::time::Duration,
    ) -> RedisResult<(Value, i64)> {
        let module = self.state() == State::Module;
        if module && (self.wanted == Backend::Module || self.settled.load(Ordering::Relaxed)) {
            return transport.query_waited(cmd, key, replicas, timeout).await;
        }
        let Some(call) = Call::of(cmd) else {
            return transport.query_waited(cmd, key, replicas, timeout).await;
        };
        if self.wanted == Backend::Auto && !self.settled.load(Ordering::Relaxed) {
            // A pipelined error (the decision, then WAIT) hides its code: the engine is found first
            // with a read-only call, so the decision itself is sent once.
            self.query(transport, &crate::command::inspect(key, None), false).await?;
        }
        let mut chose_again = false;
        loop {
            let state = self.state();
            let engine = if state == State::Evalsha { Backend::Scripts } else { Backend::Functions };
            let sent = match state {
                State::Fcall => call.fcall(),
                State::Evalsha => call.evalsha(),
                _ => cmd.clone(),
            };
            let loads = self.loads.load(Ordering::Acquire);
            let result = transport.query_waited(&sent, key, replicas, timeout).await;
            match &result {
                Err(e) if missing(e) => {
                    match engine {
                        Backend::Scripts => load(transport, &call, engine).await?,
                        // One load at a time, as for every other call.
                        _ => drop(self.load_once(transport, &call, loads).await?),
                    }
                    return transport.query_waited(&sent, key, replicas, timeout).await;
                }
                Err(e) if self.wanted == Backend::Auto && refuses(e) && !chose_again => {
                    chose_again = true;
                    self.query(transport, &crate::command::inspect(key, None), false).await?;
                }
                _ => return result,
            }
        }
    }
}

impl Engine {
    /// Loads the library where an FCALL found it missing, one load at a time: a call that waited for
    /// another's load (the count of loads moved since it sent) loads nothing and sends again.
    async fn load_once(&self, transport: &Transport, call: &Call, seen: u64) -> RedisResult<Value> {
        let _one = self.loading.lock().await;
        if self.loads.load(Ordering::Acquire) != seen {
            return Ok(Value::Okay);
        }
        load(transport, call, Backend::Functions).await?;
        self.loads.fetch_add(1, Ordering::Release);
        Ok(Value::Okay)
    }
}

/// Why the machine left `sent`'s engine, for `verify` and the logs.
fn reason(sent: Sent, answer: Answer) -> &'static str {
    match (sent, answer) {
        (Sent::Module, Answer::Noperm) => "the module's commands refused to this user (NOPERM)",
        (Sent::Module, _) => "module not loaded",
        (_, Answer::Noperm) => "FCALL or FUNCTION LOAD refused to this user (NOPERM)",
        _ => "FCALL unknown to this server",
    }
}

fn state_code(state: State) -> u8 {
    machine::STATES.iter().position(|s| s.0 == state).unwrap_or(0) as u8
}

fn state_of(code: u8) -> State {
    machine::STATES.get(usize::from(code)).map_or(State::Unknown, |s| s.0)
}

/// An answer the engine machine steers by (a refused or unknown command, a missing library).
fn steers(e: &RedisError) -> bool {
    !matches!(machine::answer_of_reply(&reply_text(e)), Answer::Error | Answer::Outage)
}

/// Loads the library (`FUNCTION LOAD REPLACE`) or `call`'s script (`SCRIPT LOAD`) where the server
/// answered that it has neither; in a cluster, on every primary.
async fn load(transport: &Transport, call: &Call, engine: Backend) -> RedisResult<()> {
    let cmd = match engine {
        Backend::Scripts => redis::cmd("SCRIPT").arg("LOAD").arg(&call.script().code).clone(),
        _ => redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(LIBRARY).clone(),
    };
    transport.query(&cmd, false).await.map(drop)
}

/// What the engine machine reads in `e`, also from a pipelined error (a waited decision), which keeps
/// only its text: read from the first error code of the machine's answers found in it.
fn answer_of(e: &RedisError) -> Answer {
    if e.code().is_some() {
        return machine::answer_of_reply(&reply_text(e));
    }
    let text = e.to_string();
    let found = machine::ANSWERS.iter().filter_map(|(_, code, _)| text.find(&format!("{code} "))).min();
    found.map_or(Answer::Error, |at| machine::answer_of_reply(&text[at..]))
}

/// An answer that says this engine cannot work for this user here: its command unknown or refused.
fn refuses(e: &RedisError) -> bool {
    matches!(answer_of(e), Answer::UnknownCommand | Answer::Noperm)
}

/// "Function not found" or NOSCRIPT: the library or the script is not on this server (or this node);
/// the call never ran.
fn missing(e: &RedisError) -> bool {
    matches!(answer_of(e), Answer::FunctionMissing | Answer::Noscript)
}

/// A library function's call: its name, keys and other arguments, in the command's order.
pub struct Call {
    function: String,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    /// The library's form of a module command; None for any other command (and the module-only
    /// ones: RL.TOP, RL.RESETSTATS, the dialects), which are sent as they are.
    pub fn of(cmd: &Cmd) -> Option<Call> {
        let mut words = cmd.args_iter().filter_map(|a| match a {
            redis::Arg::Simple(bytes) => Some(bytes.to_vec()),
            _ => None,
        });
        let name = String::from_utf8(words.next()?).ok()?;
        let info = CommandInfo::named(&name)?;
        let function = info.function?.to_string();
        let rest: Vec<Vec<u8>> = words.collect();
        let key_at = info.keys.positions(&rest);
        let (mut keys, mut args) = (vec![], vec![]);
        for (i, word) in rest.into_iter().enumerate() {
            if key_at.contains(&i) {
                keys.push(word);
            } else {
                args.push(word);
            }
        }
        Some(Call { function, keys, args })
    }

    /// Its keys, as text.
    pub fn keys(&self) -> Vec<String> {
        self.keys.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect()
    }

    pub fn function(&self) -> &str {
        &self.function
    }

    pub fn fcall(&self) -> Cmd {
        self.with_script("FCALL", &self.function)
    }

    pub fn evalsha(&self) -> Cmd {
        self.with_script("EVALSHA", &self.script().hash)
    }

    fn with_script(&self, command: &str, target: &str) -> Cmd {
        let mut cmd = redis::cmd(command);
        cmd.arg(target).arg(self.keys.len()).arg(&self.keys).arg(&self.args);
        cmd
    }

    /// The EVALSHA script of this function (`lua/scripts/<function>.lua`), and its SHA-1.
    fn script(&self) -> &'static Script {
        static SCRIPTS: OnceLock<HashMap<String, Script>> = OnceLock::new();
        let scripts = SCRIPTS.get_or_init(|| {
            CommandInfo::in_library()
                .filter_map(|c| c.function)
                .map(|function| {
                    let function = function.to_string();
                    let code = script_source(&function);
                    let hash = redis::Script::new(&code).get_hash().to_string();
                    (function, Script { code, hash })
                })
                .collect()
        });
        &scripts[&self.function]
    }
}

/// One function's EVALSHA script.
struct Script {
    code: String,
    hash: String,
}

/// The EVALSHA script of the library function `function` (`rl_token`, ...): what the function
/// reaches of the library, its fast path first, ending in one call of the function; the file
/// `lua/scripts/<function>.lua` holds the same (for operators who load the scripts with `SCRIPT LOAD`
/// for users allowed only `EVALSHA`).
pub fn script_source(function: &str) -> String {
    script_of(LIBRARY, function)
}

/// The hash a library names as its own (`source_hash` in its contract block, what `rl_version`
/// replies); empty when it names none.
pub fn library_hash(library: &str) -> &str {
    const FIELD: &str = "  source_hash = \"";
    library
        .find(FIELD)
        .map(|at| &library[at + FIELD.len()..])
        .and_then(|rest| rest.split_once('"'))
        .map_or("", |(hash, _)| hash)
}

pub use crate::evalsha::script_of;

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            })
            .collect()
    }

    fn call(text: &str) -> Call {
        let mut cmd = Cmd::new();
        for w in text.split(' ') {
            cmd.arg(w);
        }
        Call::of(&cmd).expect("a library function")
    }

    #[test]
    fn module_commands_become_library_calls_with_their_keys_first() {
        assert_eq!(
            words(&call("RL.TOKEN a 10 5 1 b 20 1 1").fcall()),
            ["FCALL", "rl_token", "2", "a", "b", "10", "5", "1", "20", "1", "1"]
        );
        assert_eq!(
            words(&call("RL.ALL a SLIDE 5 60 r DEDUP b TOKEN 10 5 1").fcall()),
            ["FCALL", "rl_all", "2", "a", "b", "SLIDE", "5", "60", "r", "DEDUP", "TOKEN", "10", "5", "1"]
        );
        assert_eq!(
            words(&call("RL.REFUND TOKEN k 10 5 2").fcall()),
            ["FCALL", "rl_refund", "1", "k", "TOKEN", "10", "5", "2"]
        );
        assert_eq!(words(&call("RL.RELEASE k id").fcall()), ["FCALL", "rl_release", "1", "k", "id"]);
        let reserve = call("RL.RESERVE k 10 5 1 2.000");
        assert_eq!(words(&reserve.fcall())[..4], ["FCALL", "rl_reserve", "1", "k"]);
        assert!(Call::of(redis::cmd("RL.TOP").arg(10)).is_none(), "module-only: sent as it is");
        assert!(Call::of(redis::cmd("INFO").arg("server")).is_none());
    }

    #[test]
    fn the_scripts_end_in_one_call_of_their_function() {
        let script = script_source("rl_token");
        assert!(!script.starts_with("#!lua"), "no shebang: EVAL would refuse it");
        assert!(!script.contains("register_function"));
        assert!(script.ends_with("return build().rl_token(KEYS, ARGV, sec, usec, ns)\n"));
        assert_eq!(call("RL.TOKEN k 1 1 1").script().hash, redis::Script::new(&script).get_hash());
    }

    #[test]
    fn the_shipped_library_is_the_repositorys() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        if let Ok(repo) = std::fs::read_to_string(root.join("../lua/ratelimit.lua")) {
            assert_eq!(
                repo, LIBRARY,
                "client/lua/ratelimit.lua is a copy of lua/ratelimit.lua: copy it again"
            );
        }
    }
}
