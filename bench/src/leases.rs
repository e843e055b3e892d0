//! Concurrency limits beside the usual Lua semaphore on a sorted set (drop expired members by score,
//! count, add, set the TTL; release removes the member), with 36-character UUID-shaped ids for both:
//! acquire + release pairs per second at pipeline 16 on random keys, and memory per held lease with
//! 1,000 leases per key.

use crate::commandstat;
use crate::loadgen::{Load, Request};
use std::fmt::Write as _;
use testkit::redis::{self, Connection};
use testkit::{info_field, Server};

const ACQUIRE_SCRIPT: &str = r#"
local key, limit, lease_ms, id = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if redis.call('ZSCORE', key, id) or redis.call('ZCARD', key) < limit then
  redis.call('ZADD', key, now + lease_ms, id)
  redis.call('PEXPIRE', key, lease_ms)
  return 1
end
return 0
"#;

/// Interleaved runs of each; the medians are reported.
const ROUNDS: usize = 5;

const RELEASE_SCRIPT: &str = "return redis.call('ZREM', KEYS[1], ARGV[1])";

const NATIVE: Request = &[&["RL.ACQUIRE", "{key}", "10", "60", "{id}"], &["RL.RELEASE", "{key}", "{id}"]];
const LUA: Request = &[
    &["EVALSHA", "{sha:acquire}", "1", "{key}", "10", "60000", "{id}"],
    &["EVALSHA", "{sha:release}", "1", "{key}", "{id}"],
];

fn used_memory(con: &mut Connection) -> f64 {
    info_field(con, "memory", "used_memory").and_then(|v| v.parse().ok()).expect("no used_memory in INFO")
}

/// Bytes per held lease: `keys` keys with `per_key` leases each, filled by `call(key, i)`.
fn per_lease(
    con: &mut Connection,
    keys: usize,
    per_key: usize,
    call: impl Fn(&str, usize) -> redis::Cmd,
) -> f64 {
    let _: () = redis::cmd("FLUSHALL").query(con).expect("FLUSHALL failed");
    let before = used_memory(con);
    for k in 0..keys {
        let key = format!("lease:{k:06}");
        let mut pipe = redis::pipe();
        for i in 0..per_key {
            pipe.add_command(call(&key, i)).ignore();
        }
        pipe.exec(con).expect("a fill call failed");
    }
    (used_memory(con) - before) / (keys * per_key) as f64
}

fn uuid(i: usize) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", i as u64 * 2_654_435_761 % 0xffff_ffff, i)
}

pub fn run(scale: f64) -> String {
    let server = Server::builder().args(&["--appendonly", "no"]).start();
    let mut con = server.conn();
    let sha = |body: &str, con: &mut Connection| -> String {
        redis::cmd("SCRIPT").arg("LOAD").arg(body).query(con).expect("SCRIPT LOAD failed")
    };
    let vars = vec![
        ("{sha:acquire}".to_string(), sha(ACQUIRE_SCRIPT, &mut con)),
        ("{sha:release}".to_string(), sha(RELEASE_SCRIPT, &mut con)),
    ];
    let requests = ((500_000.0 * scale) as usize).max(800);
    let load = |vars: Vec<(String, String)>| Load {
        port: server.port,
        clients: 50,
        requests,
        pipeline: 16,
        keyspace: Some(100_000),
        vars,
    };
    let (mut native, mut lua) = (vec![], vec![]);
    let (mut native_us, mut lua_us) = (vec![], vec![]);
    let measure = |con: &mut Connection, vars: Vec<(String, String)>, request: Request| {
        let _: () = redis::cmd("FLUSHALL").query(con).expect("FLUSHALL failed");
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).expect("CONFIG RESETSTAT failed");
        let rps = load(vars).run(request).rps;
        let pairs = (requests / 50 * 50) as f64;
        let commands = if request == NATIVE { &["rl.acquire", "rl.release"][..] } else { &["evalsha"][..] };
        (rps, commands.iter().map(|c| commandstat(con, c, "usec").unwrap_or(0.0)).sum::<f64>() / pairs)
    };
    for _ in 0..ROUNDS {
        let (rps, us) = measure(&mut con, vec![], NATIVE);
        native.push(rps);
        native_us.push(us);
        let (rps, us) = measure(&mut con, vars.clone(), LUA);
        lua.push(rps);
        lua_us.push(us);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (native, lua) = (median(&mut native), median(&mut lua));
    let (native_us, lua_us) = (median(&mut native_us), median(&mut lua_us));
    let ours = per_lease(&mut con, 200, 1000, |key, i| {
        let mut c = redis::cmd("RL.ACQUIRE");
        c.arg(key).arg(1000).arg(3600).arg(uuid(i));
        c
    });
    let zset = per_lease(&mut con, 200, 1000, |key, i| {
        let mut c = redis::cmd("EVALSHA");
        c.arg(&vars[0].1).arg(1).arg(key).arg(1000).arg(3_600_000).arg(uuid(i));
        c
    });
    let version = info_field(&mut con, "server", "redis_version").unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Concurrency limits: RL.ACQUIRE / RL.RELEASE beside a Lua semaphore on a sorted set\n"
    );
    let _ = writeln!(
        out,
        "Redis {version}; 50 clients, pipeline 16, random keys over 100,000, limit 10, 36-character ids; \
         {requests} acquire + release pairs per run, the median of {ROUNDS} interleaved runs; the load generator runs every connection on one thread (as redis-benchmark does), so the server has a core of its own.\n"
    );
    let _ = writeln!(out, "| what | RL.ACQUIRE + RL.RELEASE | Lua (sorted set) | ratio | target |");
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | --- |");
    let _ = writeln!(out, "| pairs per second | {native:.0} | {lua:.0} | {:.2}x | >= 3x |", native / lua);
    let _ = writeln!(
        out,
        "| server time per pair (commandstats) | {native_us:.2} us | {lua_us:.2} us | {:.2}x less | |",
        lua_us / native_us
    );
    let _ = writeln!(
        out,
        "| memory per held lease, 1,000 per key (200 keys) | {ours:.1} B | {zset:.1} B | {:.2}x | <= 0.25x |",
        ours / zset
    );
    out
}
