//! RL.TOKEN against a real server: the behaviours a distributed limiter must show (burst, refill, isolation, races), every reply field, peeks, and
//! denials that write nothing.

mod common;

use common::calls::{rl_error, token};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use testkit::redis::{self, Connection, Value};
use testkit::{info_field, unique_key, Server};

fn error_of(con: &mut Connection, args: &[&[u8]]) -> String {
    rl_error(con, "RL.TOKEN", args)
}

fn pexpiretime(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap()
}

#[test]
fn capacity_then_denial_with_every_reply_field() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("cap");
    for i in 0..10 {
        let r = token(&mut con, &key, 10, "5", 1);
        assert_eq!(r.fields()[..4], [1, 10, 9 - i, 0], "request {i}");
        // reset_after: (i + 1) tokens missing at 200 ms each, minus the little time that passed.
        assert!(
            r.reset_after_ms <= 200 * (i + 1) && r.reset_after_ms > 200 * (i + 1) - 100,
            "reset_after {}",
            r.reset_after_ms
        );
    }
    let denied = token(&mut con, &key, 10, "5", 1);
    assert_eq!(denied.head(), (false, 10, 0));
    assert!(
        denied.retry_after_ms > 100 && denied.retry_after_ms <= 200,
        "retry_after {}",
        denied.retry_after_ms
    );
    assert!(
        denied.reset_after_ms > 1900 && denied.reset_after_ms <= 2000,
        "reset_after {}",
        denied.reset_after_ms
    );
}

#[test]
fn tokens_refill_at_the_rate() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("refill");
    // 20 tokens/s: one every 50 ms.
    for _ in 0..4 {
        assert!(token(&mut con, &key, 4, "20", 1).allowed);
    }
    let denied = token(&mut con, &key, 4, "20", 1);
    assert!(!denied.allowed);
    std::thread::sleep(Duration::from_millis(denied.retry_after_ms as u64));
    assert!(token(&mut con, &key, 4, "20", 1).allowed, "waiting retry_after_ms must be enough");
    std::thread::sleep(Duration::from_millis(120));
    let allowed = (0..4).filter(|_| token(&mut con, &key, 4, "20", 1).allowed).count();
    // 120 ms at 50 ms per token: 2 tokens back (3 if the calls themselves took a while).
    assert!((2..=3).contains(&allowed), "{allowed} allowed after 120 ms");
}

#[test]
fn concurrent_requests_over_many_connections_admit_exactly_capacity() {
    let server = Arc::new(Server::builder().single());
    let key = Arc::new(unique_key("race"));
    let threads = 50;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (server, key, barrier) = (server.clone(), key.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut con = server.conn();
                barrier.wait();
                (0..4).filter(|_| token(&mut con, &key, 10, "0.001", 1).allowed).count()
            })
        })
        .collect();
    let allowed: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(allowed, 10, "200 concurrent requests at capacity 10");
}

#[test]
fn keys_are_isolated() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let (ada, bob) = (unique_key("ada"), unique_key("bob"));
    while token(&mut con, &ada, 10, "1", 1).allowed {}
    assert_eq!(token(&mut con, &bob, 10, "1", 1).head(), (true, 10, 9));
}

#[test]
fn cost_takes_several_tokens_and_a_denial_takes_none() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("cost");
    assert_eq!(token(&mut con, &key, 9, "0.01", 5).head(), (true, 9, 4));
    let denied = token(&mut con, &key, 9, "0.01", 5);
    assert_eq!(denied.head(), (false, 9, 4));
    // One token short at 0.01/s: about 100 s.
    assert!(
        denied.retry_after_ms > 99_000 && denied.retry_after_ms <= 100_000,
        "retry_after {}",
        denied.retry_after_ms
    );
    assert_eq!(token(&mut con, &key, 9, "0.01", 4).head(), (true, 9, 0), "the denial consumed nothing");
    // More than capacity can never succeed.
    assert_eq!(token(&mut con, &key, 9, "0.01", 10).fields()[..4], [0, 9, 0, -1]);
}

#[test]
fn idle_keys_expire_once_the_bucket_is_full() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("ttl");
    let r = token(&mut con, &key, 2, "10", 2);
    let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
    // The key lives until the bucket is full again (r.reset_after_ms ms), plus at most one second of slack.
    assert!(
        pttl >= r.reset_after_ms - 50 && pttl <= r.reset_after_ms + 1001,
        "TTL {pttl} ms, bucket full in {} ms",
        r.reset_after_ms
    );
    std::thread::sleep(Duration::from_millis(pttl as u64 + 150));
    let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut con).unwrap();
    assert_eq!(exists, 0, "the idle key is gone");
    assert_eq!(token(&mut con, &key, 2, "10", 1).head(), (true, 2, 1), "a full bucket again");
}

#[test]
fn the_ttl_never_ends_before_the_bucket_is_full() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("ttl-grow");
    // Each call pushes the full-again instant 100 ms further; the expiry must follow: never before the
    // bucket is full, and less than one second after.
    for _ in 0..30 {
        token(&mut con, &key, 50, "10", 1);
        let value: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
        let full_at_ns = stored_tat(&value);
        let expires_at_ns = pexpiretime(&mut con, &key) * 1_000_000;
        assert!(
            expires_at_ns >= full_at_ns && expires_at_ns < full_at_ns + 1_000_000_000,
            "expiry {expires_at_ns}, full at {full_at_ns}"
        );
    }
}

#[test]
fn peek_reports_without_consuming_or_creating() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("peek");
    assert_eq!(token(&mut con, &key, 5, "1", 0).fields(), [1, 5, 5, 0, 0]);
    let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut con).unwrap();
    assert_eq!(exists, 0, "a peek at a new key creates nothing");
    token(&mut con, &key, 5, "0.1", 2);
    let expiry = pexpiretime(&mut con, &key);
    for _ in 0..3 {
        assert_eq!(token(&mut con, &key, 5, "0.1", 0).head(), (true, 5, 3));
    }
    assert_eq!(pexpiretime(&mut con, &key), expiry, "a peek leaves the TTL alone");
}

#[test]
fn denials_write_nothing() {
    let Some(server) = Server::builder().own() else { return };
    let mut con = server.conn();
    let key = unique_key("deny");
    token(&mut con, &key, 2, "0.01", 2);
    let value: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    let expiry = pexpiretime(&mut con, &key);
    let dirty = info_field(&mut con, "persistence", "rdb_changes_since_last_save").unwrap();
    let offset = info_field(&mut con, "replication", "master_repl_offset").unwrap();
    for cost in [1, 2, 3] {
        assert!(!token(&mut con, &key, 2, "0.01", cost).allowed);
    }
    let after: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    assert_eq!(after, value);
    assert_eq!(pexpiretime(&mut con, &key), expiry);
    assert_eq!(info_field(&mut con, "persistence", "rdb_changes_since_last_save").unwrap(), dirty);
    assert_eq!(info_field(&mut con, "replication", "master_repl_offset").unwrap(), offset);
}

#[test]
fn state_is_one_tagged_twelve_byte_string_with_a_ttl() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("state");
    let before = now_ns(&mut con);
    let r = token(&mut con, &key, 10, "5", 1);
    let kind: String = redis::cmd("TYPE").arg(&key).query(&mut con).unwrap();
    assert_eq!(kind, "string");
    let value: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    assert_eq!(&value[..4], b"RLT\x01", "the token bucket's tag, then the TAT");
    let tat = stored_tat(&value);
    // The TAT is when the bucket is full again: now + reset_after.
    let expected = before + r.reset_after_ms * 1_000_000;
    assert!((tat - expected).abs() < 50_000_000, "TAT {tat} vs {expected}");
    assert!(pexpiretime(&mut con, &key) * 1_000_000 >= tat);
}

/// The TAT in a bucket's value: the tag `RLT\x01`, then the TAT as 8 little-endian bytes.
fn stored_tat(value: &[u8]) -> i64 {
    assert_eq!(value.len(), 12, "tag and TAT: {value:?}");
    i64::from_le_bytes(value[4..].try_into().unwrap())
}

fn now_ns(con: &mut Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    secs * 1_000_000_000 + micros * 1_000
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("bad");
    let k = key.as_bytes();
    let arity = "ERR wrong number of arguments for 'rl.token' command";
    let cases: Vec<(Vec<&[u8]>, &str)> = vec![
        (vec![], arity),
        (vec![k], arity),
        (vec![k, b"10", b"5"], arity),
        (vec![k, b"10", b"5", b"1", b"extra"], arity),
        (vec![k, b"0", b"5", b"1"], "ERR invalid capacity: must be a whole number >= 1"),
        (vec![k, b"-3", b"5", b"1"], "ERR invalid capacity: must be a whole number >= 1"),
        (vec![k, b"2.5", b"5", b"1"], "ERR invalid capacity: must be a whole number >= 1"),
        (vec![k, b"ten", b"5", b"1"], "ERR invalid capacity: must be a whole number >= 1"),
        (vec![k, b"99999999999999999999", b"5", b"1"], "ERR invalid capacity: too large"),
        (vec![k, b"10", b"0", b"1"], "ERR invalid rate: must be a number > 0 (tokens per second)"),
        (vec![k, b"10", b"-1", b"1"], "ERR invalid rate: must be a number > 0 (tokens per second)"),
        (vec![k, b"10", b"nan", b"1"], "ERR invalid rate: must be a number > 0 (tokens per second)"),
        (vec![k, b"10", b"inf", b"1"], "ERR invalid rate: must be a number > 0 (tokens per second)"),
        (vec![k, b"10", b"1e400", b"1"], "ERR invalid rate: out of range"),
        (vec![k, b"10", b"1e10", b"1"], "ERR invalid rate: must be at most 1000000000 tokens per second"),
        (
            vec![k, b"10", b"1e-30", b"1"],
            "ERR invalid capacity: capacity / rate must be at most 3000000000 seconds",
        ),
        (vec![k, b"10", b"5", b"-1"], "ERR invalid cost: must be a whole number >= 0"),
        (vec![k, b"10", b"5", b"1.5"], "ERR invalid cost: must be a whole number >= 0"),
        (vec![k, b"10", b"5", b"\xff\xfe"], "ERR invalid cost: must be a whole number >= 0"),
        (vec![k, b"10", b"5", b"1", k, b"3", b"1", b"1"], "ERR the same key appears more than once"),
    ];
    for (args, expected) in cases {
        assert_eq!(error_of(&mut con, &args), expected, "args {args:?}");
    }
    let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut con).unwrap();
    assert_eq!(exists, 0, "no bad call wrote anything");

    let _: () = redis::cmd("HSET").arg(&key).arg("f").arg("v").query(&mut con).unwrap();
    assert!(error_of(&mut con, &[k, b"10", b"5", b"1"]).starts_with("WRONGTYPE"));
    let _: () = redis::cmd("SET").arg(&key).arg("not a number").query(&mut con).unwrap();
    assert_eq!(
        error_of(&mut con, &[k, b"10", b"5", b"1"]),
        "ERR the key holds a value that is not this limiter's state"
    );
    let value: String = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    assert_eq!(value, "not a number");
}

#[test]
fn registered_with_flags_and_key_positions() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("RL.TOKEN")
        .arg("a")
        .arg(1)
        .arg(1)
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["a"]);
    let info: Value = redis::cmd("COMMAND").arg("INFO").arg("rl.token").query(&mut con).unwrap();
    let text = format!("{info:?}");
    for flag in ["write", "denyoom", "fast"] {
        assert!(text.contains(flag), "flag {flag} missing in {text}");
    }
}

/// Rates as Java's BigDecimal or Python's Decimal print 5/60 (30 decimal places) are accepted and mean
/// what they say: 11 tokens, one every 12 s.
#[test]
fn rates_with_many_decimal_places_are_accepted() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("long-rate");
    let rate = "0.083333333333333328707404064062";
    assert_eq!(token(&mut con, &key, 11, rate, 0).fields(), [1, 11, 11, 0, 0]);
    assert_eq!(token(&mut con, &key, 11, rate, 1).head(), (true, 11, 10));
    let denied = token(&mut con, &key, 11, rate, 11);
    assert!(!denied.allowed);
    // One token short at 5 per minute: about 12 s.
    assert!((11_990..=12_001).contains(&denied.retry_after_ms), "retry_after_ms {}", denied.retry_after_ms);
}

/// Times are free of the refill interval's nanosecond rounding: 3 tokens at 3/s are back in 1 s
/// (the interval is 333,333,334 ns), and `RateLimit-Reset` built from it says 1, not 2.
#[test]
fn a_full_refill_reports_whole_seconds_without_rounding_artefacts() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("artefact");
    assert_eq!(token(&mut con, &key, 3, "3", 3).fields(), [1, 3, 0, 0, 1000]);
    let denied = token(&mut con, &key, 3, "3", 3);
    assert!(!denied.allowed);
    assert!(denied.retry_after_ms <= 1000 && denied.reset_after_ms <= 1000, "{denied:?}");
    // Waiting retry_after_ms succeeds.
    std::thread::sleep(Duration::from_millis(denied.retry_after_ms as u64));
    assert!(token(&mut con, &key, 3, "3", 3).allowed);
}

/// A bucket's key expires on the first whole second at or after the bucket is full again: a function of
/// the stored TAT, so the module knows the expiry without reading it.
#[test]
fn keys_expire_on_the_whole_second_after_the_bucket_is_full() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("whole-second");
    for _ in 0..3 {
        token(&mut con, &key, 10, "3", 1);
        let at = pexpiretime(&mut con, &key);
        let tat_ms = {
            let raw: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
            let tat = stored_tat(&raw);
            tat / 1_000_000 + i64::from(tat % 1_000_000 != 0)
        };
        assert_eq!(at % 1000, 0, "on a whole second: {at}");
        assert!(at >= tat_ms && at - tat_ms < 1000, "expiry {at} vs full at {tat_ms}");
    }
    // A TTL changed by hand is corrected once the TAT moves into another second.
    let _: () = redis::cmd("PERSIST").arg(&key).query(&mut con).unwrap();
    for _ in 0..4 {
        token(&mut con, &key, 10, "3", 1); // 333 ms each: within two calls the TAT crosses a second
    }
    assert!(pexpiretime(&mut con, &key) > 0, "the TTL is back");
}
