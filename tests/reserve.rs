//! RL.RESERVE: a token bucket's decision with a queue in it, against a real server.

mod common;

use common::calls::*;
use testkit::redis::{self, Connection};
use testkit::{unique_key, Server};

/// RL.RESERVE key capacity rate cost max_wait [UPTO max]: the reply's integers.
fn reserve(con: &mut Connection, key: &str, capacity: u64, rate: &str, cost: u64, max_wait: &str) -> Limit {
    let r: Vec<i64> =
        redis::cmd("RL.RESERVE").arg(key).arg(capacity).arg(rate).arg(cost).arg(max_wait).query(con).unwrap();
    Limit::from_reply(&r)
}

fn stored(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

#[test]
fn waiters_are_served_in_arrival_order_with_one_call_each() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("reserve-queue");
    // 5 tokens at 10/s: five now, then one every 100 ms, each reserved by the call that asks.
    for _ in 0..5 {
        assert_eq!(reserve(&mut con, &key, 5, "10", 1, "1").retry_after_ms, 0);
    }
    let waits: Vec<i64> = (0..3)
        .map(|_| reserve(&mut con, &key, 5, "10", 1, "1"))
        .map(|r| {
            assert!(r.allowed && r.remaining == 0, "a reservation is allowed, nothing left now: {r:?}");
            r.retry_after_ms
        })
        .collect();
    for (i, wait) in waits.iter().enumerate() {
        let expected = 100 * (i as i64 + 1);
        assert!((expected - 50..=expected).contains(wait), "waiter {i} waits its turn: {waits:?}");
    }
    // RL.TOKEN reads the same bucket: empty, with the reservations ahead of it.
    let token = token(&mut con, &key, 5, "10", 1);
    assert!(!token.allowed);
    assert!((350..=400).contains(&token.retry_after_ms), "after the three reserved: {token:?}");
    // The key lives until the bucket is full again after the reserved tokens.
    assert!(pttl(&mut con, &key) >= 800, "expiry follows the reserved TAT: {}", pttl(&mut con, &key));
    let inspected: Vec<redis::Value> = redis::cmd("RL.INSPECT").arg(&key).query(&mut con).unwrap();
    assert_eq!(inspected.get(1), Some(&redis::Value::SimpleString("RL.TOKEN".into())));
}

#[test]
fn beyond_max_wait_it_is_a_denial_that_writes_nothing() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("reserve-deny");
    assert!(reserve(&mut con, &key, 2, "1", 2, "0").allowed);
    let before = (stored(&mut con, &key), pttl(&mut con, &key));
    let denied = reserve(&mut con, &key, 2, "1", 1, "0.5");
    assert!(!denied.allowed);
    assert!((900..=1000).contains(&denied.retry_after_ms), "the wait it would have needed: {denied:?}");
    let after = (stored(&mut con, &key), pttl(&mut con, &key));
    assert_eq!(before.0, after.0, "a denial writes nothing");
    assert!(after.1 <= before.1);
    // A cost above capacity never fits.
    let never = reserve(&mut con, &key, 2, "1", 3, "60");
    assert_eq!((never.allowed, never.retry_after_ms), (false, -1));
    // max_wait 0 is RL.TOKEN's decision.
    let (reserved, taken) = (unique_key("reserve-zero"), unique_key("token-zero"));
    for _ in 0..3 {
        let r = reserve(&mut con, &reserved, 2, "1", 1, "0");
        let t = token(&mut con, &taken, 2, "1", 1);
        assert_eq!((r.allowed, r.remaining), (t.allowed, t.remaining));
        assert!((r.retry_after_ms - t.retry_after_ms).abs() <= 5, "{r:?} {t:?}");
    }
}

#[test]
fn a_wait_counts_at_most_one_full_refill() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("reserve-cap");
    assert!(reserve(&mut con, &key, 2, "1", 2, "0").allowed);
    let queued = reserve(&mut con, &key, 2, "1", 2, "3600");
    assert!(queued.allowed && (1900..=2000).contains(&queued.retry_after_ms), "{queued:?}");
    let beyond = reserve(&mut con, &key, 2, "1", 1, "3600");
    assert!(!beyond.allowed, "three seconds ahead is beyond one refill: {beyond:?}");
    assert!((2900..=3000).contains(&beyond.retry_after_ms));
}

#[test]
fn a_refund_gives_a_reservation_back() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("reserve-refund");
    assert!(reserve(&mut con, &key, 1, "1", 1, "0").allowed);
    let first = stored(&mut con, &key);
    assert!(reserve(&mut con, &key, 1, "1", 1, "1").allowed);
    let _: Vec<i64> =
        redis::cmd("RL.REFUND").arg("RESERVE").arg(&key).arg(1).arg(1).arg(1).query(&mut con).unwrap();
    assert_eq!(stored(&mut con, &key), first, "the refunded reservation's place is free again");
}

#[test]
fn upto_takes_a_batch_in_one_reservation() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("reserve-batch");
    let batch = |con: &mut Connection, min: u64, max: u64| -> Vec<i64> {
        redis::cmd("RL.RESERVE")
            .arg(&key)
            .arg(10)
            .arg(5)
            .arg(min)
            .arg(2)
            .arg("UPTO")
            .arg(max)
            .query(con)
            .unwrap()
    };
    let first = batch(&mut con, 2, 6);
    assert_eq!((first[0], first[2], first[3], first[5]), (1, 4, 0, 6), "six of ten taken now: {first:?}");
    let second = batch(&mut con, 6, 8);
    assert_eq!((second[0], second[5]), (1, 6), "four now, two reserved: {second:?}");
    assert!((350..=400).contains(&second[3]), "two tokens at 5/s: {second:?}");
    let none = batch(&mut con, 10, 10);
    assert_eq!((none[0], none[5]), (0, 0), "ten more are beyond two seconds: {none:?}");
}

#[test]
fn rl_all_reserves_its_reserve_groups_and_decides_the_others_now() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let (bucket, window) = (unique_key("all-reserve-bucket"), unique_key("all-reserve-window"));
    let all = |con: &mut Connection, window_limit: u64| -> Limit {
        let r: Vec<i64> = redis::cmd("RL.ALL")
            .arg(&bucket)
            .arg("RESERVE")
            .arg(1)
            .arg(2)
            .arg(1)
            .arg("1.000")
            .arg(&window)
            .arg("FIXED")
            .arg(window_limit)
            .arg(60)
            .arg(1)
            .query(con)
            .unwrap();
        Limit::from_reply(&r)
    };
    let now = all(&mut con, 3);
    assert_eq!((now.allowed, now.retry_after_ms), (true, 0));
    let waiting = all(&mut con, 3);
    assert!(waiting.allowed && (450..=500).contains(&waiting.retry_after_ms), "{waiting:?}");
    assert_eq!(waiting.limiting, Some(1), "the reservation that makes the request wait");
    let before = stored(&mut con, &bucket);
    let denied = all(&mut con, 2);
    assert_eq!((denied.allowed, denied.limiting), (false, Some(2)), "the window denies: {denied:?}");
    assert_eq!(stored(&mut con, &bucket), before, "nothing is reserved for a denied request");
}

#[test]
fn bad_arguments_get_a_clear_error() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("reserve-bad");
    let k = key.as_bytes();
    let wait_error = "ERR invalid max_wait: must be a number of seconds >= 0, in whole milliseconds";
    for bad in [&b"-1"[..], b"0.0005", b"soon", b""] {
        assert_eq!(rl_error(&mut con, "RL.RESERVE", &[k, b"10", b"5", b"1", bad]), wait_error, "{bad:?}");
    }
    assert_eq!(
        rl_error(&mut con, "RL.RESERVE", &[k, b"0", b"5", b"1", b"1"]),
        "ERR invalid capacity: must be a whole number >= 1"
    );
    assert_eq!(
        rl_error(&mut con, "RL.RESERVE", &[k, b"10", b"5", b"1", b"1", b"UPTO", b"0"]),
        "ERR invalid max: must be a whole number >= 1"
    );
    assert!(rl_error(&mut con, "RL.RESERVE", &[k, b"10", b"5", b"1", b"1", b"MAX", b"2"])
        .starts_with("ERR syntax"));
    assert!(rl_error(&mut con, "RL.RESERVE", &[k, b"10", b"5", b"1"])
        .starts_with("ERR wrong number of arguments"));
    assert!(rl_error(&mut con, "RL.RESERVE", &[k, b"10", b"5", b"1", b"1", b"UPTO"])
        .starts_with("ERR wrong number"));
    assert!(!exists(&mut con, &key));
}
