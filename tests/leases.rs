//! RL.ACQUIRE / RL.RELEASE / RL.RENEW: leases on work in flight, against real servers.

mod common;

use common::calls::*;
use common::{start_replica, wait_in_sync};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use testkit::redis::{self, Connection};
use testkit::{unique_key, Server};

fn acquire(con: &mut Connection, key: &str, limit: u64, lease: &str, id: &str) -> Limit {
    rl(con, "RL.ACQUIRE", &[key, &limit.to_string(), lease, id])
}

fn int(con: &mut Connection, command: &str, args: &[&str]) -> i64 {
    let mut cmd = redis::cmd(command);
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(con).unwrap_or_else(|e| panic!("{command} {args:?}: {e}"))
}

#[test]
fn leases_hold_slots_until_released_and_only_their_holder_releases_them() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("lease");
    assert_eq!(acquire(&mut con, &key, 2, "60", "a").head(), (true, 2, 1));
    assert_eq!(acquire(&mut con, &key, 2, "60", "b").head(), (true, 2, 0));
    let before: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    let denied = acquire(&mut con, &key, 2, "60", "c");
    assert!(!denied.allowed);
    assert!(
        denied.retry_after_ms > 59_000 && denied.retry_after_ms <= 60_000,
        "until a lease ends: {denied:?}"
    );
    let after: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    assert_eq!(before, after, "a denial writes nothing");
    assert_eq!(acquire(&mut con, &key, 2, "60", "a").head(), (true, 2, 0), "a retry takes no other slot");
    // RL.INSPECT reads a lease key, with and without the limiter's parameters.
    let fields: Vec<redis::Value> =
        redis::cmd("RL.INSPECT").arg(&key).arg(3).arg(60).query(&mut con).unwrap();
    let field = |name: &str| {
        let at = fields.iter().position(|v| *v == redis::Value::SimpleString(name.into())).expect(name);
        fields[at + 1].clone()
    };
    assert_eq!(field("limiter"), redis::Value::SimpleString("RL.ACQUIRE".into()));
    assert_eq!((field("held"), field("weight_held")), (redis::Value::Int(2), redis::Value::Int(2)));
    assert_eq!(field("remaining"), redis::Value::Int(1), "with limit 3, one slot is free");
    assert_eq!(int(&mut con, "RL.RELEASE", &[&key, "c"]), 0, "c holds nothing");
    assert_eq!(int(&mut con, "RL.RELEASE", &[&key, "b"]), 1);
    assert_eq!(int(&mut con, "RL.RELEASE", &[&key, "b"]), 0, "released already: idempotent");
    assert!(acquire(&mut con, &key, 2, "60", "c").allowed);
    assert_eq!(int(&mut con, "RL.RELEASE", &[&key, "a"]), 1);
    assert_eq!(int(&mut con, "RL.RELEASE", &[&key, "c"]), 1);
    assert!(!exists(&mut con, &key), "the last release deletes the key");
}

#[test]
fn a_retry_keeps_its_weight_and_weights_count() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("weight");
    assert_eq!(rl(&mut con, "RL.ACQUIRE", &[&key, "3", "60", "big", "WEIGHT", "2"]).remaining, 1);
    assert_eq!(rl(&mut con, "RL.ACQUIRE", &[&key, "3", "60", "big"]).remaining, 1, "the same request");
    assert!(!rl(&mut con, "RL.ACQUIRE", &[&key, "3", "60", "x", "WEIGHT", "2"]).allowed);
    let never = rl(&mut con, "RL.ACQUIRE", &[&key, "3", "60", "y", "WEIGHT", "4"]);
    assert_eq!((never.allowed, never.retry_after_ms), (false, -1), "4 never fits in 3");
}

#[test]
fn an_expired_lease_frees_its_slot_without_any_call_and_cannot_be_renewed() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("expire");
    assert!(acquire(&mut con, &key, 1, "0.2", "crashed").allowed);
    let ttl = pttl(&mut con, &key);
    // Within the lease (200 ms) and the expiry's slack after it (max(1 s, 1/16 of the lease)), plus
    // the milliseconds the server's clocks may disagree by.
    assert!(ttl > 0 && ttl <= 1250, "the key expires within a second of its last lease: {ttl}");
    assert_eq!(int(&mut con, "RL.RENEW", &[&key, "0.2", "other"]), 0, "only the holder renews");
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(int(&mut con, "RL.RENEW", &[&key, "60", "crashed"]), 0, "lost: the holder must stop");
    assert!(acquire(&mut con, &key, 1, "60", "next").allowed, "the crashed holder's slot is free");
    assert_eq!(int(&mut con, "RL.RENEW", &[&key, "120", "next"]), 1);
    assert!(pttl(&mut con, &key) > 60_000, "the renewed lease moved the key's expiry");
}

#[test]
fn never_more_holders_than_the_limit_across_many_connections() {
    let server = Server::builder().single();
    let key = unique_key("inflight");
    let (inside, most) = (AtomicI64::new(0), AtomicI64::new(0));
    std::thread::scope(|scope| {
        for t in 0..20 {
            let (server, key, inside, most) = (&server, &key, &inside, &most);
            scope.spawn(move || {
                let mut con = server.conn();
                for i in 0..10 {
                    let id = format!("holder-{t}-{i}");
                    if acquire(&mut con, key, 5, "30", &id).allowed {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(2));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        assert_eq!(int(&mut con, "RL.RELEASE", &[key, &id]), 1);
                    }
                }
            });
        }
    });
    let most = most.load(Ordering::SeqCst);
    assert!((1..=5).contains(&most), "held at once, measured by the holders: {most}");
    assert!(!exists(&mut server.conn(), &key), "every slot is free at the end");
}

#[test]
fn leases_survive_failover_and_reload_and_release_there() {
    let Some(primary) = Server::builder().own() else { return };
    let replica = start_replica(&primary);
    let (mut p, mut r) = (primary.conn(), replica.conn());
    assert!(acquire(&mut p, "job", 3, "60", "worker-1").allowed);
    assert!(acquire(&mut p, "job", 3, "60", "worker-2").allowed);
    wait_in_sync(&mut p, &mut r);
    assert_eq!(common::digest(&mut p), common::digest(&mut r), "replicated by effect");
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    assert_eq!(int(&mut r, "RL.RELEASE", &["job", "worker-1"]), 1, "the promoted replica knows the holder");
    assert_eq!(int(&mut r, "RL.RENEW", &["job", "60", "worker-2"]), 1);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut r).unwrap();
    assert_eq!(int(&mut r, "RL.RENEW", &["job", "60", "worker-2"]), 1, "after DEBUG RELOAD");
    assert_eq!(int(&mut r, "RL.RELEASE", &["job", "worker-2"]), 1, "after DEBUG RELOAD");
}

/// A holder keeps its lease through a restart from the RDB and through an AOF reload: RENEW and
/// RELEASE of the same id work on the restarted server (the stored id is a hash that is the same in
/// every process), and a stranger's id still does nothing.
#[test]
fn release_and_renew_work_after_a_restart_and_after_an_aof_reload() {
    for (config, shutdown) in [
        (&["--appendonly", "no"][..], "SAVE"),
        (&["--appendonly", "yes", "--appendfsync", "always"][..], "NOSAVE"),
    ] {
        let Some(mut server) = Server::builder().args(config).own() else { return };
        let mut con = server.conn();
        assert!(acquire(&mut con, "job", 2, "60", "worker-1").allowed);
        assert!(acquire(&mut con, "job", 2, "60", "worker-2").allowed);
        let _: () = redis::cmd("RL.RENEW").arg("job").arg("30").arg("worker-2").query(&mut con).unwrap();
        server.restart(shutdown);
        let mut con = server.conn();
        let how = if shutdown == "SAVE" { "after a restart from the RDB" } else { "after an AOF reload" };
        assert!(!acquire(&mut con, "job", 2, "60", "worker-3").allowed, "{how}: both slots still held");
        assert_eq!(int(&mut con, "RL.RELEASE", &["job", "stranger"]), 0, "{how}");
        assert_eq!(int(&mut con, "RL.RENEW", &["job", "60", "worker-1"]), 1, "{how}");
        assert_eq!(int(&mut con, "RL.RELEASE", &["job", "worker-2"]), 1, "{how}");
        assert!(acquire(&mut con, "job", 2, "60", "worker-3").allowed, "{how}: the released slot is free");
    }
}

/// A lease taken before release 0.3 (its id stored as the first 16 bytes of SHA-256) keeps working
/// for its holder: re-acquired without a second slot (and then stored under SHA-1, as the Lua library
/// stores it), renewed and released; nobody else's id matches it.
#[test]
fn leases_written_by_0_2_still_belong_to_their_holders() {
    use sha2::{Digest, Sha256};
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("lease-0.2");
    let (s, us): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
    let ends_us = (s * 1_000_000 + us + 60_000_000) as u64;
    let record = |id: &str| {
        let mut r = Sha256::digest(id.as_bytes())[..16].to_vec();
        r.extend_from_slice(&ends_us.to_le_bytes());
        r.extend_from_slice(&1u32.to_le_bytes());
        r
    };
    let value = [&b"RLA\x01"[..], &record("old-a"), &record("old-b")].concat();
    let _: () = redis::cmd("SET").arg(&key).arg(&value).arg("PX").arg(60_000).query(&mut con).unwrap();
    assert_eq!(acquire(&mut con, &key, 2, "60", "old-a").head(), (true, 2, 0), "no second slot");
    let stored: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    let sha1 = {
        use sha1::Digest as _;
        sha1::Sha1::digest(b"old-a")[..16].to_vec()
    };
    assert_eq!(&stored[4..20], &sha1[..], "re-acquired: stored under SHA-1");
    assert_eq!(int(&mut con, "RL.RELEASE", &[&key, "stranger"]), 0);
    assert_eq!(int(&mut con, "RL.RENEW", &[&key, "60", "old-b"]), 1);
    assert_eq!(int(&mut con, "RL.RELEASE", &[&key, "old-b"]), 1);
    assert_eq!(int(&mut con, "RL.RELEASE", &[&key, "old-a"]), 1);
}

/// Acquire outcomes are counted like any limiter's (INFO, its key classes, RL.TOP), and RL.INSPECT
/// shows a lease key's soonest and latest expiry.
#[test]
fn acquires_are_counted_and_inspected_like_any_limiter() {
    let Some(server) = Server::builder().own() else { return };
    let mut con = server.conn();
    let time_ms = |con: &mut Connection| -> i64 {
        let (s, us): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
        s * 1000 + us / 1000
    };
    let before = time_ms(&mut con);
    assert!(acquire(&mut con, "jobs:tenant:1", 2, "10", "a").allowed);
    assert!(acquire(&mut con, "jobs:tenant:1", 2, "30", "b").allowed);
    for _ in 0..3 {
        assert!(!acquire(&mut con, "jobs:tenant:1", 2, "30", "c").allowed);
    }
    let bad: redis::RedisResult<Vec<i64>> =
        redis::cmd("RL.ACQUIRE").arg("jobs:tenant:1").arg(0).arg(10).arg("x").query(&mut con);
    assert!(bad.is_err());
    let field = |con: &mut Connection, name: &str| {
        testkit::info_field(con, "ratelimit", name).and_then(|v| v.parse::<u64>().ok())
    };
    assert_eq!(field(&mut con, "ratelimit_acquire_allowed"), Some(2));
    assert_eq!(field(&mut con, "ratelimit_acquire_denied"), Some(3));
    assert_eq!(field(&mut con, "ratelimit_acquire_errors"), Some(1));
    let info: String = redis::cmd("INFO").arg("ratelimit").query(&mut con).unwrap();
    let class = info.lines().find(|l| l.contains("name=jobs:tenant,")).unwrap_or_else(|| panic!("{info}"));
    assert!(
        class.contains("allowed=2") && class.contains("denied=3") && class.contains("errors=1"),
        "{class}"
    );
    let top: redis::Value = redis::cmd("RL.TOP").arg(1).query(&mut con).unwrap();
    assert!(format!("{top:?}").contains("jobs:tenant:1"), "the denied lease key is on top: {top:?}");
    // The soonest and the latest lease end, in Unix ms: 10 s and 30 s after their acquisition, which
    // happened between `before` and `after`.
    let fields: Vec<redis::Value> = redis::cmd("RL.INSPECT").arg("jobs:tenant:1").query(&mut con).unwrap();
    let pttl: i64 = redis::cmd("PTTL").arg("jobs:tenant:1").query(&mut con).unwrap();
    let after = time_ms(&mut con);
    let field = |name: &str| -> i64 {
        let at = fields.iter().position(|v| *v == redis::Value::SimpleString(name.into())).expect(name);
        redis::from_redis_value(fields[at + 1].clone()).unwrap()
    };
    let (next, last) = (field("next_expiry_ms"), field("last_expiry_ms"));
    assert!((before + 10_000..=after + 10_001).contains(&next), "a's lease: {next}, {before}..{after}");
    assert!((before + 30_000..=after + 30_001).contains(&last), "b's lease: {last}, {before}..{after}");
    // Never before the last lease ends, and at most the slack after it: 1/16 of b's 30 s lease.
    assert!(pttl > 0 && before + pttl <= last + 1875 + 1, "the key outlives its last lease: {pttl}");
    assert!(after + pttl >= last - 1, "the key expires with its last lease: {pttl}");
}

#[test]
fn all_takes_a_lease_and_a_token_together_or_neither() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let (lease, bucket) = (unique_key("{both}:lease"), unique_key("{both}:rate"));
    let call = |con: &mut Connection, id: &str, cost: &str| {
        rl(
            con,
            "RL.ALL",
            &[&lease, "ACQUIRE", "1", "60", id, "WEIGHT", "1", &bucket, "TOKEN", "2", "0.001", cost],
        )
    };
    assert!(call(&mut con, "a", "1").allowed);
    let lease_denied = call(&mut con, "b", "1");
    assert_eq!((lease_denied.allowed, lease_denied.limiting), (false, Some(1)));
    assert_eq!(token(&mut con, &bucket, 2, "0.001", 0).remaining, 1, "a denied lease takes no token");
    assert_eq!(int(&mut con, "RL.RELEASE", &[&lease, "a"]), 1);
    let token_denied = call(&mut con, "c", "2");
    assert_eq!((token_denied.allowed, token_denied.limiting), (false, Some(2)));
    assert!(!exists(&mut con, &lease), "a denied token takes no lease");
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("RL.ALL")
        .arg("l")
        .arg("ACQUIRE")
        .arg(1)
        .arg(60)
        .arg("id")
        .arg("WEIGHT")
        .arg(1)
        .arg("t")
        .arg("TOKEN")
        .arg(1)
        .arg(1)
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["l", "t"]);
}

#[test]
fn bad_lease_arguments_get_a_clear_error() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("lease-bad");
    let k = key.as_bytes();
    let limit_error = "ERR invalid limit: must be a whole number from 1 to 100000";
    assert_eq!(rl_error(&mut con, "RL.ACQUIRE", &[k, b"0", b"60", b"a"]), limit_error);
    assert_eq!(rl_error(&mut con, "RL.ACQUIRE", &[k, b"100001", b"60", b"a"]), limit_error);
    assert!(rl_error(&mut con, "RL.ACQUIRE", &[k, b"1", b"0", b"a"]).starts_with("ERR invalid lease:"));
    assert_eq!(rl_error(&mut con, "RL.ACQUIRE", &[k, b"1", b"60", b""]), "ERR invalid id: must not be empty");
    assert!(rl_error(&mut con, "RL.ACQUIRE", &[k, b"1", b"60", b"a", b"WEIGHT", b"0"])
        .starts_with("ERR invalid weight:"));
    assert_eq!(rl_error(&mut con, "RL.ACQUIRE", &[k, b"1", b"60", b"a", b"HEAVY", b"2"]), "ERR syntax error");
    assert!(rl_error(&mut con, "RL.RELEASE", &[k]).starts_with("ERR wrong number of arguments"));
    assert!(rl_error(&mut con, "RL.RENEW", &[k, b"-1", b"a"]).starts_with("ERR invalid lease:"));
    assert!(!exists(&mut con, &key));
}
