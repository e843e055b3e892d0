//! Helpers shared by the integration tests: mixed traffic and state comparison between servers.

#![allow(dead_code)] // each test binary uses its own subset

pub mod calls;
pub mod clockshift;
pub mod lua;
#[allow(unused_imports)] // each test binary uses its own subset
pub use testkit::{cluster, wait_until};
pub mod shim;

use ratelimit_core::kind::{LimiterKind, ParamType, RequestForm};
use testkit::redis::{self, Connection, Value};
use testkit::{info_field, Server};

/// Fails unless the keys under `prefix` hold a value of every limiter kind of core's registry (as
/// RL.INSPECT names them): a kind added to core but not to the traffic mix is not replicated, reloaded
/// or digested by the tests that use the mix.
pub fn assert_every_kind_written(con: &mut Connection, prefix: &str) {
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:*")).query(con).expect("KEYS");
    let mut written = std::collections::BTreeSet::new();
    for key in keys {
        // RESP2: the map as a flat array, `limiter` first.
        if let Ok(Value::Array(fields)) = redis::cmd("RL.INSPECT").arg(&key).query::<Value>(con) {
            if let Some(Value::SimpleString(limiter)) = fields.get(1) {
                written.insert(limiter.clone());
            }
        }
    }
    // A kind that decides on another's state (a reservation, on a token bucket's) is inspected as
    // its owner: the mix writes it too (see `mixed_token_traffic`).
    for kind in LimiterKind::ALL {
        assert!(
            written.contains(kind.owner().command()),
            "the traffic mix wrote no {} key: {written:?}",
            kind.owner().command()
        );
    }
}

/// Runs a deterministic mix of allowed and denied calls of every RL.* command (multi-key RL.TOKEN,
/// peeks, over-limit costs, refunds, RL.SLIDE logs that grow) over `keys` keys per command, and returns
/// how many were allowed and denied.
pub fn mixed_token_traffic(con: &mut Connection, prefix: &str, calls: usize, keys: usize) -> (usize, usize) {
    let (mut allowed, mut denied) = (0, 0);
    for i in 0..calls {
        let key = format!("{prefix}:{{t}}:{}", i % keys);
        let cost = (i * 7 % 5) as u64; // 0..4, capacity 5: some calls cost more than is left
        let mut cmd = redis::cmd("RL.TOKEN");
        cmd.arg(&key).arg(5).arg("0.01").arg(cost);
        if i % 10 == 3 {
            cmd.arg(format!("{prefix}:{{t}}:global")).arg(40).arg("0.02").arg(1);
        }
        let reply: Vec<i64> = cmd.query(con).expect("RL.TOKEN failed");
        if reply[0] == 1 {
            allowed += 1
        } else {
            denied += 1
        }
    }
    // The dialects (redis-cell's stored format, and GCRA's RL.TOKEN keys), allowed and denied.
    for i in 0..40 {
        let key = format!("{prefix}:{{t}}:cell:{}", i % 4);
        let _: Vec<i64> =
            redis::cmd("CL.THROTTLE").arg(&key).arg(3).arg(1).arg(60).query(con).expect("CL.THROTTLE failed");
        let key = format!("{prefix}:{{t}}:gcra:{}", i % 4);
        let _: Vec<i64> =
            redis::cmd("GCRA").arg(&key).arg(3).arg(1).arg("0.5").query(con).expect("GCRA failed");
    }
    // The commands inside MULTI/EXEC and inside a script replicate by effect too.
    let mut block = redis::pipe();
    block.atomic();
    block.cmd("RL.TOKEN").arg(format!("{prefix}:{{t}}:multi")).arg(5).arg("0.01").arg(2).ignore();
    block.cmd("RL.SLIDE").arg(format!("{prefix}:{{t}}:multi-slide")).arg(5).arg(300).arg("m").ignore();
    block.cmd("RL.FIXED").arg(format!("{prefix}:{{t}}:multi-fixed")).arg(5).arg(300).ignore();
    block.exec(con).expect("MULTI/EXEC with RL.* failed");
    // RL.ALL over every kind, allowed then denied by its window (and by the lease: weight 2 of 3 is
    // held), replicates the effects of the first.
    for round in 0..2 {
        let _: Vec<i64> = redis::cmd("RL.ALL")
            .arg(format!("{prefix}:{{t}}:all-token"))
            .arg("TOKEN")
            .arg(5)
            .arg("0.01")
            .arg(1)
            .arg(format!("{prefix}:{{t}}:all-fixed"))
            .arg("FIXED")
            .arg(1)
            .arg(300)
            .arg(1)
            .arg(format!("{prefix}:{{t}}:all-count"))
            .arg("SLIDECOUNT")
            .arg(5)
            .arg(300)
            .arg(1)
            .arg(format!("{prefix}:{{t}}:all-slide"))
            .arg("SLIDE")
            .arg(5)
            .arg(300)
            .arg("a")
            .arg("DEDUP")
            .arg(format!("{prefix}:{{t}}:all-lease"))
            .arg("ACQUIRE")
            .arg(3)
            .arg(300)
            .arg(format!("holder-{round}"))
            .arg("WEIGHT")
            .arg(2)
            .query(con)
            .expect("RL.ALL failed");
    }
    // Leases: acquired, renewed, one released (the key lives on with the other).
    for (command, args) in [
        ("RL.ACQUIRE", vec!["2", "300", "w1"]),
        ("RL.ACQUIRE", vec!["2", "300", "w2"]),
        ("RL.ACQUIRE", vec!["2", "300", "w3"]),
        ("RL.RENEW", vec!["600", "w1"]),
        ("RL.RELEASE", vec!["w2"]),
    ] {
        let mut cmd = redis::cmd(command);
        cmd.arg(format!("{prefix}:{{t}}:lease"));
        for a in args {
            cmd.arg(a);
        }
        let _: Value = cmd.query(con).expect("a lease command failed");
    }
    for max in [3, 5] {
        let _: Vec<i64> = redis::cmd("RL.TAKE")
            .arg(format!("{prefix}:{{t}}:take"))
            .arg(5)
            .arg("0.01")
            .arg(max)
            .query(con)
            .expect("RL.TAKE failed");
    }
    // Reservations: taken now, then from the future (the TAT moves past a full bucket), then denied
    // beyond the wait; and a batch.
    for (cost, max_wait) in [(5, "0"), (2, "300"), (5, "0.001")] {
        let _: Vec<i64> = redis::cmd("RL.RESERVE")
            .arg(format!("{prefix}:{{t}}:reserve"))
            .arg(5)
            .arg("0.01")
            .arg(cost)
            .arg(max_wait)
            .query(con)
            .expect("RL.RESERVE failed");
    }
    let _: Vec<i64> = redis::cmd("RL.RESERVE")
        .arg(format!("{prefix}:{{t}}:reserve-batch"))
        .arg(5)
        .arg("0.01")
        .arg(2)
        .arg(60)
        .arg("UPTO")
        .arg(4)
        .query(con)
        .expect("RL.RESERVE UPTO failed");
    // Every kind once more through RL.ALL, from its declaration alone (parameters within its declared
    // bounds, a request of its form), so that a kind added to core is in the mix without an edit here.
    for kind in LimiterKind::ALL {
        let mut cmd = redis::cmd("RL.ALL");
        cmd.arg(format!("{prefix}:{{t}}:every:{}", kind.name())).arg(kind.group());
        for param in kind.params() {
            let value: u64 = match param.form {
                ParamType::Whole => 3,
                ParamType::Decimal => 1,
                ParamType::Seconds => 60,
            };
            assert!((param.min..=param.max).contains(&value), "{kind:?} {}", param.name);
            cmd.arg(value);
        }
        let request: &[&str] = match kind.request_form() {
            RequestForm::Cost => &["1"],
            RequestForm::Reserve => &["1", "0"],
            RequestForm::Id | RequestForm::Lease => &["mix"],
        };
        let _: Vec<i64> = cmd.arg(request).query(con).expect("RL.ALL of a kind's declared example failed");
    }
    let script = "return redis.call('RL.TOKEN', KEYS[1], 5, '0.01', 1)";
    let _: Vec<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg(format!("{prefix}:{{t}}:script"))
        .query(con)
        .expect("EVAL failed");
    (allowed, denied)
}

pub fn digest(con: &mut Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(con).expect("DEBUG DIGEST failed")
}

pub fn dbsize(con: &mut Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).unwrap()
}

/// Starts a replica of `primary` and waits until its link is up.
pub fn start_replica(primary: &Server) -> Server {
    let replica = Server::builder().args(&["--replicaof", "127.0.0.1", &primary.port.to_string()]).start();
    let mut con = replica.conn();
    wait_until("replica link up", || {
        info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up")
    });
    replica
}

/// Waits until the replica has applied everything the primary sent.
pub fn wait_in_sync(primary: &mut Connection, replica: &mut Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(primary).unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge");
    wait_until("equal replication offsets", || {
        info_field(primary, "replication", "master_repl_offset")
            == info_field(replica, "replication", "slave_repl_offset")
    });
}

/// Every key with its value as GET sees it and its absolute expiry, sorted: a readable diff when
/// digests differ.
pub fn dump_strings(con: &mut Connection) -> Vec<(String, Value, i64)> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let v: Value = redis::cmd("DUMP").arg(&k).query(con).unwrap();
            let t: i64 = redis::cmd("PEXPIRETIME").arg(&k).query(con).unwrap();
            (k, v, t)
        })
        .collect()
}
