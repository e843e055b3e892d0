//! The Lua library and the module are one engine: property tests run call sequences of every kind
//! through `ratelimit-core` (the module's algorithms, time as a parameter, stored as the module's store
//! writes: `Model`) and through lua/ratelimit.lua on a real stock server, by FCALL and by each
//! function's EVALSHA script (lua/scripts/; their clock replaced by an argument:
//! `lua::with_clock_argument`), and hold equal every reply, every stored byte and every
//! expiry (PEXPIRETIME). Parameters span the accepted ranges and their extremes; costs of 0, 1 and
//! above the limit; time steps small, large and backwards; keys that start empty, in this release's
//! formats, in release 0.1's untagged formats, or holding other data.

mod common;

use common::lua::{self, Reply};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use ratelimit_core::args::{cost, wait_ns, whole as whole_number, ArgError};
use ratelimit_core::combine::all_or_nothing;
use ratelimit_core::error::StateError;
use ratelimit_core::fixed_window::FixedWindow;
use ratelimit_core::format::Layout;
use ratelimit_core::hold;
use ratelimit_core::kind::{AnyLimit, AnyLimiter, Declare, LimiterKind, RequestArgs};
use ratelimit_core::leases::{self, Leases};
use ratelimit_core::limiter::{apply, Change, Expiry, Limiter, Outcome, Peek, Write};
use ratelimit_core::reservation::MAX_WAIT;
use ratelimit_core::sliding_counter::SlidingCounter;
use ratelimit_core::sliding_log::{id_hash, SlidingLog, Width};
use ratelimit_core::time::{ceil_ms, Nanos, NANOS_PER_MS, NANOS_PER_SEC};
use ratelimit_core::token_bucket::{Reserve, TokenBucket};
use ratelimit_core::verdict::Verdict;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use testkit::redis::{self, Connection};
use testkit::Server;

/// Sequences per kind: `RL_LUA_CASES`, at least 2,000 unless set lower by hand.
fn cases() -> u32 {
    std::env::var("RL_LUA_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
}

// ------------------------------------------------------------------------------------------------
// Calls, as a command and as a function of the library.
// ------------------------------------------------------------------------------------------------

/// One call: the library's function, its keys (indexes into the sequence's keys) and its arguments
/// after the keys, as FCALL takes them.
#[derive(Debug, Clone)]
struct Call {
    function: &'static str,
    keys: Vec<usize>,
    args: Vec<String>,
}

fn call(function: &'static str, keys: &[usize], args: &[&str]) -> Call {
    Call { function, keys: keys.to_vec(), args: args.iter().map(|a| a.to_string()).collect() }
}

// ------------------------------------------------------------------------------------------------
// The model: core's algorithms, and the module's store (src/server/store.rs) over a map.
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    value: Vec<u8>,
    expire_ms: Option<i64>,
}

#[derive(Default)]
struct Model {
    keys: HashMap<String, Entry>,
}

/// An expiry that satisfies `expiry` (core's `Expiry::change`): the current one when it stays.
fn expiry_within(current: Option<i64>, expiry: Expiry, replaced: bool) -> Option<i64> {
    expiry.change(replaced, || current).or(current)
}

impl Model {
    fn stored(&self, key: &str) -> Option<&[u8]> {
        self.keys.get(key).map(|e| e.value.as_slice())
    }

    /// What the module's store does with a write (core's `Expiry::change`): an expiry that satisfies
    /// the write's stays (in place, or put back after a value of another length replaces it), else it
    /// is set; a derived expiry is set when the value is new or replaced or its grid point moved.
    fn apply(&mut self, key: &str, write: &Write) {
        let old = self.keys.get(key).cloned();
        let entry = match (&write.change, write.expiry) {
            (Change::Delete, _) => None,
            (Change::Set(bytes), expiry) => {
                let replaced = match (&old, expiry) {
                    (None, _) => true,
                    // A derived expiry is set again when the value's length changes; any other is
                    // put back after the value is replaced.
                    (Some(e), Expiry::Derived { .. }) => e.value.len() != bytes.as_ref().len(),
                    (Some(_), Expiry::Within { .. }) => false,
                };
                let expire_ms = expiry_within(old.as_ref().and_then(|e| e.expire_ms), expiry, replaced);
                Some(Entry { value: bytes.as_ref().to_vec(), expire_ms })
            }
            (change @ Change::Range { .. }, expiry) => {
                let mut e = old.expect("a range write on an existing value");
                apply(&mut e.value, change);
                e.expire_ms = expiry_within(e.expire_ms, expiry, false);
                Some(e)
            }
        };
        match entry {
            Some(e) => self.keys.insert(key.to_string(), e),
            None => self.keys.remove(key),
        };
    }

    fn call(&mut self, c: &Call, keys: &[String], now: Nanos) -> Reply {
        match self.decide(c, keys, now) {
            Ok(reply) => reply,
            Err(text) => Reply::Error(text),
        }
    }

    fn decide(&mut self, c: &Call, keys: &[String], now: Nanos) -> Result<Reply, String> {
        let key = &keys[c.keys[0]];
        let a: Vec<&[u8]> = c.args.iter().map(|s| s.as_bytes()).collect();
        match c.function {
            "rl_token" if c.keys.len() == 1 => {
                let bucket = TokenBucket::parse([a[0], a[1]]).map_err(arg)?;
                let units = cost(a[2]).map_err(param)?;
                self.one(key, |s| bucket.decide(s, now, units))
            }
            "rl_token" => {
                let mut limits = Vec::new();
                for g in a.chunks(3) {
                    let bucket = TokenBucket::parse([g[0], g[1]]).map_err(arg)?;
                    limits.push(AnyLimit::TokenBucket(bucket, cost(g[2]).map_err(param)?));
                }
                let names: Vec<&String> = c.keys.iter().map(|&i| &keys[i]).collect();
                self.all(&names, &limits, now)
            }
            "rl_fixed" => {
                let units = a.get(2).map_or(Ok(1), |u| cost(u)).map_err(param)?;
                let window = FixedWindow::parse([a[0], a[1]]).map_err(arg)?;
                self.one(key, |s| window.decide(s, now, units))
            }
            "rl_slidecount" => {
                let units = a.get(2).map_or(Ok(1), |u| cost(u)).map_err(param)?;
                let counter = SlidingCounter::parse([a[0], a[1]]).map_err(arg)?;
                self.one(key, |s| counter.decide(s, now, units))
            }
            "rl_slide" => {
                let dedup = a.len() == 4;
                let log = SlidingLog::parse([a[0], a[1]]).map_err(arg)?;
                let id = log.request(RequestArgs::Id { id: a[2], dedup }, id_hash).map_err(arg)?;
                self.one(key, |s| log.decide(s, now, id))
            }
            "rl_acquire" => {
                let request = RequestArgs::Lease { id: a[2], weight: a.get(4).copied() };
                Leases::precheck(request).map_err(arg)?;
                let ls = Leases::parse([a[0], a[1]]).map_err(arg)?;
                let acquire = ls.request(request, id_hash).map_err(arg)?;
                self.one(key, |s| ls.decide(s, now, acquire))
            }
            "rl_take" => {
                let bucket = TokenBucket::parse([a[0], a[1]]).map_err(arg)?;
                let max = whole_number(a[2], "max", 1, "must be a whole number >= 1").map_err(param)?;
                let (outcome, taken) = bucket.take(self.stored(key), now, max).map_err(state)?;
                if let Some(w) = &outcome.write {
                    self.apply(key, w);
                }
                Ok(limit_reply(&outcome.verdict, Some(taken as i64)))
            }
            "rl_reserve" => {
                // As src/command/reserve.rs reads them: the option's value, the bucket, the cost, the wait.
                let upto = match a.get(5) {
                    Some(max) => {
                        Some(whole_number(max, "max", 1, "must be a whole number >= 1").map_err(param)?)
                    }
                    None => None,
                };
                let bucket = TokenBucket::parse([a[0], a[1]]).map_err(arg)?;
                let units = cost(a[2]).map_err(param)?;
                let max_wait_ns = wait_ns(a[3], MAX_WAIT).map_err(param)?;
                let request = Reserve { cost: units, upto: upto.unwrap_or(units).max(units), max_wait_ns };
                let (outcome, taken) = bucket.reserve(self.stored(key), now, request).map_err(state)?;
                if let Some(w) = &outcome.write {
                    self.apply(key, w);
                }
                Ok(limit_reply(&outcome.verdict, upto.map(|_| taken as i64)))
            }
            "rl_refund" => {
                let kind = LimiterKind::from_group(a[0]).expect("the sequences refund known kinds");
                let limiter = AnyLimiter::parse(kind, [a[1], a[2]]).map_err(arg)?;
                let units = cost(a[3]).map_err(param)?;
                let (write, verdict) =
                    limiter.refund(self.stored(key), now, units).expect("refunds").map_err(state)?;
                if let Some(w) = &write {
                    self.apply(key, w);
                }
                Ok(limit_reply(&verdict, None))
            }
            "rl_release" => {
                let id = leases::holder(a[0]).map_err(param)?;
                let (released, write) = Leases::release(self.stored(key), now, id).map_err(state)?;
                if let Some(w) = &write {
                    self.apply(key, w);
                }
                Ok(Reply::Int(i64::from(released)))
            }
            "rl_renew" => {
                let lease = leases::lease_ns(a[0]).map_err(param)?;
                let id = leases::holder(a[1]).map_err(param)?;
                let (renewed, write) = Leases::renew(self.stored(key), now, id, lease).map_err(state)?;
                if let Some(w) = &write {
                    self.apply(key, w);
                }
                Ok(Reply::Int(i64::from(renewed)))
            }
            "rl_all" => self.rl_all(c, keys, now),
            "rl_hold" => self.rl_hold(c, keys, now),
            "rl_settle" => self.rl_settle(c, keys, now),
            "rl_inspect" => self.inspect(key, &a, now),
            other => panic!("no model of {other}"),
        }
    }

    /// One request on one key (the module's `limit::decide`).
    fn one(
        &mut self,
        key: &str,
        decide: impl FnOnce(Option<&[u8]>) -> Result<Outcome, StateError>,
    ) -> Result<Reply, String> {
        let outcome = decide(self.stored(key)).map_err(state)?;
        if let Some(w) = &outcome.write {
            self.apply(key, w);
        }
        Ok(limit_reply(&outcome.verdict, None))
    }

    /// One request over several keys (the module's `limit::decide_all`).
    fn all(&mut self, keys: &[&String], limits: &[AnyLimit], now: Nanos) -> Result<Reply, String> {
        for (i, k) in keys.iter().enumerate() {
            if keys[..i].contains(k) {
                return Err("ERR the same key appears more than once".into());
            }
        }
        let mut outcomes = Vec::new();
        for (k, l) in keys.iter().zip(limits) {
            outcomes.push(l.decide(self.stored(k), now).map_err(state)?);
        }
        let combined = all_or_nothing(outcomes).expect("at least one limit");
        for (k, o) in keys.iter().zip(&combined.outcomes) {
            if let Some(w) = &o.write {
                self.apply(k, w);
            }
        }
        Ok(limit_reply(&combined.verdict, Some(combined.limiting as i64 + 1)))
    }

    /// RL.ALL's groups, as the module reads them from `key KIND p1 p2 request...`.
    fn rl_all(&mut self, c: &Call, keys: &[String], now: Nanos) -> Result<Reply, String> {
        let mut command: Vec<Vec<u8>> = Vec::new();
        let mut at = 0;
        for &k in &c.keys {
            let kind = LimiterKind::from_group(c.args[at].as_bytes()).expect("known kinds");
            let len = 1 + kind.group_len(&c.args[at + 1..].iter().map(|s| s.as_bytes()).collect::<Vec<_>>());
            command.push(keys[k].as_bytes().to_vec());
            command.extend(c.args[at..at + len].iter().map(|s| s.as_bytes().to_vec()));
            at += len;
        }
        let bytes: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
        let (mut names, mut limits, mut at) = (Vec::new(), Vec::new(), 0);
        while at < bytes.len() {
            let (limit, len) =
                AnyLimit::parse_group(&bytes[at + 1..], id_hash, &AnyLimiter::parse).map_err(arg)?;
            let name = &keys[c.keys[names.len()]];
            if names.contains(&name) {
                return Err("ERR the same key appears more than once".into());
            }
            names.push(name);
            limits.push(limit);
            at += 1 + len;
        }
        self.all(&names, &limits, now)
    }

    /// RL.HOLD as the module reads it (src/command/hold.rs), decided by core's `hold`.
    fn rl_hold(&mut self, c: &Call, keys: &[String], now: Nanos) -> Result<Reply, String> {
        let a: Vec<&[u8]> = c.args.iter().map(|s| s.as_bytes()).collect();
        let id = hold::id(a[0]).map_err(param)?;
        let ttl_ms = hold::ttl_ms(a[1]).map_err(param)?;
        let abandon = hold::Abandon::parse(a[2]).map_err(arg)?;
        let (mut groups, mut names, mut at) = (Vec::new(), Vec::<&str>::new(), 3);
        for &k in &c.keys[1..] {
            let (limit, len) = AnyLimit::parse_group(&a[at..], id_hash, &AnyLimiter::parse).map_err(arg)?;
            let name = keys[k].as_str();
            if names.contains(&name) {
                return Err("ERR the same key appears more than once".into());
            }
            names.push(name);
            groups.push(hold::Group { key: name.as_bytes(), limit, params: [a[at + 1], a[at + 2]] });
            at += len;
        }
        let ledger = keys[c.keys[0]].clone();
        let reply =
            hold::hold(self, ledger.as_bytes(), id, ttl_ms, abandon, &groups, now).map_err(hold_error)?;
        Ok(Reply::Array(reply.into_iter().map(Reply::Int).collect()))
    }

    /// RL.SETTLE as the module reads it (src/command/settle.rs).
    fn rl_settle(&mut self, c: &Call, keys: &[String], now: Nanos) -> Result<Reply, String> {
        let a: Vec<&[u8]> = c.args.iter().map(|s| s.as_bytes()).collect();
        let id = hold::id(a[0]).map_err(param)?;
        let mode = hold::Mode::parse(a[1]).map_err(arg)?;
        let mut named = Vec::new();
        for (i, &k) in c.keys[1..].iter().enumerate() {
            named.push((keys[k].clone(), cost(a[2 + i]).map_err(param)?));
        }
        let named: Vec<(&[u8], u64)> = named.iter().map(|(k, n)| (k.as_bytes(), *n)).collect();
        let ledger = keys[c.keys[0]].clone();
        Ok(match hold::settle(self, ledger.as_bytes(), id, mode, &named, now).map_err(hold_error)? {
            Some(reply) => Reply::Array(reply.into_iter().map(Reply::Int).collect()),
            None => Reply::Nil,
        })
    }

    /// RL.INSPECT key [p1 p2] (src/command/inspect.rs), as RESP2 replies its map.
    fn inspect(&self, key: &str, params: &[&[u8]], now: Nanos) -> Result<Reply, String> {
        let Some(entry) = self.keys.get(key) else { return Ok(Reply::Nil) };
        let ttl_ms = entry.expire_ms.map_or(-1, |at| (at - now / NANOS_PER_MS).max(0));
        if Layout::of(&entry.value) == Some(Layout::DecimalTat) {
            // A dialect's key: the module describes it, the library refuses (docs/lua.md).
            return Err("ERR RL.INSPECT of a CL.THROTTLE key needs the module".into());
        }
        let kind = LimiterKind::of(&entry.value).ok_or_else(|| state(StateError))?;
        let peek: Option<Peek> = match params {
            [p1, p2] => Some(
                AnyLimiter::parse(kind, [p1, p2])
                    .map_err(arg)?
                    .peek(Some(&entry.value), now)
                    .map_err(state)?,
            ),
            _ => None,
        };
        let status = |s: &str| Reply::Status(s.to_string());
        let mut out = vec![status("limiter"), status(kind.command())];
        for (name, value) in kind.describe(&entry.value, now).map_err(state)? {
            if value.is_some_and(|v| v >= 1 << 53) {
                // Beyond what a Lua number replies exactly: the library refuses (docs/lua.md).
                return Err(
                    "ERR the key holds a value beyond 2^53, which the Lua library cannot reply exactly"
                        .into(),
                );
            }
            out.push(status(name));
            out.push(value.map_or(Reply::Nil, Reply::Int));
        }
        out.extend([status("ttl_ms"), Reply::Int(ttl_ms)]);
        if let Some(Peek { now: p, one }) = peek {
            out.extend([status("remaining"), Reply::Int(i64::try_from(p.remaining).unwrap_or(i64::MAX))]);
            out.extend([status("retry_after_ms"), Reply::Int(one.retry_after_ns.map_or(-1, ceil_ms))]);
            out.extend([status("reset_after_ms"), Reply::Int(ceil_ms(p.reset_after_ns))]);
        }
        Ok(Reply::Array(out))
    }
}

impl hold::Store for Model {
    type Error = hold::HoldError;
    fn read(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, hold::HoldError> {
        Ok(self.stored(std::str::from_utf8(key).expect("test keys are text")).map(<[u8]>::to_vec))
    }
    fn apply(&mut self, key: &[u8], write: &Write) -> Result<(), hold::HoldError> {
        Model::apply(self, std::str::from_utf8(key).expect("test keys are text"), write);
        Ok(())
    }
}

fn hold_error(e: hold::HoldError) -> String {
    match e {
        hold::HoldError::Param(p) => param(p),
        hold::HoldError::State => state(StateError),
        hold::HoldError::DuplicateKey => "ERR the same key appears more than once".into(),
    }
}

fn limit_reply(v: &Verdict, sixth: Option<i64>) -> Reply {
    let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut out = vec![
        i64::from(v.allowed),
        clamp(v.limit),
        clamp(v.remaining),
        v.retry_after_ns.map_or(-1, ceil_ms),
        ceil_ms(v.reset_after_ns),
    ];
    out.extend(sixth);
    Reply::Array(out.into_iter().map(Reply::Int).collect())
}

fn arg(e: ArgError) -> String {
    match e {
        ArgError::Invalid(p) => format!("ERR {p}"),
        ArgError::Syntax => "ERR syntax error".into(),
        ArgError::WrongArity => panic!("the sequences call with the right number of arguments"),
    }
}

fn param(e: ratelimit_core::error::ParamError) -> String {
    format!("ERR {e}")
}

fn state(_: StateError) -> String {
    "ERR the key holds a value that is not this limiter's state".into()
}

// ------------------------------------------------------------------------------------------------
// Stored values a sequence starts from: this release's formats, 0.1's, and other data.
// ------------------------------------------------------------------------------------------------

/// A u64 word of a stored value: relative to the sequence's start (ns, or a window index), or as is.
#[derive(Debug, Clone)]
enum Word {
    Ns(i64),
    WindowIndex { window_ns: i64, offset: i64 },
    Abs(u64),
}

#[derive(Debug, Clone)]
enum Init {
    /// Little-endian words, behind a tag or untagged (0.1).
    Words {
        tag: Option<&'static [u8; 4]>,
        words: Vec<Word>,
    },
    /// A sliding log: its entries (us from the start, an id of the pool or none), fillers before.
    Log {
        dedup: bool,
        slots: usize,
        entries: Vec<(i64, Option<usize>)>,
    },
    /// Leases: (holder of the pool, end in us from the start, weight).
    Leases(Vec<(usize, i64, u32)>),
    Raw(Vec<u8>),
}

const IDS: [&str; 4] = ["a", "b", "c", "holder-7"];

impl Init {
    fn bytes(&self, start: Nanos) -> Vec<u8> {
        let word = |w: &Word| match *w {
            Word::Ns(off) => start.saturating_add(off) as u64,
            Word::WindowIndex { window_ns, offset } => {
                ((start / window_ns) as u64).wrapping_add(offset as u64)
            }
            Word::Abs(v) => v,
        };
        let start_us = (start / 1000) as u64;
        match self {
            Init::Words { tag, words } => {
                let mut out = tag.map(|t| t.to_vec()).unwrap_or_default();
                words.iter().for_each(|w| out.extend_from_slice(&word(w).to_le_bytes()));
                out
            }
            Init::Log { dedup, slots, entries } => {
                let mut list: Vec<(u64, u64)> = entries
                    .iter()
                    .map(|&(off, id)| {
                        (start_us.saturating_add_signed(off), id.map_or(0, |i| id_hash(IDS[i].as_bytes())))
                    })
                    .collect();
                list.sort();
                list.dedup_by_key(|e| e.0);
                let width = if *dedup { Width::WithIds } else { Width::Plain };
                ratelimit_core::sliding_log::build(width, (*slots).max(list.len()).max(1), &list)
            }
            Init::Leases(list) => {
                let mut out = b"RLA\x01".to_vec();
                for &(who, off, weight) in list {
                    out.extend_from_slice(&sha1_16(IDS[who]));
                    out.extend_from_slice(&start_us.saturating_add_signed(off).to_le_bytes());
                    out.extend_from_slice(&weight.to_le_bytes());
                }
                out
            }
            Init::Raw(bytes) => bytes.clone(),
        }
    }
}

fn sha1_16(id: &str) -> [u8; 16] {
    use sha1::{Digest, Sha1};
    let mut out = [0u8; 16];
    out.copy_from_slice(&Sha1::digest(id.as_bytes())[..16]);
    out
}

// ------------------------------------------------------------------------------------------------
// A sequence and its run through both engines.
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Sequence {
    /// Keys 0..: each may start with a stored value, with an expiry (ms after the start) or none.
    init: Vec<(usize, Init, Option<i64>)>,
    /// Nanoseconds after the base where the sequence starts.
    start: i64,
    /// Each call after a step of time (ns; negative: the clock stepped back).
    steps: Vec<(i64, Call)>,
}

const KEYS: usize = 4;

struct Harness {
    con: RefCell<Connection>,
    /// Each function's EVALSHA script (lua/scripts/, its clock the argument) by name: its SHA-1.
    scripts: HashMap<String, String>,
    base: Nanos,
    seq: Cell<u64>,
    /// Replies compared: allowed, denied, errors, others (so a run shows it decided something).
    tally: Cell<[u64; 4]>,
}

impl Harness {
    fn start() -> (Server, Harness) {
        let server = Server::builder().stock().start();
        let mut con = server.conn();
        lua::load(&mut con, &lua::with_clock_argument(&lua::source()));
        let scripts = lua::scripts()
            .into_iter()
            .map(|(name, code)| {
                let sha: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(lua::with_clock_argument(&code))
                    .query(&mut con)
                    .expect("SCRIPT LOAD");
                (name, sha)
            })
            .collect();
        let (s, us): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
        // Ten days ahead of the server's clock: every expiry the sequences set lies in its future, so
        // the server keeps every key the model keeps.
        let base = s * NANOS_PER_SEC + us * 1000 + 10 * 86_400 * NANOS_PER_SEC;
        (
            server,
            Harness { con: RefCell::new(con), scripts, base, seq: Cell::new(0), tally: Cell::new([0; 4]) },
        )
    }

    /// The sequence through FCALL and through each function's EVALSHA script, on keys of their own.
    fn check(&self, s: &Sequence) -> Result<(), TestCaseError> {
        let n = self.seq.get();
        self.seq.set(n + 1);
        self.check_through(s, &format!("f{n}"), false)?;
        self.check_through(s, &format!("e{n}"), true)
    }

    fn check_through(&self, s: &Sequence, name: &str, scripts: bool) -> Result<(), TestCaseError> {
        let keys: Vec<String> = (0..KEYS).map(|k| format!("{name}:{{x}}:{k}")).collect();
        // Also the keys a hold of key 0's ledger writes (`<ledger>:<id>`), in a sequence of holds.
        let holds = s.steps.iter().any(|(_, c)| c.function == "rl_hold");
        let own = IDS[..3].iter().filter(|_| holds).map(|id| format!("{}:{id}", keys[0]));
        let watched: Vec<String> = keys.iter().cloned().chain(own).collect();
        let start = self.base + s.start;
        let mut model = Model::default();
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for (k, init, expire) in &s.init {
            let bytes = init.bytes(start);
            let expire_ms = expire.map(|off| start / NANOS_PER_MS + off);
            let set = pipe.cmd("SET").arg(&keys[*k]).arg(&bytes);
            if let Some(at) = expire_ms {
                set.arg("PXAT").arg(at);
            }
            model.keys.insert(keys[*k].clone(), Entry { value: bytes, expire_ms });
        }
        let mut now = start;
        let mut expected = Vec::new();
        for (step, c) in &s.steps {
            now = (now + step).max(self.base);
            let f = if scripts {
                pipe.cmd("EVALSHA").arg(&self.scripts[c.function])
            } else {
                pipe.cmd("FCALL").arg(c.function)
            };
            f.arg(c.keys.len());
            c.keys.iter().for_each(|&k| {
                f.arg(&keys[k]);
            });
            f.arg(now.to_string()).arg(&c.args);
            expected.push(model.call(c, &keys, now));
            for key in &watched {
                pipe.cmd("GET").arg(key).cmd("PEXPIRETIME").arg(key);
                expected.push(model.keys.get(key).map_or(Reply::Nil, |e| Reply::Bulk(e.value.clone())));
                let expire = model.keys.get(key).map_or(-2, |e| e.expire_ms.unwrap_or(-1));
                expected.push(Reply::Int(expire));
            }
        }
        let mut got = lua::run(&mut self.con.borrow_mut(), &pipe);
        got.drain(..s.init.len());
        let per_step = 1 + 2 * watched.len();
        for (i, (want, have)) in expected.iter().zip(&got).enumerate() {
            if want != have {
                let step = i / per_step;
                let what = match i % per_step {
                    0 => "the reply".to_string(),
                    j if j % 2 == 1 => format!("the bytes of key {}", (j - 1) / 2),
                    j => format!("the expiry of key {}", (j - 2) / 2),
                };
                return Err(TestCaseError::fail(format!(
                    "step {step} ({:?}, {}): {what} differs: core {want:?}, Lua {have:?}",
                    s.steps[step].1,
                    if scripts { "EVALSHA" } else { "FCALL" }
                )));
            }
        }
        prop_assert_eq!(expected.len(), got.len());
        let mut tally = self.tally.get();
        for reply in expected.iter().step_by(per_step) {
            let slot = match reply {
                Reply::Array(v) if v.first() == Some(&Reply::Int(1)) && v.len() <= 6 => 0,
                Reply::Array(v) if v.first() == Some(&Reply::Int(0)) && v.len() <= 6 => 1,
                Reply::Error(e) => {
                    if std::env::var("RL_LUA_SHOW_ERRORS").is_ok() {
                        eprintln!("{e}");
                    }
                    2
                }
                _ => 3,
            };
            tally[slot] += 1;
        }
        self.tally.set(tally);
        Ok(())
    }

    fn run(&self, name: &str, strategy: impl Strategy<Value = Sequence>) {
        let mut runner =
            TestRunner::new(Config { cases: cases(), failure_persistence: None, ..Config::default() });
        if let Err(e) = runner.run(&strategy, |s| self.check(&s)) {
            panic!("{name}: {e}");
        }
        let [allowed, denied, errors, others] = self.tally.get();
        eprintln!(
            "{name}: {} sequences equal; replies: {allowed} allowed, {denied} denied, {errors} errors, {others} others",
            cases()
        );
        assert!(allowed > 0 && denied > 0, "the sequences decided nothing");
    }
}

// ------------------------------------------------------------------------------------------------
// Strategies: parameters across their ranges and extremes.
// ------------------------------------------------------------------------------------------------

fn text(s: &'static str) -> BoxedStrategy<String> {
    Just(s.to_string()).boxed()
}

fn whole(range: std::ops::RangeInclusive<u64>) -> BoxedStrategy<String> {
    range.prop_map(|n| n.to_string()).boxed()
}

/// A limit or capacity: small mostly, large, the largest the library replies exactly, and forms
/// the grammar takes (`+3`, `007`).
fn limit() -> BoxedStrategy<String> {
    prop_oneof![
        40 => whole(1..=12),
        6 => whole(1..=100_000),
        1 => text("9007199254740991"),
        1 => text("+3"),
        1 => text("007"),
        1 => text("0"),
    ]
    .boxed()
}

fn rate() -> BoxedStrategy<String> {
    prop_oneof![
        30 => whole(1..=100),
        3 => text("0.5"),
        1 => text("3"),
        1 => text("1e9"),
        1 => text("1000000001"),
        1 => text("0.001"),
        1 => text("1e-9"),
        1 => text("0.333333333333333333333333333333333333"),
        1 => text("0.083333333333333328707404064062"),
        1 => text("2.5E-1"),
        1 => text("1e400"),
        1 => text("-1"),
        6 => (1u64..100_000, 0u32..6).prop_map(|(m, e)| format!("{m}e-{e}")),
    ]
    .boxed()
}

fn window() -> BoxedStrategy<String> {
    prop_oneof![
        30 => whole(1..=120),
        15 => (1u64..=5000).prop_map(|ms| format!("{}.{:03}", ms / 1000, ms % 1000)),
        1 => text("0.001"),
        1 => text("3000000000"),
        1 => text("2.5e1"),
        1 => text("0.0005"),
        1 => text("3000000000.001"),
    ]
    .boxed()
}

fn units() -> BoxedStrategy<String> {
    prop_oneof![
        12 => text("1"),
        6 => text("0"),
        12 => whole(2..=14),
        1 => text("18446744073709551615"),
        1 => text("99999999999999999999"),
        1 => text("9007199254740993"),
    ]
    .boxed()
}

/// A reservation's max_wait: none, small, about a refill, beyond one, and texts the grammar refuses.
fn max_wait() -> BoxedStrategy<String> {
    prop_oneof![
        6 => text("0"),
        1 => text("0.000"),
        10 => (1u64..=2500).prop_map(|ms| format!("{}.{:03}", ms / 1000, ms % 1000)),
        4 => whole(1..=30),
        2 => text("3600"),
        1 => text("3000000000"),
        1 => text("3000000000.001"),
        1 => text("0.0005"),
        1 => text("-1"),
        1 => text("1e400"),
        1 => text("abc"),
        1 => text("+0.5"),
        1 => text("2.5e-1"),
    ]
    .boxed()
}

/// RL.RESERVE's calls on key 0: `capacity rate cost max_wait`, with `UPTO max` at times.
fn reserve_call(capacity: String, rate: String) -> BoxedStrategy<Call> {
    let upto = prop_oneof![
        6 => Just(None),
        3 => whole(1..=20).prop_map(Some),
        1 => text("0").prop_map(Some),
        1 => text("18446744073709551615").prop_map(Some),
    ];
    (units(), max_wait(), upto, prop_oneof![4 => Just("UPTO"), 1 => Just("upto")])
        .prop_map(move |(n, w, upto, option)| {
            let mut args = vec![capacity.clone(), rate.clone(), n, w];
            if let Some(max) = upto {
                args.extend([option.to_string(), max]);
            }
            Call { function: "rl_reserve", keys: vec![0], args }
        })
        .boxed()
}

/// A step of time: small, whole milliseconds, large, backwards, none.
fn step() -> BoxedStrategy<i64> {
    prop_oneof![
        4 => 0i64..2 * NANOS_PER_SEC,
        3 => (0i64..5_000).prop_map(|ms| ms * NANOS_PER_MS),
        1 => (0i64..1_000_000).prop_map(|s| s * NANOS_PER_SEC),
        1 => (-10_000i64..0).prop_map(|s| s * NANOS_PER_SEC),
        1 => (-2_000i64..0).prop_map(|ms| ms * NANOS_PER_MS),
        2 => Just(0i64),
    ]
    .boxed()
}

fn expiry() -> BoxedStrategy<Option<i64>> {
    // Kept as is, or, for a value that is not this limiter's, refused: both engines alike.
    prop_oneof![2 => Just(None), 1 => (1i64..100_000).prop_map(Some)].boxed()
}

fn other_data() -> BoxedStrategy<Init> {
    prop_oneof![
        Just(Init::Raw(b"hello".to_vec())),
        Just(Init::Raw(b"1700000000000000000".to_vec())),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Init::Raw),
    ]
    .boxed()
}

fn sequence(
    init: BoxedStrategy<Option<Init>>,
    calls: BoxedStrategy<Call>,
    len: std::ops::Range<usize>,
) -> impl Strategy<Value = Sequence> {
    (init, expiry(), 0i64..20_000 * NANOS_PER_SEC, proptest::collection::vec((step(), calls), len)).prop_map(
        |(init, expire, start, steps)| Sequence {
            init: init.map(|i| vec![(0, i, expire)]).unwrap_or_default(),
            start: start + 20_000 * NANOS_PER_SEC,
            steps,
        },
    )
}

fn inspect(params: Option<(String, String)>) -> Call {
    match params {
        Some((p1, p2)) => call("rl_inspect", &[0], &[&p1, &p2]),
        None => call("rl_inspect", &[0], &[]),
    }
}

// ------------------------------------------------------------------------------------------------
// The tests: one server each, 2,000 sequences per kind.
// ------------------------------------------------------------------------------------------------

fn token_sequences() -> impl Strategy<Value = Sequence> {
    let ns_word = prop_oneof![
        3 => (-5 * NANOS_PER_SEC..5 * NANOS_PER_SEC).prop_map(Word::Ns),
        1 => (NANOS_PER_SEC..4_000_000 * NANOS_PER_SEC).prop_map(Word::Ns),
        1 => any::<u64>().prop_map(Word::Abs),
    ];
    let init = prop_oneof![
        2 => Just(None),
        2 => ns_word.clone().prop_map(|w| Some(Init::Words { tag: Some(b"RLT\x01"), words: vec![w] })),
        2 => ns_word.prop_map(|w| Some(Init::Words { tag: None, words: vec![w] })),
        1 => other_data().prop_map(Some),
    ]
    .boxed();
    // Large buckets too (up to 10^10; from 10^6, the fast path's full refill, capacity * 10^9 * the
    // rate's scale, passes 2^52 as one product).
    let capacity = prop_oneof![
        6 => limit(),
        1 => whole(1..=10_000_000_000),
        2 => whole(1_000_000..=1_000_000_000),
    ];
    // Mostly the sequence's own bucket; sometimes others on the same key.
    (capacity, rate()).prop_flat_map(move |(capacity, rate_s)| {
        let rate = rate_s;
        let (c, r) = (capacity.clone(), rate.clone());
        let calls = prop_oneof![
            8 => units().prop_map(move |n| call("rl_token", &[0], &[&c, &r, &n])),
            1 => (limit(), self::rate(), units()).prop_map(|(c, r, n)| call("rl_token", &[0], &[&c, &r, &n])),
            2 => (units(), limit(), self::rate(), units()).prop_map({
                let (c, r) = (capacity.clone(), rate.clone());
                move |(n, c2, r2, n2)| call("rl_token", &[0, 1], &[&c, &r, &n, &c2, &r2, &n2])
            }),
            2 => prop_oneof![whole(1..=20), text("0"), text("18446744073709551615")].prop_map({
                let (c, r) = (capacity.clone(), rate.clone());
                move |max| call("rl_take", &[0], &[&c, &r, &max])
            }),
            2 => units().prop_map({
                let (c, r) = (capacity.clone(), rate.clone());
                move |n| call("rl_refund", &[0], &["TOKEN", &c, &r, &n])
            }),
            1 => prop_oneof![Just(None), Just(Some((capacity.clone(), rate.clone())))].prop_map(inspect),
        ]
        .boxed();
        sequence(init.clone(), calls, 1..12)
    })
}

/// Reservations on a bucket's state: waits of none, some and beyond a refill, batches (UPTO), and
/// the bucket's other calls on the same key (RL.TOKEN, RL.TAKE, refunds of either kind, RL.INSPECT);
/// RL.ALL with RESERVE groups beside a TOKEN group.
fn reserve_sequences() -> impl Strategy<Value = Sequence> {
    let ns_word = prop_oneof![
        3 => (-5 * NANOS_PER_SEC..5 * NANOS_PER_SEC).prop_map(Word::Ns),
        2 => (NANOS_PER_SEC..40 * NANOS_PER_SEC).prop_map(Word::Ns),
        1 => (NANOS_PER_SEC..4_000_000 * NANOS_PER_SEC).prop_map(Word::Ns),
        1 => any::<u64>().prop_map(Word::Abs),
    ];
    let init = prop_oneof![
        3 => Just(None),
        2 => ns_word.clone().prop_map(|w| Some(Init::Words { tag: Some(b"RLT\x01"), words: vec![w] })),
        1 => ns_word.prop_map(|w| Some(Init::Words { tag: None, words: vec![w] })),
        1 => other_data().prop_map(Some),
    ]
    .boxed();
    // Small buckets mostly, so that queues form within a sequence's steps.
    let capacity = prop_oneof![8 => whole(1..=12), 1 => limit()];
    (capacity, rate()).prop_flat_map(move |(c, r)| {
        let calls = prop_oneof![
            12 => reserve_call(c.clone(), r.clone()),
            2 => (limit(), self::rate()).prop_flat_map(|(c, r)| reserve_call(c, r)),
            2 => units().prop_map({
                let (c, r) = (c.clone(), r.clone());
                move |n| call("rl_token", &[0], &[&c, &r, &n])
            }),
            1 => whole(1..=20).prop_map({
                let (c, r) = (c.clone(), r.clone());
                move |max| call("rl_take", &[0], &[&c, &r, &max])
            }),
            2 => (prop_oneof![Just("RESERVE"), Just("TOKEN"), Just("reserve")], units()).prop_map({
                let (c, r) = (c.clone(), r.clone());
                move |(group, n)| call("rl_refund", &[0], &[group, &c, &r, &n])
            }),
            2 => (units(), max_wait(), limit(), self::rate(), units(), any::<bool>()).prop_map({
                let (c, r) = (c.clone(), r.clone());
                move |(n, w, c2, r2, n2, first)| {
                    let reserve = vec!["RESERVE".to_string(), c.clone(), r.clone(), n, w];
                    let token = vec!["TOKEN".to_string(), c2, r2, n2];
                    let (keys, groups) = if first { ([0, 1], [reserve, token]) } else { ([1, 0], [token, reserve]) };
                    Call { function: "rl_all", keys: keys.to_vec(), args: groups.concat() }
                }
            }),
            1 => prop_oneof![Just(None), Just(Some((c.clone(), r.clone())))].prop_map(inspect),
        ]
        .boxed();
        sequence(init.clone(), calls, 1..14)
    })
}

/// The window limiters: `function` with its refund group and its stored layout.
fn window_sequences(function: &'static str, group: &'static str) -> impl Strategy<Value = Sequence> {
    (limit(), window()).prop_flat_map(move |(limit_s, window_s)| {
        let window_ns = ratelimit_core::window::window_ns(window_s.as_bytes()).unwrap_or(NANOS_PER_SEC);
        let words = if function == "rl_fixed" {
            (prop_oneof![0u64..15, any::<u64>()], -5 * NANOS_PER_SEC..200 * NANOS_PER_SEC)
                .prop_map(|(count, end)| vec![Word::Abs(count), Word::Ns(end)])
                .boxed()
        } else {
            (-3i64..3, 0u64..15, prop_oneof![0u64..15, any::<u64>()])
                .prop_map(move |(offset, current, previous)| {
                    vec![Word::WindowIndex { window_ns, offset }, Word::Abs(current), Word::Abs(previous)]
                })
                .boxed()
        };
        let tag: &'static [u8; 4] = if function == "rl_fixed" { b"RLF\x01" } else { b"RLC\x01" };
        let init = prop_oneof![
            2 => Just(None),
            2 => words.clone().prop_map(move |w| Some(Init::Words { tag: Some(tag), words: w })),
            2 => words.prop_map(|w| Some(Init::Words { tag: None, words: w })),
            1 => other_data().prop_map(Some),
        ]
        .boxed();
        let (l, w) = (limit_s.clone(), window_s.clone());
        let calls = prop_oneof![
            6 => units().prop_map({
                let (l, w) = (l.clone(), w.clone());
                move |n| call(function, &[0], &[&l, &w, &n])
            }),
            2 => Just(call(function, &[0], &[&l, &w])),
            1 => (limit(), window(), units()).prop_map(move |(l, w, n)| call(function, &[0], &[&l, &w, &n])),
            2 => units().prop_map({
                let (l, w) = (l.clone(), w.clone());
                move |n| call("rl_refund", &[0], &[group, &l, &w, &n])
            }),
            1 => prop_oneof![Just(None), Just(Some((l.clone(), w.clone())))].prop_map(inspect),
        ]
        .boxed();
        sequence(init, calls, 1..12)
    })
}

fn slide_sequences() -> impl Strategy<Value = Sequence> {
    let log_limit =
        prop_oneof![24 => whole(1..=8), 4 => whole(1..=40), 2 => text("1000000"), 1 => text("1000001")];
    (log_limit, window()).prop_flat_map(|(limit_s, window_s)| {
        let entries = proptest::collection::vec(
            (
                prop_oneof![4 => -70_000_000i64..0, 1 => 0i64..5_000_000, 1 => 0i64..10_000_000_000],
                proptest::option::of(0usize..IDS.len()),
            ),
            0..24,
        );
        let init = prop_oneof![
            2 => Just(None),
            3 => (any::<bool>(), 0usize..40, entries)
                .prop_map(|(dedup, slots, entries)| Some(Init::Log { dedup, slots, entries })),
            1 => other_data().prop_map(Some),
        ]
        .boxed();
        let id = prop_oneof![
            12 => (0usize..IDS.len()).prop_map(|i| IDS[i].to_string()),
            4 => "[a-z]{1,3}",
            1 => Just(String::new()),
        ];
        let (l, w) = (limit_s.clone(), window_s.clone());
        let calls = prop_oneof![
            8 => (id, any::<bool>()).prop_map({
                let (l, w) = (l.clone(), w.clone());
                move |(id, dedup)| {
                    let mut args = vec![l.as_str(), w.as_str(), id.as_str()];
                    if dedup {
                        args.push("DEDUP");
                    }
                    call("rl_slide", &[0], &args)
                }
            }),
            1 => prop_oneof![Just(None), Just(Some((l.clone(), w.clone())))].prop_map(inspect),
        ]
        .boxed();
        sequence(init, calls, 1..16)
    })
}

fn lease_sequences() -> impl Strategy<Value = Sequence> {
    let lease_limit = prop_oneof![24 => whole(1..=6), 2 => text("100000"), 1 => text("100001")];
    (lease_limit, window()).prop_flat_map(|(limit_s, lease_s)| {
        let records = proptest::collection::vec(
            (0usize..IDS.len(), prop_oneof![3 => -5_000_000i64..60_000_000, 1 => 0i64..5_000_000_000_000], 1u32..4),
            0..6,
        );
        let init = prop_oneof![
            2 => Just(None),
            3 => records.prop_map(|r| Some(Init::Leases(r))),
            1 => other_data().prop_map(Some),
        ]
        .boxed();
        let holder = prop_oneof![20 => (0usize..IDS.len()).prop_map(|i| IDS[i].to_string()), 1 => Just(String::new())];
        let weight = prop_oneof![
            12 => Just(None),
            6 => whole(1..=4).prop_map(Some),
            1 => Just(Some("100001".to_string())),
            1 => Just(Some("0".to_string())),
        ];
        let (l, w) = (limit_s.clone(), lease_s.clone());
        let calls = prop_oneof![
            6 => (holder.clone(), weight).prop_map({
                let (l, w) = (l.clone(), w.clone());
                move |(id, weight)| match weight {
                    Some(n) => call("rl_acquire", &[0], &[&l, &w, &id, "WEIGHT", &n]),
                    None => call("rl_acquire", &[0], &[&l, &w, &id]),
                }
            }),
            2 => holder.clone().prop_map(|id| call("rl_release", &[0], &[&id])),
            2 => (holder, prop_oneof![Just(w.clone()), window()]).prop_map(|(id, lease)| call("rl_renew", &[0], &[&lease, &id])),
            1 => prop_oneof![Just(None), Just(Some((l.clone(), w.clone())))].prop_map(inspect),
        ]
        .boxed();
        sequence(init, calls, 1..14)
    })
}

/// RL.ALL over keys of every kind: each key keeps its kind through the sequence, its parameters and
/// requests vary.
fn all_sequences() -> impl Strategy<Value = Sequence> {
    fn group(kind: usize) -> BoxedStrategy<Vec<String>> {
        let id = (0usize..IDS.len()).prop_map(|i| IDS[i].to_string());
        match kind {
            0 => (limit(), rate(), units()).prop_map(|(c, r, n)| vec!["TOKEN".into(), c, r, n]).boxed(),
            1 => (limit(), window(), units()).prop_map(|(l, w, n)| vec!["FIXED".into(), l, w, n]).boxed(),
            2 => {
                (limit(), window(), units()).prop_map(|(l, w, n)| vec!["SLIDECOUNT".into(), l, w, n]).boxed()
            }
            5 => (limit(), rate(), units(), max_wait())
                .prop_map(|(c, r, n, w)| vec!["RESERVE".into(), c, r, n, w])
                .boxed(),
            3 => (whole(1..=5), window(), id, any::<bool>())
                .prop_map(|(l, w, id, dedup)| {
                    let mut g = vec!["SLIDE".into(), l, w, id];
                    if dedup {
                        g.push("DEDUP".into());
                    }
                    g
                })
                .boxed(),
            _ => (whole(1..=5), window(), id, proptest::option::of(whole(1..=3)))
                .prop_map(|(l, w, id, weight)| {
                    let mut g = vec!["ACQUIRE".into(), l, w, id];
                    if let Some(weight) = weight {
                        g.extend(["WEIGHT".into(), weight]);
                    }
                    g
                })
                .boxed(),
        }
    }
    proptest::collection::vec(0usize..6, 1..=KEYS).prop_flat_map(|kinds| {
        let groups: Vec<BoxedStrategy<Vec<String>>> = kinds.iter().map(|&k| group(k)).collect();
        let calls = groups
            .prop_map(|groups| Call {
                function: "rl_all",
                keys: (0..groups.len()).collect(),
                args: groups.into_iter().flatten().collect(),
            })
            .boxed();
        sequence(Just(None).boxed(), calls, 1..10)
    })
}

/// Holds and settles over a ledger (key 0) and three limits (a fixed window, a bucket, a sliding
/// counter): repeated ids, partial and final settles, settles retried, holds ending by either
/// policy as the clock moves (and steps back), and refusals.
fn hold_sequences() -> impl Strategy<Value = Sequence> {
    let ids = (0usize..3).prop_map(|i| IDS[i].to_string());
    let ttl = prop_oneof![4 => text("0.5"), 4 => text("3"), 1 => text("0"), 1 => text("86400.001")];
    let abandon = prop_oneof![4 => text("CHARGE"), 4 => text("return"), 1 => text("LATER")];
    let mode = prop_oneof![4 => text("FINAL"), 4 => text("partial"), 1 => text("NOW")];
    let some_keys = proptest::sample::subsequence(vec![1usize, 2, 3], 1..=3);
    (whole(1..=30), prop_oneof![text("1"), text("10"), text("0.5")]).prop_flat_map(move |(limit, window)| {
        let group = {
            let (limit, window) = (limit.clone(), window.clone());
            move |k: usize, units: String| -> Vec<String> {
                match k {
                    1 => vec!["FIXED".into(), limit.clone(), window.clone(), units],
                    2 => vec!["TOKEN".into(), limit.clone(), "2".into(), units],
                    _ => vec!["SLIDECOUNT".into(), limit.clone(), window.clone(), units],
                }
            }
        };
        let holds = (
            ids.clone(),
            ttl.clone(),
            abandon.clone(),
            some_keys.clone(),
            proptest::collection::vec(0u64..25, 3),
        )
            .prop_map(move |(id, ttl, abandon, ks, units)| {
                let mut args = vec![id, ttl, abandon];
                for (i, &k) in ks.iter().enumerate() {
                    args.extend(group(k, units[i].to_string()));
                }
                let keys: Vec<usize> = std::iter::once(0).chain(ks).collect();
                Call { function: "rl_hold", keys, args }
            });
        let settles = (ids.clone(), mode.clone(), some_keys.clone(), proptest::collection::vec(0u64..40, 3))
            .prop_map(|(id, mode, ks, units)| {
                let mut args = vec![id, mode];
                args.extend(ks.iter().enumerate().map(|(i, _)| units[i].to_string()));
                let keys: Vec<usize> = std::iter::once(0).chain(ks).collect();
                Call { function: "rl_settle", keys, args }
            });
        let calls = prop_oneof![3 => holds, 3 => settles].boxed();
        let init = prop_oneof![8 => Just(None), 1 => other_data().prop_map(Some)].boxed();
        sequence(init, calls, 1..14)
    })
}

#[test]
fn holds_and_settles_equal_core() {
    let (_server, h) = Harness::start();
    h.run("RL.HOLD / RL.SETTLE", hold_sequences());
}

#[test]
fn the_token_bucket_and_its_take_and_refund_equal_core() {
    let (_server, h) = Harness::start();
    h.run("RL.TOKEN / RL.TAKE / RL.REFUND TOKEN / RL.INSPECT", token_sequences());
}

#[test]
fn reservations_and_their_refunds_equal_core() {
    let (_server, h) = Harness::start();
    h.run("RL.RESERVE / RL.ALL RESERVE / RL.REFUND RESERVE / RL.TOKEN / RL.TAKE", reserve_sequences());
}

#[test]
fn the_fixed_window_equals_core() {
    let (_server, h) = Harness::start();
    h.run("RL.FIXED / RL.REFUND FIXED / RL.INSPECT", window_sequences("rl_fixed", "FIXED"));
}

#[test]
fn the_sliding_counter_equals_core() {
    let (_server, h) = Harness::start();
    h.run(
        "RL.SLIDECOUNT / RL.REFUND SLIDECOUNT / RL.INSPECT",
        window_sequences("rl_slidecount", "SLIDECOUNT"),
    );
}

#[test]
fn the_sliding_log_equals_core() {
    let (_server, h) = Harness::start();
    h.run("RL.SLIDE / RL.INSPECT", slide_sequences());
}

#[test]
fn leases_equal_core() {
    let (_server, h) = Harness::start();
    h.run("RL.ACQUIRE / RL.RELEASE / RL.RENEW / RL.INSPECT", lease_sequences());
}

#[test]
fn all_or_nothing_over_every_kind_equals_core() {
    let (_server, h) = Harness::start();
    h.run("RL.ALL", all_sequences());
}

#[test]
fn layouts_the_library_reads_are_core_s() {
    // Every kind's tag is in the library's TAG_OF (written from core's by the generator), which the
    // library reads its layouts by.
    let source = lua::source();
    let tag_of = source.lines().find(|l| l.starts_with("local TAG_OF = {")).expect("the block's TAG_OF");
    for kind in LimiterKind::ALL {
        let tag = kind.layout().tag().expect("every kind's layout is tagged");
        let lua_tag = format!("\"{}\\{:03}\"", std::str::from_utf8(&tag[..3]).unwrap(), tag[3]);
        assert!(tag_of.contains(&lua_tag), "the library does not read {:?}: {tag_of}", kind.command());
        assert_eq!(Layout::of(&tag), None, "a tag alone is no value");
    }
}
