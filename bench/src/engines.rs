//! The Lua library (where no module can be loaded) beside the scripts it replaces and the module, in
//! one run: on a stock server, our token bucket through `FCALL` and through `EVALSHA`, a HMGET/HSET token-bucket
//! token bucket (`lua.rs`), and a GCRA script written from the algorithm redis_rate and upstash
//! publish; the sliding log through `FCALL` and a sorted-set log script; the fixed window through
//! `FCALL` and `EVALSHA` beside an INCR + PEXPIRE script; the sliding counter, leases and RL.ALL; on a
//! module server, the same commands. redis-benchmark, 50 clients, pipeline 16, random keys over
//! 100,000; median of 3 interleaved runs; the server's time per call (INFO commandstats) beside each.
//! Memory per key (per entry for the logs) from used_memory. Writes docs/bench-engines.md.

use crate::memory::added;
use crate::{commandstat, lua, redis_benchmark};
use redis_ratelimit_client::lua::{script_source, LIBRARY};
use std::fmt::Write as _;
use testkit::redis::{self, Connection};
use testkit::Server;

const REPEAT: usize = 3;
const KEYS: usize = 200_000;

fn load(con: &mut Connection, script: &str) -> String {
    redis::cmd("SCRIPT").arg("LOAD").arg(script).query(con).expect("SCRIPT LOAD failed")
}

/// (label, which server: true = module, command line for redis-benchmark)
type Case = (&'static str, bool, String);

pub fn run(scale: f64) -> String {
    let stock = Server::builder().stock().args(&["--appendonly", "no"]).start();
    let module = Server::builder().args(&["--appendonly", "no"]).start();
    let mut con = stock.conn();
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(LIBRARY)
        .query(&mut con)
        .expect("FUNCTION LOAD");
    assert_eq!(name, "ratelimit");
    let ours = load(&mut con, &script_source("rl_token"));
    let ours_fixed = load(&mut con, &script_source("rl_fixed"));
    let seed_fixed = load(&mut con, lua::FIXED_WINDOW);
    let seed = load(&mut con, lua::TOKEN_BUCKET);
    let gcra = load(&mut con, lua::GCRA);
    let seed_log = load(&mut con, lua::SLIDING_LOG);
    let key = "bench:__rand_int__";
    let cases: Vec<Case> = vec![
        ("RL.TOKEN (module)", true, format!("RL.TOKEN {key} 10 5 1")),
        ("FCALL rl_token (library)", false, format!("FCALL rl_token 1 {key} 10 5 1")),
        ("EVALSHA rl_token (library's script)", false, format!("EVALSHA {ours} 1 {key} 10 5 1")),
        ("HMGET/HSET token-bucket script", false, format!("EVALSHA {seed} 1 {key} 10 5 1")),
        ("GCRA script (redis_rate / upstash style)", false, format!("EVALSHA {gcra} 1 {key} 10 5 1 1")),
        ("RL.SLIDE (module), limit 100", true, format!("RL.SLIDE {key} 100 60 __rand_int__")),
        ("FCALL rl_slide (library), limit 100", false, format!("FCALL rl_slide 1 {key} 100 60 __rand_int__")),
        (
            "sorted-set log script, limit 100",
            false,
            format!("EVALSHA {seed_log} 1 {key} 100 60 __rand_int__"),
        ),
        ("RL.FIXED (module)", true, format!("RL.FIXED {key} 100 60 1")),
        ("FCALL rl_fixed (library)", false, format!("FCALL rl_fixed 1 {key} 100 60 1")),
        ("EVALSHA rl_fixed (library's script)", false, format!("EVALSHA {ours_fixed} 1 {key} 100 60 1")),
        ("INCR + PEXPIRE script", false, format!("EVALSHA {seed_fixed} 1 {key} 100 60000 1")),
        ("RL.SLIDECOUNT (module)", true, format!("RL.SLIDECOUNT {key} 100 60 1")),
        ("FCALL rl_slidecount (library)", false, format!("FCALL rl_slidecount 1 {key} 100 60 1")),
        ("RL.ACQUIRE (module), limit 10", true, format!("RL.ACQUIRE {key} 10 60 __rand_int__")),
        (
            "FCALL rl_acquire (library), limit 10",
            false,
            format!("FCALL rl_acquire 1 {key} 10 60 __rand_int__"),
        ),
        (
            "RL.ALL (module), token + fixed",
            true,
            format!("RL.ALL a:{{{key}}} TOKEN 10 5 1 b:{{{key}}} FIXED 100 60 1"),
        ),
        (
            "FCALL rl_all (library), token + fixed",
            false,
            format!("FCALL rl_all 2 a:{{{key}}} b:{{{key}}} TOKEN 10 5 1 FIXED 100 60 1"),
        ),
    ];
    let requests = ((200_000.0 * scale) as usize).max(800);
    let mut runs: Vec<Vec<f64>> = cases.iter().map(|_| vec![]).collect();
    let mut server_us: Vec<Vec<f64>> = cases.iter().map(|_| vec![]).collect();
    for _ in 0..REPEAT {
        for (((label, on_module, command), results), us) in
            cases.iter().zip(runs.iter_mut()).zip(server_us.iter_mut())
        {
            let server = if *on_module { &module } else { &stock };
            let mut admin = server.conn();
            let _: () = redis::cmd("FLUSHDB").query(&mut admin).expect("FLUSHDB failed");
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut admin).expect("CONFIG RESETSTAT");
            let measured = redis_benchmark(server.port, command, 16, true, requests);
            let name = command.split(' ').next().unwrap_or_default().to_lowercase();
            let per_call = commandstat(&mut admin, &name, "usec_per_call").unwrap_or(f64::NAN);
            eprintln!("{label:<45} {:>10.0} req/s {per_call:>6.2} us/call", measured.rps);
            results.push(measured.rps);
            us.push(per_call);
        }
    }
    let median = |mut r: Vec<f64>| {
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    };
    let rps: Vec<f64> = runs.into_iter().map(median).collect();
    let us: Vec<f64> = server_us.into_iter().map(median).collect();
    let find = |label: &str| cases.iter().position(|c| c.0 == label).map(|i| rps[i]).unwrap_or(f64::NAN);

    // Memory: two calls per bucket at 0.01/s (the scripts' hash holds a fractional count; the keys
    // outlive the fill, however slow), and logs of 100 entries.
    let key_of = |i: usize| format!("rl:user:{i:06}");
    let bucket = |con: &mut Connection, call: &dyn Fn(String) -> redis::Cmd| {
        added(con, 2 * KEYS, KEYS, |i| call(key_of(i % KEYS)))
    };
    let ours_key = bucket(&mut con, &|k| {
        redis::cmd("FCALL").arg("rl_token").arg(1).arg(k).arg(10).arg("0.01").arg(1).clone()
    });
    let seed_key = bucket(&mut con, &|k| {
        redis::cmd("EVALSHA").arg(&seed).arg(1).arg(k).arg(10).arg("0.01").arg(1).clone()
    });
    let gcra_key = bucket(&mut con, &|k| {
        redis::cmd("EVALSHA").arg(&gcra).arg(1).arg(k).arg(10).arg("0.01").arg(1).arg(1).clone()
    });
    let logs = KEYS / 100;
    let entry = |con: &mut Connection, call: &dyn Fn(String, usize) -> redis::Cmd| {
        added(con, KEYS, KEYS, |i| call(format!("rl:slog:{:06}", i % logs), i))
    };
    let ours_entry = entry(&mut con, &|k, i| {
        redis::cmd("FCALL").arg("rl_slide").arg(1).arg(k).arg(100).arg(3600).arg(i).clone()
    });
    let seed_entry = entry(&mut con, &|k, i| {
        redis::cmd("EVALSHA").arg(&seed_log).arg(1).arg(k).arg(100).arg(3600).arg(i).clone()
    });

    let mut out = String::new();
    let _ = writeln!(out, "# The Lua library beside the scripts it replaces and the module\n");
    let _ = writeln!(
        out,
        "One stock redis-server and one with the module, {}; redis-benchmark, 50 clients, pipeline 16, \
         random keys over 100,000, {requests} requests; the median of {REPEAT} interleaved runs. Token buckets: \
         capacity 10, 5/s, cost 1; logs: limit 100 per 60 s. Reproduce with `cargo run --release -p bench \
         --bin rl-bench engines`.\n",
        crate::machine()
    );
    let _ = writeln!(out, "| engine | req/s | server us/call |");
    let _ = writeln!(out, "| --- | ---: | ---: |");
    for (i, (label, _, _)) in cases.iter().enumerate() {
        let _ = writeln!(out, "| {label} | {:.0} | {:.2} |", rps[i], us[i]);
    }
    let _ = writeln!(out, "\n| comparison | measured | goal |");
    let _ = writeln!(out, "| --- | ---: | --- |");
    let lib = find("FCALL rl_token (library)");
    let rows = [
        (
            "library (FCALL) / HMGET/HSET token-bucket script, throughput",
            lib / find("HMGET/HSET token-bucket script"),
            ">= 1.0",
        ),
        (
            "library (EVALSHA) / HMGET/HSET token-bucket script, throughput",
            find("EVALSHA rl_token (library's script)") / find("HMGET/HSET token-bucket script"),
            ">= 0.9",
        ),
        (
            "library (FCALL) / GCRA script, throughput",
            lib / find("GCRA script (redis_rate / upstash style)"),
            ">= 0.9",
        ),
        ("module / library (FCALL), throughput", find("RL.TOKEN (module)") / lib, ""),
        ("library / HMGET/HSET token-bucket script, memory per key", ours_key / seed_key, "<= 0.85"),
        ("library / GCRA script, memory per key", ours_key / gcra_key, ""),
        (
            "library (FCALL) / sorted-set log script, throughput at limit 100",
            find("FCALL rl_slide (library), limit 100") / find("sorted-set log script, limit 100"),
            ">= 1.0",
        ),
        ("library / sorted-set log script, memory per entry", ours_entry / seed_entry, "<= 0.2"),
        (
            "library (FCALL) / INCR + PEXPIRE script, fixed window throughput",
            find("FCALL rl_fixed (library)") / find("INCR + PEXPIRE script"),
            ">= 0.45",
        ),
    ];
    for (label, x, goal) in rows {
        let _ = writeln!(out, "| {label} | {x:.2} | {goal} |");
    }
    let _ = writeln!(out, "\n| memory | bytes |");
    let _ = writeln!(out, "| --- | ---: |");
    for (label, bytes) in [
        ("library token bucket (the module's format), per key", ours_key),
        ("HMGET/HSET token-bucket script (hash of 2 fields), per key", seed_key),
        ("GCRA script (a float TAT), per key", gcra_key),
        ("library log, per entry", ours_entry),
        ("sorted-set log script, per entry", seed_entry),
    ] {
        let _ = writeln!(out, "| {label} | {bytes:.1} |");
    }
    out
}
