//! Two more views of the side-by-side table (docs/bench-peers.md): this module's CL.THROTTLE against
//! redis-cell's on twin servers (one process each, the same binary, runs interleaved, so neither
//! shares a process or a cache with the other), and the bytes replicated per allowed decision (the
//! primary's replication offset over a run, divided by the calls) for RL.TOKEN, core's GCRA and a
//! HMGET/HSET token-bucket script.

use crate::peers::median;
use crate::{redis_benchmark, us_per_call};
use std::fmt::Write as _;
use std::path::Path;
use testkit::redis;
use testkit::{info_field, Server};

/// Our CL.THROTTLE (this module alone) and redis-cell's (its module alone) on two servers, random keys
/// and one hot key, `repeat` interleaved runs each; rows with req/s, us/call and our speed-up.
pub fn cell_twins(cell: &Path, scale: f64, repeat: usize, out: &mut String) {
    let ours = Server::builder().args(&["--appendonly", "no"]).start();
    let theirs = Server::builder().stock().preload(&[cell]).args(&["--appendonly", "no"]).start();
    let requests = ((400_000.0 * scale) as usize).max(800);
    let _ = writeln!(out, "\n## CL.THROTTLE on twin servers\n");
    let _ = writeln!(out, "Two server processes of the same binary, one with this module, one with redis-cell 0.5.0; {requests} requests per run, pipeline 16, the median of {repeat} runs taken in turn (ours, theirs, ours, ...). req/s is the throughput ratio the goal is set on.\n");
    let _ = writeln!(out, "| path | ours req/s | redis-cell req/s | ours / redis-cell | ours us/call | redis-cell us/call |\n| --- | ---: | ---: | ---: | ---: | ---: |");
    for (name, random) in [("random keys (100k), 9 5 1", true), ("one hot key (mostly denials)", false)] {
        let key = if random { "cell:__rand_int__" } else { "cell:hot" };
        let command = format!("CL.THROTTLE {key} 9 5 1");
        let (mut rps, mut us) = ([vec![], vec![]], [vec![], vec![]]);
        for _ in 0..repeat {
            for (i, server) in [&ours, &theirs].into_iter().enumerate() {
                let mut con = server.conn();
                let _: () = redis::cmd("FLUSHALL").query(&mut con).expect("FLUSHALL");
                let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut con).expect("RESETSTAT");
                rps[i].push(redis_benchmark(server.port, &command, 16, random, requests).rps);
                us[i].push(us_per_call(&mut con, "cl.throttle".into()));
            }
        }
        let [r0, r1] = rps.map(median);
        let [u0, u1] = us.map(median);
        let _ = writeln!(out, "| {name} | {r0:.0} | {r1:.0} | {:.2}x | {u0:.2} | {u1:.2} |", r0 / r1);
        eprintln!("twins {name:<32} ours {r0:>10.0} req/s, redis-cell {r1:>10.0} req/s: {:.2}x", r0 / r1);
    }
}

/// Bytes the primary replicates per allowed decision: each command on random keys with a bucket that
/// never denies, `calls` of them, the replication offset's growth divided by the calls.
pub fn replicated_bytes(binary: &str, gcra: bool, lua_sha_source: &str, calls: usize, out: &mut String) {
    let primary = Server::builder().binary(binary).args(&["--appendonly", "no"]).start();
    let port = primary.port.to_string();
    let _replica = Server::builder().binary(binary).args(&["--replicaof", "127.0.0.1", &port]).start();
    let mut con = primary.conn();
    testkit::wait_until("the replica's link", || {
        info_field(&mut con, "replication", "connected_slaves").as_deref() == Some("1")
    });
    let sha: String =
        redis::cmd("SCRIPT").arg("LOAD").arg(lua_sha_source).query(&mut con).expect("SCRIPT LOAD");
    let _ = writeln!(out, "\n## Bytes replicated per allowed decision\n");
    let _ = writeln!(out, "A primary and one replica; {calls} decisions on random keys (100k) of a bucket that never denies (capacity 1000000, 1 per second: each call moves the TAT by a second), pipeline 16; the primary's master_repl_offset growth divided by the calls.\n");
    let _ = writeln!(out, "| command | bytes per decision |\n| --- | ---: |");
    let mut rows = vec![("RL.TOKEN", "RL.TOKEN rt:__rand_int__ 1000000 1 1".to_string())];
    if gcra {
        rows.push(("GCRA (core)", "GCRA g:__rand_int__ 999999 1 1".to_string()));
    }
    rows.push((
        "HMGET/HSET token-bucket script (EVALSHA)",
        format!("EVALSHA {sha} 1 lua:__rand_int__ 1000000 1 1"),
    ));
    for (name, command) in rows {
        let offset = |con: &mut redis::Connection| -> f64 {
            info_field(con, "replication", "master_repl_offset")
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN)
        };
        let before = offset(&mut con);
        redis_benchmark(primary.port, &command, 16, true, calls);
        let bytes = (offset(&mut con) - before) / calls as f64;
        let _ = writeln!(out, "| {name} | {bytes:.1} |");
        eprintln!("replicated {name:<30} {bytes:>6.1} bytes per decision");
    }
}
