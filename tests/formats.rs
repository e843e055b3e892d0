//! Stored formats across an upgrade: keys written by release 0.1 (untagged little-endian integers)
//! are read and carried on, the first write stores the tagged form, and each command refuses the
//! others' values and foreign data. The fixtures are the exact bytes 0.1 wrote, built from known
//! values around the server's clock.

mod common;

use common::calls::*;
use testkit::redis::{self, Connection, Value};
use testkit::{unique_key, Server};

const SEC_NS: i64 = 1_000_000_000;

/// The server's clock in Unix ns.
fn server_now_ns(con: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    s * SEC_NS + us * 1000
}

fn set_raw(con: &mut Connection, key: &str, bytes: &[u8]) {
    let _: () = redis::cmd("SET").arg(key).arg(bytes).arg("PX").arg(60_000).query(con).unwrap();
}

fn get_raw(con: &mut Connection, key: &str) -> Vec<u8> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

fn words(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn inspect_limiter(con: &mut Connection, key: &str) -> String {
    let fields: Vec<Value> = redis::cmd("RL.INSPECT").arg(key).query(con).unwrap();
    match &fields[1] {
        Value::SimpleString(s) => s.clone(),
        other => panic!("limiter field: {other:?}"),
    }
}

#[test]
fn token_buckets_written_by_0_1_carry_on_and_are_rewritten_tagged() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("fmt-token");
    // 0.1: the TAT as 8 bytes, just under one second ahead: 5 of 10 tokens taken at 5 per second
    // (10 ms less, as Redis 7.0's module clock is in whole milliseconds).
    let tat = server_now_ns(&mut con) + SEC_NS - 10_000_000;
    set_raw(&mut con, &key, &tat.to_le_bytes());
    assert_eq!(inspect_limiter(&mut con, &key), "RL.TOKEN");
    let reply = rl(&mut con, "RL.TOKEN", &[&key, "10", "5", "1"]);
    assert_eq!(reply.head(), (true, 10, 4), "the old bucket's five taken tokens still count");
    let stored = get_raw(&mut con, &key);
    assert_eq!(stored.len(), 12);
    assert_eq!(&stored[..4], b"RLT\x01");
    let new_tat = i64::from_le_bytes(stored[4..].try_into().unwrap());
    assert_eq!(new_tat, tat + SEC_NS / 5, "one more token's interval on the old TAT");
    assert!(pttl(&mut con, &key) > 0, "the rewritten key expires");
    assert_eq!(rl(&mut con, "RL.TOKEN", &[&key, "10", "5", "1"]).head(), (true, 10, 3));
}

#[test]
fn windows_written_by_0_1_carry_on_and_are_rewritten_tagged() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let now = server_now_ns(&mut con);
    // RL.FIXED in 0.1: count 3, window ending in 60 s.
    let fixed = unique_key("fmt-fixed");
    set_raw(&mut con, &fixed, &words(&[3, (now + 60 * SEC_NS) as u64]));
    assert_eq!(inspect_limiter(&mut con, &fixed), "RL.FIXED");
    assert_eq!(rl(&mut con, "RL.FIXED", &[&fixed, "5", "60"]).head(), (true, 5, 1));
    let stored = get_raw(&mut con, &fixed);
    assert_eq!((stored.len(), &stored[..4]), (20, &b"RLF\x01"[..]));
    assert_eq!(u64::from_le_bytes(stored[4..12].try_into().unwrap()), 4);
    // RL.SLIDECOUNT in 0.1: window index, current 2, previous 0.
    let counter = unique_key("fmt-counter");
    let index = (now / (60 * SEC_NS)) as u64;
    set_raw(&mut con, &counter, &words(&[index, 2, 0]));
    assert_eq!(inspect_limiter(&mut con, &counter), "RL.SLIDECOUNT");
    assert_eq!(rl(&mut con, "RL.SLIDECOUNT", &[&counter, "10", "60"]).head(), (true, 10, 7));
    let stored = get_raw(&mut con, &counter);
    assert_eq!((stored.len(), &stored[..4]), (28, &b"RLC\x01"[..]));
    // RL.SLIDE's log was tagged in 0.1 already: the same bytes are read and kept.
    let log = unique_key("fmt-log");
    let mut bytes = b"RLS\x01\x08\0\0\0".to_vec();
    bytes.extend_from_slice(&((now / 1000) as u64 - 1_000_000).to_le_bytes());
    set_raw(&mut con, &log, &bytes);
    assert_eq!(rl(&mut con, "RL.SLIDE", &[&log, "3", "60", "a"]).head(), (true, 3, 1));
    assert_eq!(&get_raw(&mut con, &log)[..4], b"RLS\x01");
}

#[test]
fn each_command_refuses_the_others_values_and_foreign_data() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let fixed = unique_key("fmt-other");
    rl(&mut con, "RL.FIXED", &[&fixed, "5", "60"]);
    let bad = "ERR the key holds a value that is not this limiter's state";
    assert_eq!(rl_error(&mut con, "RL.TOKEN", &[fixed.as_bytes(), b"10", b"5", b"1"]), bad);
    assert_eq!(rl_error(&mut con, "RL.SLIDECOUNT", &[fixed.as_bytes(), b"10", b"60"]), bad);
    assert_eq!(rl_error(&mut con, "RL.SLIDE", &[fixed.as_bytes(), b"10", b"60", b"a"]), bad);
    let token = unique_key("fmt-other");
    rl(&mut con, "RL.TOKEN", &[&token, "10", "5", "1"]);
    assert_eq!(rl_error(&mut con, "RL.FIXED", &[token.as_bytes(), b"10", b"60"]), bad);
    // redis-cell's state: its TAT in nanoseconds as decimal digits.
    let cell = unique_key("fmt-cell");
    set_raw(&mut con, &cell, b"1700000000000000000");
    assert_eq!(rl_error(&mut con, "RL.TOKEN", &[cell.as_bytes(), b"10", b"5", b"1"]), bad);
    // RL.INSPECT reads it as CL.THROTTLE's, which keeps that format.
    assert_eq!(inspect_limiter(&mut con, &cell), "CL.THROTTLE");
    let foreign = unique_key("fmt-foreign");
    set_raw(&mut con, &foreign, b"not a limiter");
    assert_eq!(rl_error(&mut con, "RL.INSPECT", &[foreign.as_bytes()]), bad);
}
