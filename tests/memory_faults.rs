//! Memory faults: at maxmemory with noeviction every RL.* command is refused with Redis' OOM error
//! and nothing is half-written; a soak of a million calls leaves used_memory back at its baseline once
//! the keys have expired (nothing leaks in the module).

mod common;

use common::calls::{exists, rl};
use common::wait_until;
use std::time::Duration;
use testkit::redis::{self, Value};
use testkit::{info_field, Server};

fn used_memory(con: &mut redis::Connection) -> i64 {
    info_field(con, "memory", "used_memory").unwrap().parse().unwrap()
}

#[test]
fn at_maxmemory_every_command_is_refused_with_oom_and_nothing_changes() {
    let Some(server) = Server::builder().args(&["--maxmemory-policy", "noeviction"]).own() else { return };
    let mut con = server.conn();
    rl(&mut con, "RL.TOKEN", &["old", "5", "0.01", "2"]);
    let before: Vec<u8> = redis::cmd("GET").arg("old").query(&mut con).unwrap();
    let ttl_before: i64 = redis::cmd("PEXPIRETIME").arg("old").query(&mut con).unwrap();
    for i in 0..200 {
        let _: () =
            redis::cmd("SET").arg(format!("fill:{i}")).arg("x".repeat(10_000)).query(&mut con).unwrap();
    }
    // A limit well below what is used: every write that may allocate is refused from now on.
    let limit = used_memory(&mut con) - 1_000_000;
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(limit).query(&mut con).unwrap();
    let probe = redis::cmd("SET").arg("probe").arg("x").query::<()>(&mut con).expect_err("over maxmemory");
    assert_eq!(probe.code(), Some("OOM"));
    let calls: [(&str, Vec<&str>); 6] = [
        ("RL.TOKEN", vec!["old", "5", "0.01", "1"]),
        ("RL.TOKEN", vec!["new", "5", "0.01", "1"]),
        ("RL.FIXED", vec!["new", "5", "10"]),
        ("RL.SLIDE", vec!["new", "5", "10", "id"]),
        ("RL.SLIDECOUNT", vec!["new", "5", "10"]),
        ("RL.REFUND", vec!["TOKEN", "old", "5", "0.01", "1"]),
    ];
    for (command, args) in calls {
        let mut cmd = redis::cmd(command);
        for a in &args {
            cmd.arg(*a);
        }
        let err = cmd.query::<Value>(&mut con).expect_err("refused at maxmemory");
        assert_eq!(err.code(), Some("OOM"), "{command}: {err}");
    }
    assert!(!exists(&mut con, "new"), "nothing created");
    let after: Vec<u8> = redis::cmd("GET").arg("old").query(&mut con).unwrap();
    let ttl_after: i64 = redis::cmd("PEXPIRETIME").arg("old").query(&mut con).unwrap();
    assert_eq!((after, ttl_after), (before, ttl_before), "nothing half-written");
}

#[test]
fn a_million_calls_leave_no_memory_behind() {
    let Some(server) = Server::builder().own() else { return };
    let mut con = server.conn();
    let baseline = used_memory(&mut con);
    let total = std::env::var("SOAK_CALLS").ok().and_then(|c| c.parse().ok()).unwrap_or(1_000_000usize);
    for chunk in 0..total / 1000 {
        let mut pipe = redis::pipe();
        for j in 0..1000 {
            let i = chunk * 1000 + j;
            let key = format!("soak:{}", i % 100_000);
            match i % 4 {
                0 => pipe.cmd("RL.TOKEN").arg(&key).arg(2).arg(100).arg(1),
                1 => pipe.cmd("RL.FIXED").arg(format!("{key}:f")).arg(3).arg("0.05"),
                2 => pipe.cmd("RL.SLIDE").arg(format!("{key}:s")).arg(3).arg("0.05").arg(j),
                _ => pipe.cmd("RL.SLIDECOUNT").arg(format!("{key}:c")).arg(3).arg("0.05"),
            }
            .ignore();
        }
        pipe.exec(&mut con).expect("a soak call failed");
    }
    assert!(used_memory(&mut con) > baseline + 1_000_000, "the soak did fill memory");
    wait_until("every soak key to expire", || redis::cmd("DBSIZE").query::<i64>(&mut con).unwrap() == 0);
    // The dictionaries shrink back in the server's cron; give it a moment. What the server keeps for
    // itself afterwards (hash tables, buffers) stays under the tolerance, while a leak of even one byte
    // per call would leave a megabyte behind.
    let tolerance = 512 * 1024;
    let mut last = 0;
    for _ in 0..100 {
        last = used_memory(&mut con);
        if last <= baseline + tolerance {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(last <= baseline + tolerance, "used_memory {last} vs baseline {baseline} after {total} calls");
    eprintln!("used_memory {last} after {total} calls and expiry, baseline {baseline}");
}
