//! When keys expire, for every limiter whose expiry follows its state: never while the state still
//! limits anyone (a bucket not yet full, a window not over, a lease held), and never later than the
//! limiter's stated slack after that; on the primary, on a replica and after an AOF reload. Under
//! steady traffic a token bucket's or a lease key's expiry moves about once per step, and the writes
//! that leave it replicate `KEEPTTL`, not a new `PXAT`.

mod common;

use common::calls::rl;
use common::*;
use testkit::redis::{self, Connection, Value};
use testkit::Server;

/// The key's absolute expiry (Unix ms).
fn expire_at(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap()
}

fn server_ms(con: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    s * 1000 + us / 1000
}

/// An RL.INSPECT field of the key.
fn field(con: &mut Connection, key: &str, name: &str) -> i64 {
    let fields: Vec<Value> = redis::cmd("RL.INSPECT").arg(key).query(con).unwrap();
    let at = fields
        .iter()
        .position(|v| {
            matches!(v, Value::SimpleString(s) if s == name) || *v == Value::BulkString(name.into())
        })
        .unwrap_or_else(|| panic!("no field {name} in {fields:?}"));
    redis::from_redis_value(fields[at + 1].clone()).unwrap()
}

/// Where a key's state stops limiting anyone (Unix ms), and the slack its expiry may add.
struct Bound {
    key: String,
    until_ms: i64,
    slack_ms: i64,
}

fn assert_within(con: &mut Connection, b: &Bound, place: &str) {
    let at = expire_at(con, &b.key);
    if at == -2 {
        // Gone: only once its state ended (a short bucket, full again while the server restarted).
        let now = server_ms(con);
        assert!(
            now >= b.until_ms,
            "{place}: {} is gone at {now}, before its state ends at {}",
            b.key,
            b.until_ms
        );
        return;
    }
    assert!(at >= b.until_ms, "{place}: {} expires at {at}, before its state ends at {}", b.key, b.until_ms);
    assert!(
        at <= b.until_ms + b.slack_ms,
        "{place}: {} expires at {at}, more than {} ms after its state ends at {}",
        b.key,
        b.slack_ms,
        b.until_ms
    );
}

/// Drives every limiter on `con`, checking each call's expiry on the primary, and returns where
/// each key's state ends with its slack, for the replica and the reload to check again.
fn traffic(con: &mut Connection) -> Vec<Bound> {
    let mut bounds = vec![];
    let mut check = |con: &mut Connection, b: Bound| {
        assert_within(con, &b, "primary");
        bounds.retain(|x: &Bound| x.key != b.key);
        bounds.push(b);
    };
    // Token buckets: a grid of max(1 s, 1/16 of a full refill) after the TAT. 160 at 1/s refills in
    // 160 s (10 s steps); 10 at 5/s in 2 s (1 s steps); 16000 at 1/s in 16000 s (1000 s steps).
    for (key, capacity, rate, step) in [
        ("exp:tok:long", 160, "1", 10_000),
        ("exp:tok:short", 10, "5", 1_000),
        ("exp:tok:huge", 16_000, "1", 1_000_000),
    ] {
        for cost in [1, 3, 0, 7, 1, 1, 20] {
            rl(con, "RL.TOKEN", &[key, &capacity.to_string(), rate, &cost.to_string()]);
            let tat = field(con, key, "tat_ms");
            let b = Bound { key: key.into(), until_ms: tat, slack_ms: step - 1 };
            check(con, b);
            assert_eq!(expire_at(con, key) % step, 0, "{key}: on the grid of {step} ms");
        }
    }
    // A reservation takes from the future: the key lives past the wait too.
    let (key, step) = ("exp:reserve", 10_000);
    for _ in 0..3 {
        rl(con, "RL.RESERVE", &[key, "160", "1", "100", "120"]);
        let b = Bound { key: key.into(), until_ms: field(con, key, "tat_ms"), slack_ms: step - 1 };
        check(con, b);
    }
    // The dialects: redis-cell's CL.THROTTLE (a burst of 159 + 1, 1 per second) and GCRA where this
    // module registers it (a server without core's GCRA).
    for _ in 0..5 {
        let _: Vec<i64> =
            redis::cmd("CL.THROTTLE").arg("exp:cell").arg(159).arg(1).arg(1).query(con).unwrap();
        let b = Bound { key: "exp:cell".into(), until_ms: field(con, "exp:cell", "tat_ms"), slack_ms: 9_999 };
        check(con, b);
    }
    let gcra: redis::RedisResult<Value> =
        redis::cmd("GCRA").arg("exp:gcra").arg(159).arg(1).arg(1).query(con);
    // This module's GCRA only (core's, on servers that have it, stores another type).
    let kind: String = redis::cmd("TYPE").arg("exp:gcra").query(con).unwrap();
    if gcra.is_ok() && kind == "string" {
        let b = Bound { key: "exp:gcra".into(), until_ms: field(con, "exp:gcra", "tat_ms"), slack_ms: 9_999 };
        check(con, b);
    }
    // Leases: within max(1 s, 1/16 of the lease) after the last one ends (160 s: 10 s).
    for id in ["a", "b", "c"] {
        rl(con, "RL.ACQUIRE", &["exp:lease", "5", "160", id]);
        let last = field(con, "exp:lease", "last_expiry_ms");
        check(con, Bound { key: "exp:lease".into(), until_ms: last, slack_ms: 10_000 });
    }
    assert_eq!(int(con, &["RL.RELEASE", "exp:lease", "c"]), 1);
    let last = field(con, "exp:lease", "last_expiry_ms");
    // After a release the slack is 1/16 of the longest time left (the lease length is not an argument).
    check(con, Bound { key: "exp:lease".into(), until_ms: last, slack_ms: 10_000 });
    // A fixed window ends its key with the window, exactly.
    rl(con, "RL.FIXED", &["exp:fixed", "5", "60", "1"]);
    let ends = field(con, "exp:fixed", "window_ends_at_ms");
    check(con, Bound { key: "exp:fixed".into(), until_ms: ends, slack_ms: 0 });
    // A sliding counter: at the end of the window after its current one, exactly (the next window
    // still weighs this one's count).
    rl(con, "RL.SLIDECOUNT", &["exp:count", "5", "60", "1"]);
    let index = field(con, "exp:count", "window_index");
    check(con, Bound { key: "exp:count".into(), until_ms: (index + 2) * 60_000, slack_ms: 0 });
    // A sliding log: a window after its newest entry, within a second.
    let before = server_ms(con);
    rl(con, "RL.SLIDE", &["exp:log", "5", "60", "x"]);
    let after = server_ms(con);
    check(con, Bound { key: "exp:log".into(), until_ms: before + 60_000, slack_ms: after - before + 1_000 });
    bounds
}

fn int(con: &mut Connection, args: &[&str]) -> i64 {
    redis::cmd(args[0]).arg(&args[1..]).query(con).unwrap()
}

#[test]
fn every_limiter_expires_within_its_bounds_on_a_replica_and_after_an_aof_reload() {
    let args = ["--appendonly", "yes", "--appendfsync", "always", "--repl-diskless-sync-delay", "0"];
    let Some(mut primary) = Server::builder().args(&args).own() else { return };
    let replica = start_replica(&primary);
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let bounds = traffic(&mut p);
    wait_in_sync(&mut p, &mut r);
    for b in &bounds {
        assert_within(&mut r, b, "replica");
        let (on_replica, on_primary) = (expire_at(&mut r, &b.key), expire_at(&mut p, &b.key));
        // A short bucket may end between the two reads.
        if on_replica != -2 && on_primary != -2 {
            assert_eq!(on_replica, on_primary, "{}: the replica's expiry", b.key);
        }
    }
    let before: Vec<i64> = bounds.iter().map(|b| expire_at(&mut p, &b.key)).collect();
    primary.restart("NOSAVE");
    let mut p = primary.conn();
    for (b, at) in bounds.iter().zip(before) {
        assert_within(&mut p, b, "after the AOF reload");
        let reloaded = expire_at(&mut p, &b.key);
        // Gone is checked above: it may end while the server restarts (the short bucket's 2 s).
        assert!(reloaded == at || reloaded == -2, "{}: the reloaded expiry {reloaded}, not {at}", b.key);
    }
}

/// The commands the server appended to its AOF (the incremental files), each as its arguments.
fn aof_commands(server: &Server) -> Vec<Vec<Vec<u8>>> {
    let dir = server.dir.join("appendonlydir");
    let mut commands = vec![];
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".incr.aof") {
            commands.extend(parse_resp(&std::fs::read(&path).unwrap()));
        }
    }
    commands
}

/// RESP arrays of bulk strings, as an AOF holds them (values are binary: read by length).
fn parse_resp(mut bytes: &[u8]) -> Vec<Vec<Vec<u8>>> {
    fn line<'a>(bytes: &mut &'a [u8]) -> &'a [u8] {
        let end = bytes.windows(2).position(|w| w == b"\r\n").expect("a RESP line");
        let (head, rest) = bytes.split_at(end);
        *bytes = &rest[2..];
        head
    }
    let number = |l: &[u8]| -> usize { std::str::from_utf8(&l[1..]).unwrap().parse().unwrap() };
    let mut out = vec![];
    while !bytes.is_empty() {
        let n = number(line(&mut bytes));
        let mut args = vec![];
        for _ in 0..n {
            let len = number(line(&mut bytes));
            args.push(bytes[..len].to_vec());
            bytes = &bytes[len + 2..];
        }
        out.push(args);
    }
    out
}

#[test]
fn under_steady_traffic_the_expiry_moves_about_once_per_step_and_other_writes_keep_it() {
    let args = ["--appendonly", "yes", "--appendfsync", "always"];
    let Some(server) = Server::builder().args(&args).own() else { return };
    let mut con = server.conn();
    // 160 tokens at 1/s: a full refill of 160 s, so a 10 s grid; each call moves the TAT by 1 s
    // (100 calls: 100 s of TAT), so about 10 moves, where a one-second grid would move 100 times.
    let mut seen = vec![];
    for _ in 0..100 {
        rl(&mut con, "RL.TOKEN", &["steady", "160", "1", "1"]);
        let at = expire_at(&mut con, "steady");
        if seen.last() != Some(&at) {
            seen.push(at);
        }
    }
    assert!((10..=12).contains(&seen.len()), "the expiry moved {} times in 100 calls: {seen:?}", seen.len());
    // Leases of 160 s taken one after another (the value grows by one lease each time), each pushing
    // the last end by the time between calls, far less than the 10 s slack: the expiry moves once.
    for i in 0..50 {
        rl(&mut con, "RL.ACQUIRE", &["held", "100", "160", &format!("job{i}")]);
    }
    let aof = aof_commands(&server);
    let writes = |key: &str, with: &str| {
        aof.iter()
            .filter(|c| {
                c.get(1).is_some_and(|k| k == key.as_bytes()) && c.iter().any(|a| a == with.as_bytes())
            })
            .count()
    };
    assert_eq!(writes("steady", "PXAT"), seen.len(), "one PXAT per move");
    assert_eq!(writes("steady", "KEEPTTL"), 100 - seen.len(), "every other write keeps the expiry");
    let moves = writes("held", "PXAT") + writes("held", "PEXPIREAT");
    assert!(moves <= 2, "50 acquires moved the lease key's expiry {moves} times");
}

/// A bucket key as another version or other parameters left it: its TAT, expiring on the whole second
/// after it (0.2's grid).
fn seed_bucket(con: &mut Connection, key: &str, tat_ms: i64) {
    let mut value = b"RLT\x01".to_vec();
    value.extend_from_slice(&(tat_ms * 1_000_000).to_le_bytes());
    let at = (tat_ms + 999) / 1000 * 1000;
    let _: () = redis::cmd("SET").arg(key).arg(value).arg("PXAT").arg(at).query(con).unwrap();
}

#[test]
fn an_expiry_left_on_another_grid_is_never_kept_past_the_state_it_limits() {
    let Some(server) = Server::builder().own() else { return };
    let mut con = server.conn();
    // 160 at 1/s: a 10 s grid. A key of 0.2 (a one-second grid) whose TAT lies 9.5 s before a point
    // G of the 10 s grid, at least 20 s ahead: 5 more tokens move the TAT to G - 4.5 s, the same 10 s
    // point as before, so the grid alone says "unmoved", while the expiry in place (G - 9 s) would
    // end the key 4.5 s before the bucket is full.
    let g = (server_ms(&mut con) + 30_000) / 10_000 * 10_000;
    seed_bucket(&mut con, "upgraded", g - 9_500);
    rl(&mut con, "RL.TOKEN", &["upgraded", "160", "1", "5"]);
    let tat = field(&mut con, "upgraded", "tat_ms");
    assert_eq!(tat, g - 4_500, "the seeded TAT plus 5 tokens");
    assert_within(&mut con, &Bound { key: "upgraded".into(), until_ms: tat, slack_ms: 9_999 }, "upgraded");
    assert_eq!(expire_at(&mut con, "upgraded"), g, "moved to the 10 s grid's point");
    // Parameters that change back and forth on one key (a limit changed during a rolling deploy):
    // never before the bucket is full again, and on whole seconds within the coarser grid's step.
    for i in 0..40 {
        let capacity = if i % 3 == 0 { "16" } else { "160" };
        rl(&mut con, "RL.TOKEN", &["mixed", capacity, "1", "1"]);
        let tat = field(&mut con, "mixed", "tat_ms");
        let b = Bound { key: "mixed".into(), until_ms: tat, slack_ms: 9_999 };
        assert_within(&mut con, &b, &format!("mixed, call {i} ({capacity} at 1/s)"));
        assert_eq!(expire_at(&mut con, "mixed") % 1000, 0, "on a whole second");
    }
}
