//! Time faults: a server clock that steps backwards never grants extra tokens or admits more than the
//! limit, and state written by a clock that ran ahead (a primary before a failover) locks nobody out
//! for longer than one refill, window or lease (a token bucket: a step of up to one refill reads as
//! reservations queued on it, and is waited out; beyond, the bucket is repaired).

mod common;

use common::calls::rl;
use common::clockshift::ShiftedServer;
use testkit::redis;

fn server_time(con: &mut redis::Connection) -> i64 {
    let (secs, _): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    secs
}

#[test]
fn the_shim_moves_the_server_clock() {
    let Some(s) = ShiftedServer::start() else { return };
    let mut con = s.server.conn();
    let now = server_time(&mut con);
    s.shift(-3600);
    assert!((now - 3600 - server_time(&mut con)).abs() <= 2);
}

#[test]
fn a_clock_stepping_back_grants_no_extra_tokens() {
    let Some(s) = ShiftedServer::start() else { return };
    let mut con = s.server.conn();
    let args = ["bucket", "5", "1", "1"];
    assert_eq!((0..8).filter(|_| rl(&mut con, "RL.TOKEN", &args).allowed).count(), 5);
    // The clock steps back, further and further (and stays there, as after an NTP correction).
    for back in [-1, -60, -3600] {
        s.shift(back);
        let r = rl(&mut con, "RL.TOKEN", &args);
        assert_eq!(r.head(), (false, 5, 0), "clock {back} s: still empty");
        // A step back within one refill (5 s) looks like reservations queued on the bucket
        // (RL.RESERVE), and is waited out; a longer one is repaired to an empty bucket.
        let step_ms = if -back <= 5 { -back * 1000 } else { 0 };
        assert!(
            r.retry_after_ms > 0 && r.retry_after_ms <= 1000 + step_ms,
            "one token (and a step within one refill) away at most, not {back} s: {r:?}"
        );
        assert!(r.reset_after_ms <= 5000 + step_ms, "full within one refill: {r:?}");
    }
}

#[test]
fn state_from_a_clock_that_ran_ahead_locks_out_for_one_refill_at_most() {
    let Some(s) = ShiftedServer::start() else { return };
    let mut con = s.server.conn();
    // The "old primary" ran an hour ahead while the limiters filled.
    s.shift(3600);
    while rl(&mut con, "RL.TOKEN", &["b", "3", "2", "1"]).allowed {}
    while rl(&mut con, "RL.FIXED", &["f", "3", "10"]).allowed {}
    while rl(&mut con, "RL.SLIDE", &["s", "3", "10", "id"]).allowed {}
    while rl(&mut con, "RL.SLIDECOUNT", &["c", "3", "10"]).allowed {}
    // The "new primary" has the right time: nobody gets a fresh burst, nobody waits an hour.
    s.shift(0);
    let token = rl(&mut con, "RL.TOKEN", &["b", "3", "2", "1"]);
    assert!(!token.allowed);
    assert!(token.retry_after_ms <= 500 && token.reset_after_ms <= 1500, "{token:?}");
    let ttl: i64 = redis::cmd("PTTL").arg("b").query(&mut con).unwrap();
    assert!(ttl <= 1500 + 1000 + 10, "the repaired bucket's key expires with it (plus the slack): {ttl}");
    for (command, args) in [
        ("RL.FIXED", vec!["f", "3", "10"]),
        ("RL.SLIDE", vec!["s", "3", "10", "id"]),
        ("RL.SLIDECOUNT", vec!["c", "3", "10"]),
    ] {
        let r = rl(&mut con, command, &args);
        assert!(!r.allowed, "{command}: what was counted still counts");
        assert!(
            r.retry_after_ms <= 20_000 && r.reset_after_ms <= 20_000,
            "{command}: no hour-long lock-out: {r:?}"
        );
    }
}

#[test]
fn windows_never_admit_more_than_the_limit_when_the_clock_jumps() {
    let Some(s) = ShiftedServer::start() else { return };
    let mut con = s.server.conn();
    let mut admitted = 0;
    // The clock steps back twice and stays back. (A clock that jumps forward again expires what it
    // skips over, as it does for any limiter that trusts a clock.)
    for shift in [0, -30, -3600] {
        s.shift(shift);
        admitted += (0..5).filter(|_| rl(&mut con, "RL.SLIDE", &["w", "4", "3600", "id"]).allowed).count();
    }
    assert_eq!(admitted, 4, "4 per hour, however far back the clock went");
}

#[test]
fn leases_from_a_clock_that_ran_ahead_end_within_one_lease_and_a_step_back_frees_no_slot() {
    let Some(s) = ShiftedServer::start() else { return };
    let mut con = s.server.conn();
    let int = |con: &mut redis::Connection, args: &[&str]| -> i64 {
        redis::cmd(args[0]).arg(&args[1..]).query(con).unwrap()
    };
    // Acquired while the clock ran an hour ahead (an old primary, before a failover).
    s.shift(3600);
    assert!(rl(&mut con, "RL.ACQUIRE", &["l", "1", "10", "a"]).allowed);
    // The right time again: the slot is still held, for one lease at most, not an hour.
    s.shift(0);
    let r = rl(&mut con, "RL.ACQUIRE", &["l", "1", "10", "b"]);
    assert!(!r.allowed, "the lease still counts");
    assert!(r.retry_after_ms <= 10_000 && r.reset_after_ms <= 10_000, "no hour-long lock-out: {r:?}");
    let ttl = int(&mut con, &["PTTL", "l"]);
    // The lease ends in whole microseconds, the key at most its slack (max(1 s, 1/16 of the lease))
    // and the millisecond after.
    assert!(ttl > 0 && ttl <= 11_001, "the denial stored the cut lease, and the key expires with it: {ttl}");
    assert_eq!(int(&mut con, &["RL.RENEW", "l", "10", "a"]), 1, "its holder still holds it");
    // The clock steps back a minute: nothing is freed early.
    s.shift(-60);
    assert!(!rl(&mut con, "RL.ACQUIRE", &["l", "1", "10", "b"]).allowed, "a step back frees no slot");
    assert_eq!(int(&mut con, &["RL.RELEASE", "l", "a"]), 1);
    assert!(rl(&mut con, "RL.ACQUIRE", &["l", "1", "10", "b"]).allowed);
}

/// A log that needs a clock-fault repair, inside an RL.ALL that another limit denies: the call
/// records nothing (a repair is stored alone only by a write that records no request).
#[test]
fn a_denied_all_records_nothing_in_a_log_that_needed_repair() {
    let Some(s) = ShiftedServer::start() else { return };
    let mut con = s.server.conn();
    s.shift(3600);
    assert!(rl(&mut con, "RL.SLIDE", &["{a}log", "5", "10", "r1"]).allowed);
    s.shift(0);
    assert!(rl(&mut con, "RL.TOKEN", &["{a}bucket", "1", "0.001", "1"]).allowed, "now empty");
    let get =
        |con: &mut redis::Connection| -> Vec<u8> { redis::cmd("GET").arg("{a}log").query(con).unwrap() };
    let before = get(&mut con);
    let args = ["{a}log", "SLIDE", "5", "10", "r2", "{a}bucket", "TOKEN", "1", "0.001", "1"];
    let r = rl(&mut con, "RL.ALL", &args);
    assert_eq!((r.allowed, r.limiting), (false, Some(2)), "the bucket denies: {r:?}");
    assert_eq!(get(&mut con), before, "the denied call recorded nothing in the log");
    let alone = rl(&mut con, "RL.SLIDE", &["{a}log", "5", "10", "r2"]);
    assert_eq!((alone.allowed, alone.remaining), (true, 3), "r1 (repaired to now) and r2 count");
}
