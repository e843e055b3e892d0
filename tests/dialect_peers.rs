//! The dialects beside the originals, on twin servers: redis-cell's CL.THROTTLE and core's GCRA get
//! the same calls as this module's, and their replies must agree; a dataset that redis-cell wrote
//! carries on under this module; the load order and a built-in GCRA are handled. Each test is skipped
//! with the reason when its peer is absent (`scripts/peers.sh` builds them; `RL_BENCH_CELL_MODULE`,
//! `RL_BENCH_GCRA_SERVER`).
//!
//! Twin servers' clocks differ by the microseconds between two calls (and Redis 7.0 gives modules
//! milliseconds), so every wait lands half an interval away from a refill: `limited`, `limit` and
//! `remaining` must match exactly, the two times within a second. The parameters have intervals of
//! whole microseconds, where the documented rounding differences cannot change `remaining`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use testkit::redis::{self, Connection, Value};
use testkit::{unique_key, Server};

fn call(con: &mut Connection, command: &str, args: &[String]) -> Vec<i64> {
    redis::cmd(command).arg(args).query(con).unwrap_or_else(|e| panic!("{command} {args:?}: {e}"))
}

fn log(server: &Server) -> String {
    std::fs::read_to_string(server.dir.join("server.log")).unwrap_or_default()
}

/// One scenario: parameters (as strings after the key), the interval in ms, and bursts of quantities
/// separated by waits of `k + 0.5` intervals.
struct Scenario {
    params: &'static [&'static str],
    interval_ms: u64,
    bursts: &'static [(&'static [u64], u64)],
}

const SCENARIOS: &[Scenario] = &[
    // redis-cell's README bucket, 30 per minute (2 s): a burst, then over the limit.
    Scenario { params: &["15", "30", "60"], interval_ms: 2000, bursts: &[(&[1, 1, 5, 10, 1, 1], 0)] },
    // 10 per second with a burst of 5: drain, refill part way twice, quantities above the limit.
    Scenario {
        params: &["4", "10", "1"],
        interval_ms: 100,
        bursts: &[(&[1, 2, 3, 1, 7], 2), (&[1, 1, 1, 1], 1), (&[2, 0, 1, 1], 4), (&[5, 1], 0)],
    },
    // No burst: one at a time, every 200 ms.
    Scenario {
        params: &["0", "5", "1"],
        interval_ms: 200,
        bursts: &[(&[1, 1], 1), (&[1, 1, 1], 3), (&[2, 1], 0)],
    },
    // 5 per 3 s (600 ms), burst 2.
    Scenario { params: &["2", "5", "3"], interval_ms: 600, bursts: &[(&[1, 1, 1, 1], 1), (&[1, 2, 1], 0)] },
];

/// Runs every scenario against `theirs` and `ours` (same command name, different servers), call for
/// call, and compares the replies.
fn compare(command: &str, theirs: &mut Connection, ours: &mut Connection, gcra_tokens: bool) -> usize {
    let mut compared = 0;
    for scenario in SCENARIOS {
        let key = unique_key("peer");
        for (quantities, wait) in scenario.bursts {
            for &q in *quantities {
                let mut args: Vec<String> = std::iter::once(key.clone())
                    .chain(scenario.params.iter().map(|p| p.to_string()))
                    .collect();
                match (gcra_tokens, q) {
                    // GCRA has no peek: TOKENS is at least 1.
                    (true, 0) => continue,
                    (true, 1) => {}
                    (true, q) => args.extend(["TOKENS".to_string(), q.to_string()]),
                    (false, q) => args.push(q.to_string()),
                }
                let (a, b) = (call(theirs, command, &args), call(ours, command, &args));
                assert_eq!(a[..3], b[..3], "{command} {args:?}: theirs {a:?}, ours {b:?}");
                for i in 3..5 {
                    assert!((a[i] - b[i]).abs() <= 1, "{command} {args:?}: theirs {a:?}, ours {b:?}");
                }
                compared += 1;
            }
            std::thread::sleep(Duration::from_millis(wait * scenario.interval_ms + scenario.interval_ms / 2));
        }
    }
    compared
}

#[test]
fn cl_throttle_replies_as_redis_cell_call_for_call() {
    let Some(cell) = testkit::cell_module() else {
        return testkit::skip("redis-cell's module is not built (scripts/peers.sh cell)");
    };
    if testkit::skip_when_external() {
        return;
    }
    // redis-cell loaded first takes CL.THROTTLE; the twin answers with this module's.
    let theirs = Server::builder().preload(&[&cell]).start();
    let ours = Server::builder().start();
    let compared = compare("CL.THROTTLE", &mut theirs.conn(), &mut ours.conn(), false);
    assert!(compared > 30);
    // Errors: the same text for what redis-cell checks.
    for args in
        [&["k", "x", "1", "1"][..], &["k", "1", "0", "1"], &["k", "1", "1"], &["k", "1", "2000000000", "1"]]
    {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let theirs_err = redis::cmd("CL.THROTTLE").arg(&args).query::<Value>(&mut theirs.conn()).unwrap_err();
        let ours_err = redis::cmd("CL.THROTTLE").arg(&args).query::<Value>(&mut ours.conn()).unwrap_err();
        assert_eq!(theirs_err.to_string(), ours_err.to_string(), "{args:?}");
    }
}

#[test]
fn gcra_replies_as_cores_command_call_for_call() {
    let Some(core) = testkit::gcra_server() else {
        return testkit::skip("no redis-server with core's GCRA (scripts/peers.sh gcra)");
    };
    if testkit::skip_when_external() {
        return;
    }
    // On core's server this module skips its GCRA, so core's answers; the twin is a server without it.
    let theirs = Server::builder().binary(&core.display().to_string()).start();
    let ours = Server::builder().start();
    let compared = compare("GCRA", &mut theirs.conn(), &mut ours.conn(), true);
    assert!(compared > 25);
    let args = ["k", "1", "1", "0.25"].map(String::from);
    assert_eq!(
        call(&mut theirs.conn(), "GCRA", &args),
        call(&mut ours.conn(), "GCRA", &args),
        "a float period"
    );
    for args in [
        &["k", "x", "1", "1"][..],
        &["k", "1", "0", "1"],
        &["k", "1", "x", "1"],
        &["k", "1", "1", "x"],
        &["k", "1", "1", "0"],
        &["k", "1", "1", "1", "FOO"],
        &["k", "1", "1", "1", "TOKENS"],
        &["k", "1", "1", "1", "TOKENS", "0"],
        &["k", "1", "1", "86400", "TOKENS", "200000000"],
        &["k", "200000000", "1", "86400"],
        &["k", "1", "1"],
    ] {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let theirs_err = redis::cmd("GCRA").arg(&args).query::<Value>(&mut theirs.conn()).unwrap_err();
        let ours_err = redis::cmd("GCRA").arg(&args).query::<Value>(&mut ours.conn()).unwrap_err();
        assert_eq!(theirs_err.to_string(), ours_err.to_string(), "{args:?}");
    }
}

/// A redis-server with only redis-cell loaded, its data in `dir`: testkit's server (ready by its rule),
/// stock, with redis-cell preloaded and `dir` as its `--dir`. Killed on drop.
fn cell_only(cell: &Path, dir: &Path, extra: &[&str]) -> Server {
    let dir = dir.display().to_string();
    let mut args = vec!["--dir", dir.as_str()];
    args.extend_from_slice(extra);
    Server::builder().stock().preload(&[cell]).args(&args).start()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_dataset_that_redis_cell_wrote_carries_on_under_this_module() {
    let Some(cell) = testkit::cell_module() else {
        return testkit::skip("redis-cell's module is not built (scripts/peers.sh cell)");
    };
    if testkit::skip_when_external() {
        return;
    }
    for (persistence, extra) in
        [("rdb", &[][..]), ("aof", &["--appendonly", "yes", "--appendfsync", "always"][..])]
    {
        let dir = scratch(&format!("cell-{persistence}"));
        // redis-cell alone: 10 of a bucket of 20 (1 per 10 s) taken on each of 50 keys.
        let mut before = cell_only(&cell, &dir, extra);
        let mut con = before.conn();
        for k in 0..50 {
            let key = format!("user:{k}");
            let r: Vec<i64> =
                redis::cmd("CL.THROTTLE").arg(&key).arg(19).arg(1).arg(10).arg(10).query(&mut con).unwrap();
            assert_eq!(r[..3], [0, 20, 10]);
        }
        if persistence == "aof" {
            // redis-cell's AOF holds its commands, which a reload would run again at reload time:
            // rewritten first, it holds the values (docs/migrating.md's steps).
            let _: () = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
            common::wait_until("the AOF rewrite", || {
                testkit::info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref()
                    == Some("0")
                    && testkit::info_field(&mut con, "persistence", "aof_rewrite_scheduled").as_deref()
                        == Some("0")
            });
        }
        before.shutdown("SAVE");
        // The same data directory, this module instead of redis-cell.
        let dir_arg = dir.display().to_string();
        let mut args = vec!["--dir", dir_arg.as_str()];
        args.extend_from_slice(extra);
        let after = Server::builder().args(&args).start();
        let mut con = after.conn();
        for k in 0..50 {
            let key = format!("user:{k}");
            let r: Vec<i64> =
                redis::cmd("CL.THROTTLE").arg(&key).arg(19).arg(1).arg(10).query(&mut con).unwrap();
            assert_eq!(r[..3], [0, 20, 9], "{persistence}: {key}'s bucket carried on: {r:?}");
            assert!(r[4] >= 100, "{persistence}: about 110 s until full: {r:?}");
        }
        // And back: the keys are still redis-cell's format, which redis-cell reads.
        drop(after);
        let back = cell_only(&cell, &dir, extra);
        let r: Vec<i64> =
            redis::cmd("CL.THROTTLE").arg("user:0").arg(19).arg(1).arg(10).query(&mut back.conn()).unwrap();
        if persistence == "rdb" {
            // SHUTDOWN of the testkit server does not save (it is killed): the RDB is redis-cell's.
            assert_eq!(r[..3], [0, 20, 9], "rolled back to the RDB redis-cell saved: {r:?}");
        } else {
            assert_eq!(r[..3], [0, 20, 8], "rolled back with this module's writes kept: {r:?}");
        }
        drop(back);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn the_loadmodule_order_decides_who_answers_cl_throttle() {
    let Some(cell) = testkit::cell_module() else {
        return testkit::skip("redis-cell's module is not built (scripts/peers.sh cell)");
    };
    if testkit::skip_when_external() {
        return;
    }
    // redis-cell first: it keeps CL.THROTTLE, this module loads the rest and says so.
    let server = Server::builder().preload(&[&cell]).start();
    let mut con = server.conn();
    let key = unique_key("order");
    // redis-cell computes with a negative burst (a limit of 0, never allowed); this module refuses it.
    let theirs: Vec<i64> = redis::cmd("CL.THROTTLE").arg(&key).arg(-1).arg(1).arg(1).query(&mut con).unwrap();
    assert_eq!(theirs, [1, 0, 0, -1, 0], "redis-cell's CL.THROTTLE answered");
    assert_eq!(call(&mut con, "RL.THROTTLE", &[unique_key("o"), "1".into(), "1".into(), "1".into()])[0], 0);
    assert!(log(&server).contains("dialect skipped: the name cl.throttle is taken"), "{}", log(&server));
    // This module first: redis-cell's load fails, and a failed loadmodule stops the server.
    let dir = scratch("order");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Command::new(testkit::server_binary())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--dir"])
        .arg(&dir)
        .arg("--loadmodule")
        .arg(testkit::module_path())
        .arg("--loadmodule")
        .arg(&cell)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.is_some_and(|s| !s.success()), "a redis-cell line after ours stops the server");
}

#[test]
fn gcra_is_skipped_on_a_server_with_cores_gcra_under_any_name() {
    let Some(core) = testkit::gcra_server() else {
        return testkit::skip("no redis-server with core's GCRA (scripts/peers.sh gcra)");
    };
    if testkit::skip_when_external() {
        return;
    }
    let binary = core.display().to_string();
    for rename in [None, Some("COREGCRA")] {
        let args: Vec<&str> = rename.map_or(vec![], |r| vec!["--rename-command", "GCRA", r]);
        let server = Server::builder().binary(&binary).args(&args).start();
        let mut con = server.conn();
        let text = log(&server);
        assert!(text.contains("dialect skipped: the server has a built-in rate limit command"), "{text}");
        let key = unique_key("core");
        let name = rename.unwrap_or("GCRA");
        assert_eq!(call(&mut con, name, &[key.clone(), "1".into(), "1".into(), "1".into()])[0], 0);
        let kind: String = redis::cmd("TYPE").arg(&key).query(&mut con).unwrap();
        assert_eq!(kind, "gcra", "core's own command answered");
        assert_eq!(call(&mut con, "RL.TOKEN", &[unique_key("t"), "1".into(), "1".into(), "1".into()])[0], 1);
        assert_eq!(
            call(&mut con, "CL.THROTTLE", &[unique_key("c"), "1".into(), "1".into(), "1".into()])[0],
            0
        );
        if rename.is_some() {
            let unknown =
                redis::cmd("GCRA").arg("k").arg(1).arg(1).arg(1).query::<Value>(&mut con).unwrap_err();
            assert!(unknown.to_string().contains("unknown command"), "{unknown}");
        }
    }
}
