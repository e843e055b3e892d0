//! Several limits in one atomic RL.TOKEN call, and RL.REFUND.

mod common;

use common::calls::*;
use testkit::{unique_key, Server};

#[test]
fn multi_key_call_is_all_or_nothing() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let (route, global) = (unique_key("{c}:route"), unique_key("{c}:global"));
    // The route allows 5, the client's global limit 3: the global limit binds.
    for i in 0..3 {
        let r = rl(&mut con, "RL.TOKEN", &[&route, "5", "0.01", "1", &global, "3", "0.01", "1"]);
        assert_eq!(
            (r.fields(), r.limiting),
            ([1, 3, 2 - i, 0, r.reset_after_ms], Some(2)),
            "reply describes the fuller bucket, the 2nd group"
        );
    }
    let denied = rl(&mut con, "RL.TOKEN", &[&route, "5", "0.01", "1", &global, "3", "0.01", "1"]);
    assert_eq!((denied.allowed, denied.limit, denied.limiting), (false, 3, Some(2)));
    // The denial took nothing from the route bucket either.
    assert_eq!(rl(&mut con, "RL.TOKEN", &[&route, "5", "0.01", "0"]).head(), (true, 5, 2));
    // A call whose first bucket denies reports group 1.
    let other = unique_key("{c}:other");
    let r = rl(&mut con, "RL.TOKEN", &[&other, "9", "1", "1", &route, "5", "0.01", "3"]);
    assert_eq!((r.allowed, r.limiting), (false, Some(2)));
    assert_eq!(
        rl(&mut con, "RL.TOKEN", &[&other, "9", "1", "0"]).head(),
        (true, 9, 9),
        "nothing taken from group 1"
    );
    assert!(!exists(&mut con, &other), "a denied multi-key call creates nothing");
}

#[test]
fn multi_key_calls_stay_exact_under_concurrency() {
    let server = Server::builder().single();
    let (a, b) = (unique_key("{m}:a"), unique_key("{m}:b"));
    let args = [a.as_str(), "10", "0.001", "1", b.as_str(), "50", "0.001", "1"];
    assert_eq!(concurrent_allowed(&server, 40, 5, "RL.TOKEN", &args), 10);
    let mut con = server.conn();
    assert_eq!(
        rl(&mut con, "RL.TOKEN", &[&b, "50", "0.001", "0"]).remaining,
        40,
        "b gave exactly what a allowed"
    );
}

#[test]
fn token_refund_never_fills_above_capacity() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("refund-token");
    rl(&mut con, "RL.TOKEN", &[&key, "10", "0.01", "6"]);
    assert_eq!(rl(&mut con, "RL.REFUND", &["TOKEN", &key, "10", "0.01", "2"]).head(), (true, 10, 6));
    assert_eq!(rl(&mut con, "RL.REFUND", &["TOKEN", &key, "10", "0.01", "100"]).head(), (true, 10, 10));
    assert_eq!(rl(&mut con, "RL.TOKEN", &[&key, "10", "0.01", "10"]).head(), (true, 10, 0));
    let unknown = unique_key("refund-none");
    assert_eq!(rl(&mut con, "RL.REFUND", &["TOKEN", &unknown, "10", "1", "3"]).head(), (true, 10, 10));
    assert!(!exists(&mut con, &unknown), "refunding a full bucket writes nothing");
}

#[test]
fn counter_refunds_never_go_below_zero() {
    let server = Server::builder().single();
    let mut con = server.conn();
    for command in ["FIXED", "SLIDECOUNT"] {
        let key = unique_key(command);
        let rl_command = format!("RL.{command}");
        rl(&mut con, &rl_command, &[&key, "5", "60", "4"]);
        let ttl = pttl(&mut con, &key);
        assert_eq!(
            rl(&mut con, "RL.REFUND", &[command, &key, "5", "60", "3"]).head(),
            (true, 5, 4),
            "{command}"
        );
        assert_eq!(
            rl(&mut con, "RL.REFUND", &[command, &key, "5", "60", "9"]).head(),
            (true, 5, 5),
            "{command}"
        );
        assert!(
            pttl(&mut con, &key) <= ttl && pttl(&mut con, &key) > 0,
            "{command}: a refund keeps the window's end"
        );
        assert_eq!(rl(&mut con, &rl_command, &[&key, "5", "60", "5"]).head(), (true, 5, 0), "{command}");
    }
}

/// A denial or a peek changes nothing, so it does not abort another client's WATCH; an allowed request
/// writes, so it does.
#[test]
fn only_writes_touch_watched_keys() {
    let server = testkit::Server::builder().single();
    let (mut watcher, mut other) = (server.conn(), server.conn());
    let key = testkit::unique_key("watched");
    let token = |con: &mut testkit::redis::Connection, cost: u64| -> Vec<i64> {
        testkit::redis::cmd("RL.TOKEN").arg(&key).arg(2).arg("0.001").arg(cost).query(con).unwrap()
    };
    token(&mut other, 2);
    let exec =
        |watcher: &mut testkit::redis::Connection, during: &mut dyn FnMut()| -> testkit::redis::Value {
            let _: () = testkit::redis::cmd("WATCH").arg(&key).query(watcher).unwrap();
            during();
            let _: () = testkit::redis::cmd("MULTI").query(watcher).unwrap();
            let _: testkit::redis::Value = testkit::redis::cmd("PING").query(watcher).unwrap();
            testkit::redis::cmd("EXEC").query(watcher).unwrap()
        };
    // A denial (the bucket is empty) and a peek: the transaction runs.
    let ran = exec(&mut watcher, &mut || {
        assert_eq!(token(&mut other, 1)[0], 0);
        assert_eq!(token(&mut other, 0)[0], 1);
    });
    assert_ne!(ran, testkit::redis::Value::Nil, "a denial must not abort WATCH");
    // A refund writes: the transaction is aborted.
    let aborted = exec(&mut watcher, &mut || {
        let _: Vec<i64> = testkit::redis::cmd("RL.REFUND")
            .arg("TOKEN")
            .arg(&key)
            .arg(2)
            .arg("0.001")
            .arg(1)
            .query(&mut other)
            .unwrap();
    });
    assert_eq!(aborted, testkit::redis::Value::Nil, "a write aborts WATCH");
}
