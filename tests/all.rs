//! RL.ALL: limits of every kind in one atomic call, against a real server.

mod common;

use common::calls::*;
use testkit::redis::{self, Connection};
use testkit::{unique_key, Server};

fn remaining(con: &mut Connection, command: &str, args: &[&str]) -> i64 {
    rl(con, command, args).remaining
}

#[test]
fn every_kind_is_taken_together_or_not_at_all() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let p = unique_key("{all}");
    let (t, f, c, s) = (format!("{p}:t"), format!("{p}:f"), format!("{p}:c"), format!("{p}:s"));
    let call = |con: &mut Connection| {
        rl(
            con,
            "RL.ALL",
            &[
                &t,
                "TOKEN",
                "10",
                "0.01",
                "1",
                &f,
                "FIXED",
                "1",
                "60",
                "1",
                &c,
                "SLIDECOUNT",
                "5",
                "60",
                "1",
                &s,
                "SLIDE",
                "5",
                "60",
                "req",
            ],
        )
    };
    let first = call(&mut con);
    assert!(first.allowed);
    assert_eq!(
        (first.limit, first.remaining, first.limiting),
        (1, 0, Some(2)),
        "the window has the fewest left"
    );
    let denied = call(&mut con);
    assert!(!denied.allowed);
    assert_eq!(denied.limiting, Some(2), "the fixed window denies");
    // The denial took nothing from the others: each was taken exactly once.
    assert_eq!(remaining(&mut con, "RL.TOKEN", &[&t, "10", "0.01", "0"]), 9);
    assert_eq!(remaining(&mut con, "RL.SLIDECOUNT", &[&c, "5", "60", "0"]), 4);
    let inspected: Vec<redis::Value> = redis::cmd("RL.INSPECT").arg(&s).query(&mut con).unwrap();
    let recorded =
        inspected.iter().position(|v| *v == redis::Value::SimpleString("recorded".into())).unwrap();
    assert_eq!(inspected[recorded + 1], redis::Value::Int(1), "one request in the log");
    // A denied sliding log takes no token either.
    let (t2, s2) = (format!("{p}:t2"), format!("{p}:s2"));
    assert!(rl(&mut con, "RL.ALL", &[&s2, "SLIDE", "1", "60", "a", &t2, "TOKEN", "10", "0.01", "1"]).allowed);
    let log_denied = rl(&mut con, "RL.ALL", &[&s2, "SLIDE", "1", "60", "b", &t2, "TOKEN", "10", "0.01", "1"]);
    assert_eq!((log_denied.allowed, log_denied.limiting), (false, Some(1)));
    assert_eq!(remaining(&mut con, "RL.TOKEN", &[&t2, "10", "0.01", "0"]), 9);
}

#[test]
fn the_reply_always_has_six_fields_and_dedup_is_an_option_of_its_group() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let (s, t) = (unique_key("{one}:s"), unique_key("{one}:t"));
    let one: Vec<i64> =
        redis::cmd("RL.ALL").arg(&t).arg("TOKEN").arg(5).arg(1).arg(1).query(&mut con).unwrap();
    assert_eq!(one, [1, 5, 4, 0, 1000, 1]);
    for _ in 0..3 {
        let r =
            rl(&mut con, "RL.ALL", &[&s, "SLIDE", "5", "60", "same-id", "DEDUP", &t, "TOKEN", "5", "1", "0"]);
        assert!(r.allowed);
    }
    assert_eq!(remaining(&mut con, "RL.SLIDE", &[&s, "5", "60", "other"]), 3, "the retried id counted once");
}

#[test]
fn command_getkeys_finds_every_group_key() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("RL.ALL")
        .arg("a")
        .arg("SLIDE")
        .arg(5)
        .arg(60)
        .arg("id")
        .arg("DEDUP")
        .arg("b")
        .arg("token")
        .arg(10)
        .arg(1)
        .arg(1)
        .arg("c")
        .arg("FIXED")
        .arg(3)
        .arg(1)
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["a", "b", "c"]);
}

#[test]
fn bad_groups_get_a_clear_error_and_change_nothing() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let (a, b) = (unique_key("{bad}:a"), unique_key("{bad}:b"));
    let err = |con: &mut Connection, args: &[&str]| {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        rl_error(con, "RL.ALL", &bytes)
    };
    assert_eq!(err(&mut con, &[&a, "LEASE", "1", "2", "3"]), "ERR syntax error");
    assert_eq!(
        err(&mut con, &[&a, "TOKEN", "10", "1"]).split(' ').next(),
        Some("ERR"),
        "an incomplete group"
    );
    assert_eq!(
        err(&mut con, &[&a, "TOKEN", "10", "1", "1", &a, "FIXED", "1", "60", "1"]),
        "ERR the same key appears more than once"
    );
    assert_eq!(
        err(&mut con, &[&a, "TOKEN", "0", "1", "1"]),
        "ERR invalid capacity: must be a whole number >= 1"
    );
    assert_eq!(
        err(&mut con, &[&a, "TOKEN", "10", "1", "1", &b, "SLIDE", "5", "60", ""]),
        "ERR invalid id: must not be empty"
    );
    assert!(!exists(&mut con, &a) && !exists(&mut con, &b), "nothing was written");
}

/// The command each kind of core's registry names is the one the module registers.
#[test]
fn every_limiter_kind_registers_its_command() {
    let server = Server::builder().single();
    let mut con = server.conn();
    for kind in ratelimit_core::kind::LimiterKind::ALL {
        let info: Vec<redis::Value> =
            redis::cmd("COMMAND").arg("INFO").arg(kind.command()).query(&mut con).unwrap();
        assert!(
            matches!(info.first(), Some(redis::Value::Array(_))),
            "{} is not registered: {info:?}",
            kind.command()
        );
    }
}

/// An ACQUIRE group checks its weight before its parameters, as RL.ACQUIRE does: the same bad call
/// gets the same error either way.
#[test]
fn an_acquire_group_reports_errors_in_rl_acquires_order() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let alone = rl_error(&mut con, "RL.ACQUIRE", &["k", "0", "1", "id", "WEIGHT", "0"]);
    let grouped = rl_error(&mut con, "RL.ALL", &["k", "ACQUIRE", "0", "1", "id", "WEIGHT", "0"]);
    assert!(alone.starts_with("ERR invalid weight:"), "{alone}");
    assert_eq!(grouped, alone);
}
