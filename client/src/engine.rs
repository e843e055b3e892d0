//! Engines: who computes the limiters on the server. The module's native `RL.*` commands, or, where no
//! module can be loaded (managed Redis), the same limiters as one Lua library (`lua/ratelimit.lua`,
//! equal to the module reply for reply and byte for byte): called with `FCALL` (Redis 7+, Valkey) or,
//! for servers and users without FUNCTION, with `EVALSHA`. The client builds every call as the
//! module's command; here it is sent as the chosen engine takes it (`FCALL rl_token <numkeys> <keys>
//! <the other arguments in order>`), and a call answered NOSCRIPT or "Function not found" (it never
//! ran: a restart, a failover, a flush, a cluster node that has not seen the library yet) loads the
//! library on that node and is sent again, once.

use crate::connection::{is_configuration_fault, Transport};
use ratelimit_core::commands::CommandInfo;
use redis::{Cmd, RedisError, RedisResult, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

/// The library's one source, `lua/ratelimit.lua` (`client/lua/ratelimit.lua` is a link to it, which
/// `cargo package` ships as the file; a test holds the two equal): what `FUNCTION LOAD` takes.
pub const LIBRARY: &str = include_str!("../lua/ratelimit.lua");

/// Which engine the limiter uses (see [`LimiterBuilder::backend`](crate::LimiterBuilder::backend)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The module when the server answers its commands, else the library through `FCALL` (loading
    /// it when this user may), else through `EVALSHA`. Asked on the first call, and again after an
    /// outage (a failover may land on another server).
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
    fn code(self) -> u8 {
        match self {
            Backend::Auto => 0,
            Backend::Module => 1,
            Backend::Functions => 2,
            Backend::Scripts => 3,
        }
    }

    fn from_code(code: u8) -> Backend {
        match code {
            1 => Backend::Module,
            2 => Backend::Functions,
            3 => Backend::Scripts,
            _ => Backend::Auto,
        }
    }

    /// Its name in what `verify` says.
    pub fn describe(self) -> &'static str {
        match self {
            Backend::Auto => "not chosen yet",
            Backend::Module => "the ratelimit module",
            Backend::Functions => "the Lua library through FCALL",
            Backend::Scripts => "the Lua library through EVALSHA scripts",
        }
    }
}

/// The engine a limiter asked for, the one it uses, and why.
pub(crate) struct Engine {
    wanted: Backend,
    chosen: AtomicU8,
    why: Mutex<String>,
    /// Whether a call has found the engine that answers (since the last outage): until then, a
    /// waited decision asks first with a read-only call, since a pipelined error hides its code.
    settled: std::sync::atomic::AtomicBool,
    /// One load of the library at a time: calls that find it missing together wait for one load
    /// instead of each sending the whole library.
    loading: tokio::sync::Mutex<()>,
}

impl Engine {
    pub(crate) fn new(wanted: Backend) -> Engine {
        let chosen = if wanted == Backend::Auto { Backend::Module } else { wanted };
        Engine {
            wanted,
            chosen: AtomicU8::new(chosen.code()),
            why: Mutex::new(String::new()),
            settled: std::sync::atomic::AtomicBool::new(false),
            loading: tokio::sync::Mutex::new(()),
        }
    }

    /// The engine in use and the reason it was chosen.
    pub(crate) fn chosen(&self) -> (Backend, String) {
        let why = self.why.lock().map(|w| w.clone()).unwrap_or_default();
        let chosen = Backend::from_code(self.chosen.load(Ordering::Relaxed));
        let why = match (self.wanted, why.is_empty()) {
            (Backend::Auto, true) => "the module answered".to_string(),
            (Backend::Auto, false) => why,
            (_, _) => "asked for".to_string(),
        };
        (chosen, why)
    }

    /// Chooses anew on the next call (after an outage: a failover may land on another server).
    pub(crate) fn forget(&self) {
        if self.wanted == Backend::Auto {
            self.settled.store(false, Ordering::Relaxed);
            self.choose(Backend::Module, String::new());
        }
    }

    fn choose(&self, engine: Backend, why: String) {
        self.chosen.store(engine.code(), Ordering::Relaxed);
        if let Ok(mut w) = self.why.lock() {
            *w = why;
        }
    }

    /// Sends `cmd`, a module command or any other, as the engine in use takes it (see the module's
    /// documentation); under `Auto`, moves to the next engine where the server refuses one.
    pub(crate) async fn query(
        &self,
        transport: &Transport,
        cmd: &Cmd,
        check_first: bool,
    ) -> RedisResult<Value> {
        let auto = self.wanted == Backend::Auto;
        // The common case, on the request path: the module is the engine and its command goes as it
        // is, without translating it. Only a refusal under `Auto` goes on to choose.
        if Backend::from_code(self.chosen.load(Ordering::Relaxed)) == Backend::Module {
            let result = transport.query(cmd, check_first).await;
            if !(auto && matches!(&result, Err(e) if refuses(e))) {
                if result.is_ok() && names_a_limiter(cmd) {
                    self.settled.store(true, Ordering::Relaxed);
                }
                return result;
            }
        }
        let Some(call) = Call::of(cmd) else { return transport.query(cmd, check_first).await };
        let mut reasons: Vec<String> = vec![];
        // A server without the library or the script (restarted, failed over, flushed) may be
        // another kind of server: under `Auto` the module is asked again first, once.
        let mut asked_again = !auto;
        loop {
            let engine = Backend::from_code(self.chosen.load(Ordering::Relaxed));
            let result = match engine {
                Backend::Functions => transport.query(&call.fcall(), check_first).await,
                Backend::Scripts => transport.query(&call.evalsha(), check_first).await,
                _ => transport.query(cmd, check_first).await,
            };
            let result = match &result {
                Err(e) if engine != Backend::Module && missing(e) && !asked_again => {
                    asked_again = true;
                    reasons.clear();
                    self.choose(Backend::Module, String::new());
                    continue;
                }
                Err(e) if engine != Backend::Module && missing(e) => match engine {
                    Backend::Scripts => {
                        transport.query(&call.with_script("EVAL", &call.script().code), false).await
                    }
                    _ => self.load_and_call(transport, &call).await,
                },
                _ => result,
            };
            let refused = match &result {
                Err(e) if auto && engine != Backend::Scripts && refuses(e) => e,
                _ => {
                    if !reasons.is_empty() {
                        reasons.push(format!("using {}", engine.describe()));
                        self.choose(engine, reasons.join("; "));
                    }
                    if result.is_ok() {
                        self.settled.store(true, Ordering::Relaxed);
                    }
                    return result;
                }
            };
            let next = if engine == Backend::Functions { Backend::Scripts } else { Backend::Functions };
            let noperm = refused.code() == Some("NOPERM");
            reasons.push(
                match (engine, noperm) {
                    (Backend::Functions, true) => "FCALL or FUNCTION LOAD refused to this user (NOPERM)",
                    (Backend::Functions, false) => "FCALL unknown to this server",
                    (_, true) => "the module's commands refused to this user (NOPERM)",
                    (_, false) => "module not loaded",
                }
                .to_string(),
            );
            self.chosen.store(next.code(), Ordering::Relaxed);
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
        let module = Backend::from_code(self.chosen.load(Ordering::Relaxed)) == Backend::Module;
        if module && (self.wanted == Backend::Module || self.settled.load(Ordering::Relaxed)) {
            return transport.query_waited(cmd, key, replicas, timeout).await;
        }
        let Some(call) = Call::of(cmd) else {
            return transport.query_waited(cmd, key, replicas, timeout).await;
        };
        if self.wanted == Backend::Auto && !self.settled.load(Ordering::Relaxed) {
            // A pipelined error (the decision, then WAIT) hides its code: the engine is found first
            // with a read-only call, so the decision itself is sent once.
            self.query(transport, redis::cmd("RL.INSPECT").arg(key), false).await?;
        }
        let mut chose_again = false;
        loop {
            let engine = Backend::from_code(self.chosen.load(Ordering::Relaxed));
            let sent = match engine {
                Backend::Functions => call.fcall(),
                Backend::Scripts => call.evalsha(),
                _ => cmd.clone(),
            };
            let result = transport.query_waited(&sent, key, replicas, timeout).await;
            match &result {
                Err(e) if missing(e) => {
                    load(transport, &call, engine).await?;
                    return transport.query_waited(&sent, key, replicas, timeout).await;
                }
                Err(e) if self.wanted == Backend::Auto && refuses(e) && !chose_again => {
                    chose_again = true;
                    self.query(transport, redis::cmd("RL.INSPECT").arg(key), false).await?;
                }
                _ => return result,
            }
        }
    }
}

impl Engine {
    /// `call` through FCALL where the library was missing: loaded by one call at a time; a call that
    /// waited for another's load finds it there.
    async fn load_and_call(&self, transport: &Transport, call: &Call) -> RedisResult<Value> {
        let _one = self.loading.lock().await;
        match transport.query(&call.fcall(), false).await {
            Err(e) if function_missing(&e) => {
                load(transport, call, Backend::Functions).await?;
                transport.query(&call.fcall(), false).await
            }
            result => result,
        }
    }
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

/// An answer that says this engine cannot work for this user here: its command unknown or refused.
fn refuses(e: &RedisError) -> bool {
    // A pipelined error (a waited decision) keeps only its text.
    let text = e.to_string();
    is_configuration_fault(e) || text.contains("unknown command") || text.contains("NOPERM")
}

/// Whether `cmd` is one of the module's limiter commands (an answer to it proves the engine).
fn names_a_limiter(cmd: &Cmd) -> bool {
    matches!(cmd.args_iter().next(), Some(redis::Arg::Simple(name)) if name.len() > 3 && name[..3].eq_ignore_ascii_case(b"RL."))
}

/// "Function not found" or NOSCRIPT: the library or the script is not on this server (or this node);
/// the call never ran.
fn missing(e: &RedisError) -> bool {
    // A pipelined error (a waited decision) keeps only its text.
    e.code() == Some("NOSCRIPT") || e.to_string().contains("NOSCRIPT") || function_missing(e)
}

/// "Function not found": the library is not loaded on this server (or this node).
fn function_missing(e: &RedisError) -> bool {
    e.detail().is_some_and(|d| d.to_ascii_lowercase().contains("function not found"))
        || e.to_string().to_ascii_lowercase().contains("function not found")
}

/// A library function's call: its name, keys and other arguments, in the command's order.
pub(crate) struct Call {
    function: String,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    /// The library's form of a module command; None for any other command (and the module-only
    /// ones: RL.TOP, RL.RESETSTATS, the dialects), which are sent as they are.
    pub(crate) fn of(cmd: &Cmd) -> Option<Call> {
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

    #[cfg(test)]
    pub(crate) fn function(&self) -> &str {
        &self.function
    }

    pub(crate) fn fcall(&self) -> Cmd {
        self.with_script("FCALL", &self.function)
    }

    pub(crate) fn evalsha(&self) -> Cmd {
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
pub(crate) fn library_hash(library: &str) -> &str {
    const FIELD: &str = "  source_hash = \"";
    library
        .find(FIELD)
        .map(|at| &library[at + FIELD.len()..])
        .and_then(|rest| rest.split_once('"'))
        .map_or("", |(hash, _)| hash)
}

pub(crate) use crate::evalsha::script_of;

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
