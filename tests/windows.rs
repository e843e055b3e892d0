//! RL.FIXED, RL.SLIDE and RL.SLIDECOUNT against a real server.

mod common;

use common::calls::*;
use std::time::{Duration, Instant};
use testkit::{unique_key, Server};

fn sleep_until(start: Instant, ms: u64) {
    let target = start + Duration::from_millis(ms);
    if let Some(left) = target.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}

#[test]
fn fixed_counts_to_the_limit_and_expires_with_its_window() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("fixed");
    assert_eq!(rl(&mut con, "RL.FIXED", &[&key, "3", "60"]).fields()[..4], [1, 3, 2, 0]);
    let ttl = pttl(&mut con, &key);
    assert!(ttl > 59_000 && ttl <= 60_001, "the counter was created with its TTL (ms rounded up): {ttl}");
    assert_eq!(rl(&mut con, "RL.FIXED", &[&key, "3", "60", "2"]).head(), (true, 3, 0));
    let denied = rl(&mut con, "RL.FIXED", &[&key, "3", "60"]);
    assert_eq!(denied.head(), (false, 3, 0));
    assert!(
        denied.retry_after_ms > 59_000 && denied.retry_after_ms == denied.reset_after_ms,
        "retry and reset are the window's end: {denied:?}"
    );
    assert_eq!(rl(&mut con, "RL.FIXED", &[&key, "3", "60", "0"]).head(), (true, 3, 0), "a peek");
    assert_eq!(
        rl(&mut con, "RL.FIXED", &[&key, "3", "60", "4"]).retry_after_ms,
        -1,
        "more than the limit never fits"
    );
    assert!(pttl(&mut con, &key) <= ttl, "denials and peeks do not extend the window");
}

#[test]
fn fixed_window_restarts_after_it_ends() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("fixed-restart");
    for _ in 0..2 {
        rl(&mut con, "RL.FIXED", &[&key, "2", "0.15"]);
    }
    assert!(!rl(&mut con, "RL.FIXED", &[&key, "2", "0.15"]).allowed);
    std::thread::sleep(Duration::from_millis(170));
    assert_eq!(rl(&mut con, "RL.FIXED", &[&key, "2", "0.15"]).head(), (true, 2, 1));
}

#[test]
fn sliding_log_is_exact_where_fixed_windows_and_counters_are_not() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let (slide, fixed, counter) = (unique_key("ex-slide"), unique_key("ex-fixed"), unique_key("ex-count"));
    let call = |con: &mut _, which: &str, key: &str| match which {
        "slide" => rl(con, "RL.SLIDE", &[key, "3", "0.4", "req"]),
        "fixed" => rl(con, "RL.FIXED", &[key, "3", "0.4"]),
        _ => rl(con, "RL.SLIDECOUNT", &[key, "3", "0.4"]),
    };
    let start = Instant::now();
    // t = 0: one request; t = 300 ms: two more; t = 450 ms: three attempts.
    for (which, key) in [("slide", &slide), ("fixed", &fixed), ("count", &counter)] {
        assert!(call(&mut con, which, key).allowed);
    }
    sleep_until(start, 300);
    for (which, key) in [("slide", &slide), ("fixed", &fixed), ("count", &counter)] {
        for _ in 0..2 {
            assert!(call(&mut con, which, key).allowed, "{which}");
        }
    }
    sleep_until(start, 450);
    let allowed =
        |con: &mut _, which: &str, key: &str| (0..3).filter(|_| call(con, which, key).allowed).count();
    // The exact window (150 ms, 550 ms] still holds the two requests from t = 300 ms: room for one.
    assert_eq!(allowed(&mut con, "slide", &slide), 1);
    // The fixed window started at t = 0 ended at 400 ms: three more, five inside 400 ms.
    assert_eq!(allowed(&mut con, "fixed", &fixed), 3);
}

#[test]
fn sliding_log_retry_after_is_enough_and_denials_are_not_recorded() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("slide-retry");
    for _ in 0..2 {
        rl(&mut con, "RL.SLIDE", &[&key, "2", "0.2", "x"]);
    }
    let len: i64 = testkit::redis::cmd("STRLEN").arg(&key).query(&mut con).unwrap();
    let denied = (0..20).map(|_| rl(&mut con, "RL.SLIDE", &[&key, "2", "0.2", "x"])).last().unwrap();
    assert!(!denied.allowed);
    let after: i64 = testkit::redis::cmd("STRLEN").arg(&key).query(&mut con).unwrap();
    assert_eq!(len, after, "denied requests are not recorded");
    assert!(
        denied.retry_after_ms > 0
            && denied.retry_after_ms <= 200
            && denied.reset_after_ms >= denied.retry_after_ms
    );
    std::thread::sleep(Duration::from_millis(denied.retry_after_ms as u64));
    assert!(rl(&mut con, "RL.SLIDE", &[&key, "2", "0.2", "x"]).allowed, "waiting retry_after_ms is enough");
    let ttl = pttl(&mut con, &key);
    assert!(ttl > 0 && ttl <= 200 + 1001, "the key ends when its newest request leaves the window: {ttl}");
}

#[test]
fn sliding_log_dedup_counts_a_retried_id_once() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("slide-dedup");
    assert_eq!(rl(&mut con, "RL.SLIDE", &[&key, "2", "60", "req-1", "DEDUP"]).head(), (true, 2, 1));
    assert_eq!(
        rl(&mut con, "RL.SLIDE", &[&key, "2", "60", "req-1", "dedup"]).head(),
        (true, 2, 1),
        "the retry is not counted"
    );
    assert_eq!(rl(&mut con, "RL.SLIDE", &[&key, "2", "60", "req-2", "DEDUP"]).head(), (true, 2, 0));
    assert_eq!(rl(&mut con, "RL.SLIDE", &[&key, "2", "60", "req-2", "DEDUP"]).head(), (true, 2, 0));
    assert!(!rl(&mut con, "RL.SLIDE", &[&key, "2", "60", "req-3", "DEDUP"]).allowed);
    assert_eq!(
        rl(&mut con, "RL.SLIDE", &[&key, "2", "60", "req-1"]).fields()[0],
        0,
        "without DEDUP the same id counts again"
    );
}

/// DEDUP ids are stored as a hash that is the same in every process: a retry is still recognised
/// after a restart (and so on a promoted replica).
#[test]
fn sliding_log_dedup_recognises_a_retry_after_a_restart() {
    let Some(mut server) = Server::builder().own() else { return };
    let mut con = server.conn();
    assert_eq!(
        rl(&mut con, "RL.SLIDE", &["dedup-restart", "3", "600", "req-1", "DEDUP"]).head(),
        (true, 3, 2)
    );
    server.restart("SAVE");
    let mut con = server.conn();
    assert_eq!(
        rl(&mut con, "RL.SLIDE", &["dedup-restart", "3", "600", "req-1", "DEDUP"]).head(),
        (true, 3, 2),
        "the retry is not counted again"
    );
    assert_eq!(
        rl(&mut con, "RL.SLIDE", &["dedup-restart", "3", "600", "req-2", "DEDUP"]).head(),
        (true, 3, 1)
    );
}

#[test]
fn sliding_log_memory_stays_compact_at_large_limits() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("slide-big");
    let mut pipe = testkit::redis::pipe();
    for i in 0..10_000 {
        pipe.cmd("RL.SLIDE").arg(&key).arg(10_000).arg(3600).arg(i).ignore();
    }
    pipe.exec(&mut con).unwrap();
    assert_eq!(rl(&mut con, "RL.SLIDE", &[&key, "10000", "3600", "x"]).head(), (false, 10_000, 0));
    let len: usize = testkit::redis::cmd("STRLEN").arg(&key).query(&mut con).unwrap();
    assert!(len <= 8 + 10_000 * 8, "{len} bytes for 10000 requests");
}

#[test]
fn sliding_counter_weights_the_previous_window() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("count");
    for i in 0..5 {
        assert_eq!(rl(&mut con, "RL.SLIDECOUNT", &[&key, "5", "3600", "1"]).head(), (true, 5, 4 - i));
    }
    let denied = rl(&mut con, "RL.SLIDECOUNT", &[&key, "5", "3600"]);
    assert_eq!(denied.head(), (false, 5, 0));
    assert!(denied.retry_after_ms > 0 && denied.reset_after_ms > denied.retry_after_ms);
    let ttl = pttl(&mut con, &key);
    assert!(ttl > 3_600_000 && ttl <= 7_200_000, "kept until the next window ends: {ttl}");
}

#[test]
fn concurrent_requests_admit_exactly_the_limit() {
    let server = Server::builder().single();
    for command in ["RL.FIXED", "RL.SLIDECOUNT", "RL.SLIDE"] {
        let key = unique_key(command);
        let args: Vec<&str> =
            if command == "RL.SLIDE" { vec![&key, "10", "3600", "id"] } else { vec![&key, "10", "3600"] };
        assert_eq!(concurrent_allowed(&server, 50, 4, command, &args), 10, "{command}");
    }
}

#[test]
fn keys_are_isolated_and_always_have_a_ttl() {
    let server = Server::builder().single();
    let mut con = server.conn();
    for command in ["RL.FIXED", "RL.SLIDECOUNT", "RL.SLIDE"] {
        let (a, b) = (unique_key(command), unique_key(command));
        let args = |k: &str| -> Vec<String> {
            let mut v = vec![k.to_string(), "2".into(), "30".into()];
            if command == "RL.SLIDE" {
                v.push("id".into());
            }
            v
        };
        let call =
            |con: &mut _, k: &str| rl(con, command, &args(k).iter().map(String::as_str).collect::<Vec<_>>());
        while call(&mut con, &a).allowed {}
        assert_eq!(call(&mut con, &b).head(), (true, 2, 1), "{command}");
        assert!(pttl(&mut con, &a) > 0 && pttl(&mut con, &b) > 0, "{command} keys have TTLs");
    }
}

#[test]
fn bad_input_gets_clear_errors_and_changes_nothing() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("bad-window");
    let k = key.as_bytes();
    let window =
        "ERR invalid window: must be a number of seconds > 0, in whole milliseconds (0.001 to 3000000000)";
    let cases: Vec<(&str, Vec<&[u8]>, &str)> = vec![
        ("RL.FIXED", vec![k, b"3"], "ERR wrong number of arguments for 'rl.fixed' command"),
        ("RL.FIXED", vec![k, b"3", b"1", b"1", b"1"], "ERR wrong number of arguments for 'rl.fixed' command"),
        ("RL.FIXED", vec![k, b"0", b"1"], "ERR invalid limit: must be a whole number >= 1"),
        ("RL.FIXED", vec![k, b"3", b"0"], window),
        ("RL.FIXED", vec![k, b"3", b"0.0001"], window),
        ("RL.FIXED", vec![k, b"3", b"nan"], window),
        ("RL.FIXED", vec![k, b"3", b"1", b"-1"], "ERR invalid cost: must be a whole number >= 0"),
        ("RL.SLIDECOUNT", vec![k, b"3", b"1e400"], "ERR invalid window: out of range"),
        ("RL.SLIDECOUNT", vec![k, b"x", b"1"], "ERR invalid limit: must be a whole number >= 1"),
        ("RL.SLIDE", vec![k, b"3", b"1"], "ERR wrong number of arguments for 'rl.slide' command"),
        ("RL.SLIDE", vec![k, b"3", b"1", b""], "ERR invalid id: must not be empty"),
        ("RL.SLIDE", vec![k, b"3", b"1", b"id", b"NODEDUP"], "ERR syntax error"),
        (
            "RL.SLIDE",
            vec![k, b"1000001", b"1", b"id"],
            "ERR invalid limit: must be a whole number from 1 to 1000000 (use RL.SLIDECOUNT for larger limits)",
        ),
        ("RL.REFUND", vec![b"BUCKET", k, b"1", b"1", b"1"], "ERR syntax error"),
        ("RL.REFUND", vec![b"TOKEN", k, b"1", b"1"], "ERR wrong number of arguments for 'rl.refund' command"),
    ];
    for (command, args, expected) in cases {
        assert_eq!(rl_error(&mut con, command, &args), expected, "{command} {args:?}");
    }
    assert!(!exists(&mut con, &key));
    let _: () = testkit::redis::cmd("LPUSH").arg(&key).arg("x").query(&mut con).unwrap();
    for (command, args) in [
        ("RL.FIXED", vec![k, b"3", b"1"]),
        ("RL.SLIDE", vec![k, b"3", b"1", b"i"]),
        ("RL.SLIDECOUNT", vec![k, b"3", b"1"]),
    ] {
        assert!(rl_error(&mut con, command, &args).starts_with("WRONGTYPE"), "{command}");
    }
    let other = unique_key("bad-state");
    rl(&mut con, "RL.FIXED", &[&other, "3", "10"]);
    let state = "ERR the key holds a value that is not this limiter's state";
    assert_eq!(rl_error(&mut con, "RL.SLIDE", &[other.as_bytes(), b"3", b"10", b"i"]), state);
    assert_eq!(rl_error(&mut con, "RL.SLIDECOUNT", &[other.as_bytes(), b"3", b"10"]), state);
}
