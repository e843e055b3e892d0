//! The seed's lab on a stock server (no module), through the Lua library loaded with FUNCTION LOAD
//! (FCALL) and through its EVALSHA scripts: a burst of 12 over two instances admits 10 and denies 2;
//! tokens refill; keys are isolated; 200 concurrent requests on one key admit exactly the capacity.

mod common;

use common::calls::Limit;
use common::lua;
use ratelimit_core::commands::{CommandInfo, VERSION_FUNCTION};
use std::sync::Barrier;
use std::time::Duration;
use testkit::redis::{self, Connection};
use testkit::{unique_key, Server};

/// How the library is called.
#[derive(Clone, Copy, Debug)]
enum Engine {
    Functions,
    /// EVALSHA of rl_token's script, loaded under this digest.
    Scripts,
}

struct Lab {
    server: Server,
    engine: Engine,
    sha: String,
}

impl Lab {
    fn start(engine: Engine, binary: Option<&str>) -> Lab {
        let builder = Server::builder().stock();
        let server = match binary {
            Some(b) => builder.binary(b).start(),
            None => builder.start(),
        };
        let mut con = server.conn();
        let sha = match engine {
            Engine::Functions => {
                lua::load(&mut con, &lua::source());
                String::new()
            }
            Engine::Scripts => {
                let script = lua::scripts().remove("rl_token").expect("an rl_token script");
                redis::cmd("SCRIPT").arg("LOAD").arg(script).query(&mut con).expect("SCRIPT LOAD")
            }
        };
        Lab { server, engine, sha }
    }

    /// One RL.TOKEN key capacity rate cost, through this lab's engine.
    fn token(&self, con: &mut Connection, key: &str, capacity: u64, rate: &str, cost: u64) -> Limit {
        let mut cmd = match self.engine {
            Engine::Functions => redis::cmd("FCALL").arg("rl_token").to_owned(),
            Engine::Scripts => redis::cmd("EVALSHA").arg(&self.sha).to_owned(),
        };
        cmd.arg(1).arg(key).arg(capacity).arg(rate).arg(cost);
        let reply: Vec<i64> = cmd.query(con).unwrap_or_else(|e| panic!("{:?}: {e}", self.engine));
        Limit::from_reply(&reply)
    }

    fn run(&self) {
        self.burst_over_two_instances();
        self.refill();
        self.isolation();
        self.race();
    }

    fn burst_over_two_instances(&self) {
        let key = unique_key("lab-burst");
        let mut instances = [self.server.conn(), self.server.conn()];
        let allowed =
            (0..12).filter(|i| self.token(&mut instances[i % 2], &key, 10, "0.001", 1).allowed).count();
        assert_eq!(allowed, 10, "{:?}: a burst of 12 over two instances", self.engine);
    }

    fn refill(&self) {
        let mut con = self.server.conn();
        let key = unique_key("lab-refill");
        while self.token(&mut con, &key, 4, "20", 1).allowed {}
        let denied = self.token(&mut con, &key, 4, "20", 1);
        assert!(!denied.allowed && denied.retry_after_ms > 0);
        std::thread::sleep(Duration::from_millis(denied.retry_after_ms as u64));
        assert!(
            self.token(&mut con, &key, 4, "20", 1).allowed,
            "{:?}: waiting retry_after_ms is enough",
            self.engine
        );
    }

    fn isolation(&self) {
        let mut con = self.server.conn();
        let (ada, bob) = (unique_key("lab-ada"), unique_key("lab-bob"));
        while self.token(&mut con, &ada, 10, "1", 1).allowed {}
        assert_eq!(self.token(&mut con, &bob, 10, "1", 1).head(), (true, 10, 9), "{:?}", self.engine);
    }

    fn race(&self) {
        let key = unique_key("lab-race");
        let connections = 50;
        let barrier = Barrier::new(connections);
        let allowed: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..connections)
                .map(|_| {
                    scope.spawn(|| {
                        let mut con = self.server.conn();
                        barrier.wait();
                        (0..4).filter(|_| self.token(&mut con, &key, 10, "0.001", 1).allowed).count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(allowed, 10, "{:?}: 200 concurrent requests at capacity 10", self.engine);
    }
}

#[test]
fn the_lab_through_fcall_on_a_stock_server() {
    Lab::start(Engine::Functions, None).run();
}

#[test]
fn the_lab_through_evalsha_on_a_stock_server() {
    Lab::start(Engine::Scripts, None).run();
}

/// Redis 6.2 has no FUNCTION: the EVALSHA scripts are its form. Runs when `RL_REDIS62_SERVER` names a
/// 6.2 redis-server binary; skipped otherwise.
#[test]
fn the_lab_through_evalsha_on_redis_6_2() {
    let Some(binary) = std::env::var("RL_REDIS62_SERVER").ok().filter(|b| !b.is_empty()) else {
        testkit::skip("no Redis 6.2 here (set RL_REDIS62_SERVER to a 6.2 redis-server)");
        return;
    };
    Lab::start(Engine::Scripts, Some(&binary)).run();
}

/// The scripts write what the functions write: one source.
#[test]
fn the_scripts_and_the_functions_store_the_same_bytes() {
    let functions = Lab::start(Engine::Functions, None);
    let scripts = Lab::start(Engine::Scripts, None);
    let (mut f, mut s) = (functions.server.conn(), scripts.server.conn());
    let key = "lab-same";
    functions.token(&mut f, key, 10, "0.001", 3);
    scripts.token(&mut s, key, 10, "0.001", 3);
    let layout = |con: &mut Connection| -> Vec<u8> {
        let v: Vec<u8> = redis::cmd("GET").arg(key).query(con).unwrap();
        v[..4].to_vec()
    };
    assert_eq!(layout(&mut f), b"RLT\x01");
    assert_eq!(layout(&mut s), b"RLT\x01");
    // Every function has its script, and the scripts hold nothing of their own but their end
    // (lua/src/evalsha.lua): every other line is the library's.
    let scripts = lua::scripts();
    let source = lua::source();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let end = std::fs::read_to_string(root.join("lua/src/evalsha.lua")).unwrap();
    let library_lines: std::collections::HashSet<&str> = source.lines().chain(end.lines()).collect();
    for name in CommandInfo::in_library().filter_map(|c| c.function) {
        let script = scripts.get(name).unwrap_or_else(|| panic!("no script for {name}"));
        for line in script.lines().skip(1) {
            let from_end = line.contains(name) || end.lines().any(|l| l.trim() == line.trim());
            assert!(
                library_lines.contains(line) || from_end,
                "{name}'s script has a line of its own: {line}"
            );
        }
        assert!(source.contains(&format!("\"{name}\"")), "{name} is registered");
    }
}

/// The keys the calls below name, by index: limiters' keys, then keys no limiter wrote.
const KEYS: [&str; 11] = ["t", "t2", "f", "c", "s", "l", "a", "hash", "text", "cell", "{h}holds"];

/// Calls of every function (its keys by index in KEYS, its arguments), in an order that reads back
/// each limiter's state: allowed and denied, several keys, every kind's refusal of its parameters and
/// options, a key of another type or limiter, and the errors only the library replies.
const CALLS: &[(&str, &[usize], &[&str])] = &[
    ("rl_version", &[], &[]),
    ("rl_token", &[0], &["10", "5", "1"]),
    ("rl_token", &[0], &["10", "5", "11"]),
    ("rl_token", &[0], &["10", "0.000001", "4"]),
    ("rl_token", &[0, 1], &["10", "5", "1", "3", "1", "2"]),
    ("rl_token", &[0, 0], &["10", "5", "1", "10", "5", "1"]),
    ("rl_token", &[0], &["0", "5", "1"]),
    ("rl_token", &[0], &["10", "0", "1"]),
    ("rl_token", &[0], &["10", "5", "x"]),
    ("rl_token", &[0], &["10", "5"]),
    ("rl_token", &[0], &["9007199254740992", "1", "1"]),
    ("rl_token", &[7], &["10", "5", "1"]),
    ("rl_take", &[0], &["10", "5", "3"]),
    ("rl_take", &[0], &["10", "5", "0"]),
    ("rl_reserve", &[0], &["10", "5", "1", "0.5"]),
    ("rl_reserve", &[1], &["3", "1", "5", "2", "UPTO", "4"]),
    ("rl_reserve", &[0], &["10", "5", "1", "0.5", "BOGUS", "3"]),
    ("rl_reserve", &[0], &["10", "5", "1", "x"]),
    ("rl_fixed", &[2], &["10", "60"]),
    ("rl_fixed", &[2], &["10", "60", "5"]),
    ("rl_fixed", &[2], &["10", "60", "9"]),
    ("rl_fixed", &[2], &["0", "60"]),
    ("rl_fixed", &[2], &["10", "0.0001"]),
    ("rl_fixed", &[2], &["10", "60", "1", "1"]),
    ("rl_fixed", &[0], &["10", "60"]),
    ("rl_slidecount", &[3], &["10", "60"]),
    ("rl_slidecount", &[3], &["10", "60", "20"]),
    ("rl_slidecount", &[8], &["10", "60"]),
    ("rl_slide", &[4], &["3", "60", "a"]),
    ("rl_slide", &[4], &["3", "60", "a", "DEDUP"]),
    ("rl_slide", &[4], &["3", "60", "b"]),
    ("rl_slide", &[4], &["3", "60", "c"]),
    ("rl_slide", &[4], &["3", "60", "d"]),
    ("rl_slide", &[4], &["3", "60", ""]),
    ("rl_slide", &[4], &["3", "60", "e", "NODEDUP"]),
    ("rl_slide", &[4], &["2000000", "60", "e"]),
    ("rl_refund", &[0], &["TOKEN", "10", "5", "1"]),
    ("rl_refund", &[0], &["RESERVE", "10", "5", "1"]),
    ("rl_refund", &[2], &["FIXED", "10", "60", "2"]),
    ("rl_refund", &[3], &["SLIDECOUNT", "10", "60", "1"]),
    ("rl_refund", &[4], &["SLIDE", "3", "60", "1"]),
    ("rl_refund", &[0], &["BOGUS", "1", "2", "3"]),
    ("rl_acquire", &[5], &["2", "30", "h1"]),
    ("rl_acquire", &[5], &["2", "30", "h2", "WEIGHT", "1"]),
    ("rl_acquire", &[5], &["2", "30", "h3"]),
    ("rl_acquire", &[5], &["2", "30", "h4", "WEIGHT", "0"]),
    ("rl_renew", &[5], &["30", "h1"]),
    ("rl_renew", &[5], &["30", "nobody"]),
    ("rl_release", &[5], &["h2"]),
    ("rl_release", &[5], &["nobody"]),
    ("rl_all", &[6, 1], &["TOKEN", "10", "5", "1", "SLIDE", "5", "60", "r"]),
    ("rl_all", &[6, 4], &["FIXED", "10", "60", "1", "SLIDE", "3", "60", "z"]),
    ("rl_all", &[6, 5], &["SLIDECOUNT", "10", "60", "1", "ACQUIRE", "3", "30", "h5", "WEIGHT", "2"]),
    ("rl_all", &[1], &["RESERVE", "3", "1", "1", "0.5"]),
    ("rl_all", &[6, 6], &["TOKEN", "10", "5", "1", "TOKEN", "10", "5", "1"]),
    ("rl_all", &[6], &["BOGUS", "10", "5", "1"]),
    (
        "rl_hold",
        &[10, 2, 3],
        &["r1", "60", "CHARGE", "FIXED", "10", "60", "3", "SLIDECOUNT", "10", "60", "2"],
    ),
    (
        "rl_hold",
        &[10, 2, 3],
        &["r1", "60", "CHARGE", "FIXED", "10", "60", "3", "SLIDECOUNT", "10", "60", "2"],
    ),
    ("rl_hold", &[10, 1], &["r2", "60", "RETURN", "TOKEN", "3", "1", "2"]),
    ("rl_hold", &[10, 2], &["r3", "60", "CHARGE", "FIXED", "10", "60", "50"]),
    ("rl_hold", &[10, 2], &["", "60", "CHARGE", "FIXED", "10", "60", "1"]),
    ("rl_hold", &[10, 2], &["r4", "0", "CHARGE", "FIXED", "10", "60", "1"]),
    ("rl_hold", &[10, 2], &["r4", "60", "MAYBE", "FIXED", "10", "60", "1"]),
    ("rl_hold", &[2, 1], &["r5", "60", "CHARGE", "TOKEN", "3", "1", "1"]),
    ("rl_settle", &[10, 2], &["r1", "PARTIAL", "5"]),
    ("rl_settle", &[10, 2, 3], &["r1", "FINAL", "1", "0"]),
    ("rl_settle", &[10, 2], &["r1", "FINAL", "1"]),
    ("rl_settle", &[10, 3], &["r2", "FINAL", "1"]),
    ("rl_settle", &[10, 1], &["r2", "LATER", "1"]),
    ("rl_settle", &[10, 1], &["r2", "FINAL", "0"]),
    ("rl_settle", &[10, 1], &["nobody", "FINAL", "1"]),
    ("rl_inspect", &[0], &[]),
    ("rl_inspect", &[0], &["10", "5"]),
    ("rl_inspect", &[2], &["10", "60"]),
    ("rl_inspect", &[3], &[]),
    ("rl_inspect", &[4], &["3", "60"]),
    ("rl_inspect", &[5], &["2", "30"]),
    ("rl_inspect", &[7], &[]),
    ("rl_inspect", &[8], &[]),
    ("rl_inspect", &[9], &[]),
    ("rl_inspect", &[6], &["10", "5", "1"]),
];

/// What CALLS answer through the library's functions (FCALL) or through its scripts (EVALSHA, loaded
/// under `shas`), the clock an argument (a day ahead of the server's, stepping a quarter of a second
/// and a nanosecond between calls): each reply, then each of the call's keys' bytes and (`expiries`)
/// expiry, with what it is.
fn transcript(
    con: &mut Connection,
    scripts: Option<&std::collections::BTreeMap<String, String>>,
    start: i64,
    expiries: bool,
) -> Vec<(String, lua::Reply)> {
    let key = |i: usize| format!("{}:{}", if scripts.is_some() { "e" } else { "f" }, KEYS[i]);
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    // Keys no limiter wrote: a hash, a text, a redis-cell TAT.
    pipe.cmd("HSET").arg(key(7)).arg("f").arg("v");
    pipe.cmd("SET").arg(key(8)).arg("hello");
    pipe.cmd("SET").arg(key(9)).arg("1700000000000000000");
    let mut what = Vec::new();
    for (step, (function, keys, args)) in CALLS.iter().enumerate() {
        let now = (start + step as i64 * 250_000_001).to_string();
        let keys: Vec<String> = keys.iter().map(|&i| key(i)).collect();
        let cmd = match scripts {
            Some(shas) => pipe.cmd("EVALSHA").arg(&shas[*function]),
            None => pipe.cmd("FCALL").arg(function),
        };
        cmd.arg(keys.len()).arg(&keys).arg(&now).arg(*args);
        let call = format!("{function} {:?} {args:?}", keys.iter().map(|k| &k[2..]).collect::<Vec<_>>());
        what.push(format!("{call}: the reply"));
        // A hold's own key, `<ledger>:<id>`, beside the call's.
        let own = ["rl_hold", "rl_settle"].contains(function).then(|| format!("{}:{}", keys[0], args[0]));
        for k in keys.iter().chain(&own) {
            pipe.cmd("GET").arg(k);
            what.push(format!("{call}: {}'s bytes", &k[2..]));
            if expiries {
                pipe.cmd("PEXPIRETIME").arg(k);
                what.push(format!("{call}: {}'s expiry", &k[2..]));
            }
        }
    }
    let mut replies = lua::run(con, &pipe);
    replies.drain(..3);
    assert_eq!(replies.len(), what.len());
    // A hold names its limits' keys: the scripts' (`e:`) read as the functions' (`f:`).
    let same_names = |r: lua::Reply| match r {
        lua::Reply::Bulk(b) if scripts.is_some() && b.starts_with(b"RLH\x01") => {
            let text = b.iter().map(|&c| c as char).collect::<String>().replace(":e:", ":f:");
            lua::Reply::Bulk(text.chars().map(|c| c as u8).collect())
        }
        other => other,
    };
    what.into_iter().zip(replies.into_iter().map(same_names)).collect()
}

/// Each script on `con`, its clock an argument, by function: its SHA-1.
fn load_scripts(con: &mut Connection) -> std::collections::BTreeMap<String, String> {
    let load = |(name, code): (String, String)| {
        let sha: String =
            redis::cmd("SCRIPT").arg("LOAD").arg(lua::with_clock_argument(&code)).query(&mut *con).unwrap();
        (name, sha)
    };
    lua::scripts().into_iter().map(load).collect()
}

/// A day ahead of `con`'s server's clock, in ns: every expiry the calls set lies in its future.
fn a_day_ahead(con: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    (s + 86_400) * 1_000_000_000 + us * 1000
}

/// Every function's script answers as its function does: the reply, the bytes stored and their expiry
/// (both with the clock an argument, so alike to the nanosecond), through CALLS. A script without a
/// part its function needs answers otherwise (a missing global, an internal error).
#[test]
fn every_function_s_script_answers_as_the_function_does() {
    for function in CommandInfo::in_library().filter_map(|c| c.function).chain([VERSION_FUNCTION]) {
        assert!(CALLS.iter().any(|c| c.0 == function), "no call of {function} here");
    }
    let server = Server::builder().stock().start();
    let mut con = server.conn();
    lua::load(&mut con, &lua::with_clock_argument(&lua::source()));
    let shas = load_scripts(&mut con);
    let start = a_day_ahead(&mut con);
    let by_functions = transcript(&mut con, None, start, true);
    let by_scripts = transcript(&mut con, Some(&shas), start, true);
    let errors = by_functions.iter().filter(|(_, r)| r.is_error()).count();
    assert!(errors >= 20 && errors < by_functions.len() / 2, "{errors} errors of {}", by_functions.len());
    for ((what, f), (_, e)) in by_functions.iter().zip(&by_scripts) {
        assert_eq!(e, f, "{what}: EVALSHA (left) and FCALL (right) differ");
    }
}

/// The same on Redis 6.2, the scripts' own server (no FUNCTION, no PEXPIRETIME), beside the functions on
/// a stock server: the replies and the bytes stored. (An expiry there is read as PTTL after the
/// call's clock, a day off here, so RL.INSPECT's ttl_ms and the expiries are left out.) Runs when
/// `RL_REDIS62_SERVER` names a 6.2 redis-server binary; skipped otherwise.
#[test]
fn every_function_s_script_answers_as_the_function_does_on_redis_6_2() {
    let Some(binary) = std::env::var("RL_REDIS62_SERVER").ok().filter(|b| !b.is_empty()) else {
        testkit::skip("no Redis 6.2 here (set RL_REDIS62_SERVER to a 6.2 redis-server)");
        return;
    };
    let stock = Server::builder().stock().start();
    let old = Server::builder().stock().binary(&binary).start();
    let (mut f, mut e) = (stock.conn(), old.conn());
    lua::load(&mut f, &lua::with_clock_argument(&lua::source()));
    let shas = load_scripts(&mut e);
    let start = a_day_ahead(&mut f);
    let by_functions = transcript(&mut f, None, start, false);
    let by_scripts = transcript(&mut e, Some(&shas), start, false);
    for ((what, f), (_, e)) in by_functions.iter().zip(&by_scripts) {
        if !what.starts_with("rl_inspect") {
            assert_eq!(e, f, "{what}: EVALSHA on 6.2 (left) and FCALL (right) differ");
        }
    }
}

/// The README's lines for a server without the module run as written (redis-cli on this server).
#[test]
fn the_readme_s_lines_for_managed_redis_run() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme
        .split("## Without the module")
        .nth(1)
        .expect("the README's section")
        .split("\n## ")
        .next()
        .unwrap();
    let block = section.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("its sh block");
    let server = Server::builder().stock().start();
    let mut outputs = Vec::new();
    for line in block.lines() {
        let command = line
            .split('#')
            .next()
            .unwrap()
            .trim()
            .replace("redis-cli", &format!("redis-cli -p {}", server.port));
        let out =
            std::process::Command::new("sh").arg("-c").arg(&command).current_dir(root).output().expect("sh");
        assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
        outputs.push(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    assert_eq!(outputs[0].trim(), "ratelimit", "FUNCTION LOAD names the library");
    let reply: Vec<&str> = outputs[1].lines().collect();
    assert_eq!(reply[..3], ["1", "10", "9"], "RL.TOKEN's reply: allowed, limit, remaining");
}

/// Where PEXPIRETIME is missing (Redis 6.2), the scripts read the expiry from PTTL: a window counted
/// over several calls keeps its one expiry, and a log's expiry moves with its newest entry.
#[test]
fn the_scripts_keep_expiries_where_pexpiretime_is_missing() {
    let server = Server::builder().stock().args(&["--rename-command", "PEXPIRETIME", ""]).start();
    let mut con = server.conn();
    let scripts = lua::scripts();
    let call = |con: &mut Connection, name: &str, key: &str, args: &[&str]| -> Vec<i64> {
        redis::cmd("EVAL").arg(&scripts[name]).arg(1).arg(key).arg(args).query(con).expect(name)
    };
    let pttl = |con: &mut Connection, key: &str| -> i64 { redis::cmd("PTTL").arg(key).query(con).unwrap() };
    assert_eq!(call(&mut con, "rl_fixed", "w", &["3", "600"])[..3], [1, 3, 2]);
    let first = pttl(&mut con, "w");
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(call(&mut con, "rl_fixed", "w", &["3", "600"])[..3], [1, 3, 1]);
    assert!(pttl(&mut con, "w") < first, "the window's end did not move");
    assert_eq!(call(&mut con, "rl_slide", "log", &["3", "600", "a"])[..3], [1, 3, 2]);
    assert_eq!(call(&mut con, "rl_slide", "log", &["3", "600", "b"])[..3], [1, 3, 1]);
    assert!(pttl(&mut con, "log") > 599_000, "the log lives a window past its newest entry");
}

/// The library's writes replicate by effect: after calls of every function (allowed, denied, logs
/// that grow, leases released), a replica holds the same bytes and expiries as its primary.
#[test]
fn the_library_s_writes_replicate_by_effect() {
    let primary = Server::builder().stock().start();
    let replica =
        Server::builder().stock().args(&["--replicaof", "127.0.0.1", &primary.port.to_string()]).start();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    testkit::wait_until("replica link up", || {
        testkit::info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    lua::load(&mut p, &lua::source());
    let fcall = |con: &mut Connection, function: &str, keys: &[&str], args: &[&str]| {
        let _: redis::Value =
            redis::cmd("FCALL").arg(function).arg(keys.len()).arg(keys).arg(args).query(con).expect(function);
    };
    for i in 0..30 {
        let id = format!("r{}", i % 7);
        fcall(&mut p, "rl_token", &["t"], &["5", "0.01", &(i % 3).to_string()]);
        fcall(&mut p, "rl_token", &["t1", "t2"], &["5", "0.01", "1", "3", "0.01", "1"]);
        fcall(&mut p, "rl_fixed", &["f"], &["4", "300"]);
        fcall(&mut p, "rl_slidecount", &["c"], &["4", "300", "2"]);
        fcall(&mut p, "rl_slide", &["s"], &["40", "300", &id, "DEDUP"]);
        fcall(&mut p, "rl_take", &["t"], &["5", "0.01", "2"]);
        fcall(&mut p, "rl_refund", &["f"], &["FIXED", "4", "300", "1"]);
        fcall(&mut p, "rl_acquire", &["l"], &["3", "300", &id]);
        fcall(&mut p, "rl_release", &["l"], &[&format!("r{}", (i + 3) % 7)]);
        fcall(&mut p, "rl_renew", &["l"], &["300", &id]);
        fcall(&mut p, "rl_all", &["a1", "a2"], &["TOKEN", "3", "0.01", "1", "SLIDE", "2", "300", &id]);
    }
    common::wait_in_sync(&mut p, &mut r);
    assert_eq!(common::dump_strings(&mut p), common::dump_strings(&mut r));
    assert_eq!(common::digest(&mut p), common::digest(&mut r));
    assert!(common::dbsize(&mut r) >= 8, "every function wrote");
    // The library reached the replica with the data; its read-only function runs there.
    let on_replica: redis::Value = redis::cmd("FCALL_RO")
        .arg("rl_inspect")
        .arg(1)
        .arg("t")
        .arg(5)
        .arg("0.01")
        .query(&mut r)
        .expect("FCALL_RO");
    let on_primary: redis::Value =
        redis::cmd("FCALL_RO").arg("rl_inspect").arg(1).arg("t").arg(5).arg("0.01").query(&mut p).unwrap();
    let limiter = |v: &redis::Value| match v {
        redis::Value::Array(items) => items.get(1).cloned(),
        _ => None,
    };
    assert_eq!(limiter(&on_replica), Some(redis::Value::SimpleString("RL.TOKEN".into())));
    assert_eq!(limiter(&on_replica), limiter(&on_primary));
}

/// The library's big constants, written as limbs of base 10^7, are the values they say.
#[test]
fn constants_are_their_values() {
    let source = lua::source();
    let mut checked = 0;
    for part in source.split("const(\"").skip(1) {
        let (value, rest) = part.split_once('"').expect("a quoted value");
        if value == "value_text" {
            continue; // the helper's own definition
        }
        let body = rest.split_once('{').and_then(|(_, b)| b.split_once('}')).expect("its limbs").0;
        let mut limbs: Vec<i128> = Vec::new();
        let mut negative = false;
        for item in body.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item {
                "neg = true" => negative = true,
                "neg = false" => {}
                n => limbs.push(n.parse().expect("a limb")),
            }
        }
        assert!(limbs.iter().all(|l| (0..10_000_000).contains(l)), "{value}: limbs of base 10^7");
        let magnitude = limbs.iter().rev().fold(0u128, |acc, &l| acc * 10_000_000 + l as u128);
        let written = if negative { format!("-{magnitude}") } else { magnitude.to_string() };
        assert_eq!(written, value);
        checked += 1;
    }
    // The horizon's limbs are the generated CONTRACT block's (written from core), not a const here.
    assert!(checked >= 7, "only {checked} constants found");
}

/// docs/lua.md's ACL lines are exactly enough: a user made by each runs every function (FCALL, or the
/// EVALSHA scripts an operator loaded), through the paths that read and keep an expiry, and `ACL LOG`
/// stays empty (a missing `+pexpiretime` logs a refusal on every call that reads an expiry).
#[test]
fn the_documented_acl_lines_run_every_function_with_nothing_refused() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/lua.md")).unwrap();
    let block = doc.split("<!-- library-acl -->\n```\n").nth(1).and_then(|b| b.split("```").next()).unwrap();
    let lines: Vec<&str> = block.lines().collect();
    assert_eq!(lines.len(), 2, "the FCALL line and the EVALSHA line");
    let server = Server::builder().stock().start();
    let mut admin = server.conn();
    lua::load(&mut admin, &lua::source());
    let scripts = lua::scripts();
    let mut shas = std::collections::BTreeMap::new();
    for (name, code) in &scripts {
        let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(code).query(&mut admin).unwrap();
        shas.insert(name.clone(), sha);
    }
    let calls: &[(&str, &str, &[&str])] = &[
        ("rl_token", "rl:t", &["10", "5", "1"]),
        ("rl_token", "rl:t", &["10", "5", "1"]),
        ("rl_fixed", "rl:f", &["10", "60", "1"]),
        ("rl_fixed", "rl:f", &["10", "60", "1"]),
        ("rl_slidecount", "rl:c", &["10", "60", "1"]),
        ("rl_slidecount", "rl:c", &["10", "60", "1"]),
        ("rl_slide", "rl:s", &["10", "60", "a"]),
        ("rl_slide", "rl:s", &["10", "60", "b"]),
        ("rl_take", "rl:t", &["10", "5", "3"]),
        ("rl_reserve", "rl:t", &["10", "5", "1", "1.000"]),
        ("rl_refund", "rl:t", &["TOKEN", "10", "5", "1"]),
        ("rl_refund", "rl:f", &["FIXED", "10", "60", "1"]),
        ("rl_all", "rl:a", &["FIXED", "10", "60", "1"]),
        // Several keys, split at spaces: a ledger and a limit.
        ("rl_hold", "rl:holds:{h} rl:{h}:f", &["r", "60", "CHARGE", "FIXED", "10", "60", "1"]),
        ("rl_settle", "rl:holds:{h} rl:{h}:f", &["r", "FINAL", "0"]),
        ("rl_acquire", "rl:l", &["3", "30", "h"]),
        ("rl_renew", "rl:l", &["30", "h"]),
        ("rl_release", "rl:l", &["h"]),
        ("rl_inspect", "rl:t", &["10", "5"]),
    ];
    for line in lines {
        let _: redis::Value = redis::cmd("ACL").arg("DELUSER").arg("app").query(&mut admin).unwrap();
        let _: redis::Value = redis::cmd("ACL").arg("LOG").arg("RESET").query(&mut admin).unwrap();
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        let _: () = redis::cmd("ACL").arg(&words).query(&mut admin).unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut admin).unwrap();
        let evalsha = line.contains("+evalsha");
        let mut app = server.conn();
        let _: () = redis::cmd("AUTH").arg("app").arg("secret").query(&mut app).unwrap();
        let mut functions: Vec<(&str, Option<&str>, &[&str])> =
            calls.iter().map(|(f, k, a)| (*f, Some(*k), *a)).collect();
        functions.push(("rl_version", None, &[]));
        for (function, key, args) in functions {
            let keys: Vec<&str> = key.into_iter().flat_map(|k| k.split(' ')).collect();
            let mut cmd = if evalsha {
                redis::cmd("EVALSHA").arg(&shas[function]).clone()
            } else {
                redis::cmd(if function == "rl_inspect" || function == "rl_version" {
                    "FCALL_RO"
                } else {
                    "FCALL"
                })
                .arg(function)
                .clone()
            };
            cmd.arg(keys.len()).arg(&keys).arg(args);
            let reply: redis::Value =
                cmd.query(&mut app).unwrap_or_else(|e| panic!("{line}: {function}: {e}"));
            assert!(!matches!(reply, redis::Value::ServerError(_)), "{line}: {function}: {reply:?}");
        }
        let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query(&mut admin).unwrap();
        assert!(log.is_empty(), "{line}: ACL LOG: {log:?}");
    }
}
