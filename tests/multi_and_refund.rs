//! Several limits in one atomic RL.TOKEN call, and RL.REFUND.

mod common;

use common::calls::*;
use testkit::{unique_key, Server};

#[test]
fn multi_key_call_is_all_or_nothing() {
    let server = Server::single();
    let mut con = server.conn();
    let (route, global) = (unique_key("{c}:route"), unique_key("{c}:global"));
    // The route allows 5, the client's global limit 3: the global limit binds.
    for i in 0..3 {
        let r = rl(&mut con, "RL.TOKEN", &[&route, "5", "0.01", "1", &global, "3", "0.01", "1"]);
        assert_eq!(r, vec![1, 3, 2 - i, 0, r[4], 2], "reply describes the fuller bucket, the 2nd group");
    }
    let denied = rl(&mut con, "RL.TOKEN", &[&route, "5", "0.01", "1", &global, "3", "0.01", "1"]);
    assert_eq!((denied[0], denied[1], denied[5]), (0, 3, 2));
    // The denial took nothing from the route bucket either.
    assert_eq!(rl(&mut con, "RL.TOKEN", &[&route, "5", "0.01", "0"])[..3], [1, 5, 2]);
    // A call whose first bucket denies reports group 1.
    let other = unique_key("{c}:other");
    let r = rl(&mut con, "RL.TOKEN", &[&other, "9", "1", "1", &route, "5", "0.01", "3"]);
    assert_eq!((r[0], r[5]), (0, 2));
    assert_eq!(
        rl(&mut con, "RL.TOKEN", &[&other, "9", "1", "0"])[..3],
        [1, 9, 9],
        "nothing taken from group 1"
    );
    assert!(!exists(&mut con, &other), "a denied multi-key call creates nothing");
}

#[test]
fn multi_key_calls_stay_exact_under_concurrency() {
    let server = Server::single();
    let (a, b) = (unique_key("{m}:a"), unique_key("{m}:b"));
    let args = [a.as_str(), "10", "0.001", "1", b.as_str(), "50", "0.001", "1"];
    assert_eq!(concurrent_allowed(&server, 40, 5, "RL.TOKEN", &args), 10);
    let mut con = server.conn();
    assert_eq!(rl(&mut con, "RL.TOKEN", &[&b, "50", "0.001", "0"])[2], 40, "b gave exactly what a allowed");
}

#[test]
fn token_refund_never_fills_above_capacity() {
    let server = Server::single();
    let mut con = server.conn();
    let key = unique_key("refund-token");
    rl(&mut con, "RL.TOKEN", &[&key, "10", "0.01", "6"]);
    assert_eq!(rl(&mut con, "RL.REFUND", &["TOKEN", &key, "10", "0.01", "2"])[..3], [1, 10, 6]);
    assert_eq!(rl(&mut con, "RL.REFUND", &["TOKEN", &key, "10", "0.01", "100"])[..3], [1, 10, 10]);
    assert_eq!(rl(&mut con, "RL.TOKEN", &[&key, "10", "0.01", "10"])[..3], [1, 10, 0]);
    let unknown = unique_key("refund-none");
    assert_eq!(rl(&mut con, "RL.REFUND", &["TOKEN", &unknown, "10", "1", "3"])[..3], [1, 10, 10]);
    assert!(!exists(&mut con, &unknown), "refunding a full bucket writes nothing");
}

#[test]
fn counter_refunds_never_go_below_zero() {
    let server = Server::single();
    let mut con = server.conn();
    for command in ["FIXED", "SLIDECOUNT"] {
        let key = unique_key(command);
        let rl_command = format!("RL.{command}");
        rl(&mut con, &rl_command, &[&key, "5", "60", "4"]);
        let ttl = pttl(&mut con, &key);
        assert_eq!(rl(&mut con, "RL.REFUND", &[command, &key, "5", "60", "3"])[..3], [1, 5, 4], "{command}");
        assert_eq!(rl(&mut con, "RL.REFUND", &[command, &key, "5", "60", "9"])[..3], [1, 5, 5], "{command}");
        assert!(
            pttl(&mut con, &key) <= ttl && pttl(&mut con, &key) > 0,
            "{command}: a refund keeps the window's end"
        );
        assert_eq!(rl(&mut con, &rl_command, &[&key, "5", "60", "5"])[..3], [1, 5, 0], "{command}");
    }
}
