//! Typed wrappers over the RL.* commands for tests.

use testkit::redis::{self, Connection, ConnectionLike, RedisResult, Value};

/// A limiter's reply: the five fields every RL.* limiter replies, and, for a call over several limits,
/// the 1-based position of the one the reply describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub allowed: bool,
    pub limit: i64,
    pub remaining: i64,
    pub retry_after_ms: i64,
    pub reset_after_ms: i64,
    pub limiting: Option<i64>,
}

impl Limit {
    /// From the reply's integers (five, or six with the limiting position).
    pub fn from_reply(r: &[i64]) -> Limit {
        assert!(r.len() == 5 || r.len() == 6, "a limiter replies 5 or 6 integers: {r:?}");
        Limit {
            allowed: r[0] == 1,
            limit: r[1],
            remaining: r[2],
            retry_after_ms: r[3],
            reset_after_ms: r[4],
            limiting: r.get(5).copied(),
        }
    }

    /// What most assertions compare: allowed, limit, remaining.
    pub fn head(&self) -> (bool, i64, i64) {
        (self.allowed, self.limit, self.remaining)
    }

    /// The five fields as the server sent them.
    pub fn fields(&self) -> [i64; 5] {
        [i64::from(self.allowed), self.limit, self.remaining, self.retry_after_ms, self.reset_after_ms]
    }
}

/// RL.TOKEN key capacity rate cost, or its error.
pub fn try_token(
    con: &mut impl ConnectionLike,
    key: &str,
    capacity: u64,
    rate: &str,
    cost: u64,
) -> RedisResult<Limit> {
    let r: Vec<i64> = redis::cmd("RL.TOKEN").arg(key).arg(capacity).arg(rate).arg(cost).query(con)?;
    Ok(Limit::from_reply(&r))
}

/// RL.TOKEN key capacity rate cost.
pub fn token(con: &mut impl ConnectionLike, key: &str, capacity: u64, rate: &str, cost: u64) -> Limit {
    try_token(con, key, capacity, rate, cost).expect("RL.TOKEN failed")
}

/// RL.FIXED / RL.SLIDECOUNT key limit window cost.
pub fn window(
    con: &mut impl ConnectionLike,
    command: &str,
    key: &str,
    limit: u64,
    window: &str,
    cost: u64,
) -> Limit {
    let r: Vec<i64> =
        redis::cmd(command).arg(key).arg(limit).arg(window).arg(cost).query(con).expect(command);
    Limit::from_reply(&r)
}

/// RL.TAKE key capacity rate max: the five fields and the number taken.
pub fn take(con: &mut impl ConnectionLike, key: &str, capacity: u64, rate: &str, max: u64) -> (Limit, i64) {
    let r: Vec<i64> =
        redis::cmd("RL.TAKE").arg(key).arg(capacity).arg(rate).arg(max).query(con).expect("RL.TAKE");
    assert_eq!(r.len(), 6, "five fields and the number taken: {r:?}");
    (Limit::from_reply(&r[..5]), r[5])
}

/// RL.SLIDE key limit window id.
pub fn slide(con: &mut impl ConnectionLike, key: &str, limit: u64, window: &str, id: &str) -> Limit {
    let r: Vec<i64> =
        redis::cmd("RL.SLIDE").arg(key).arg(limit).arg(window).arg(id).query(con).expect("RL.SLIDE");
    Limit::from_reply(&r)
}

/// Any RL.* limiter call, by its arguments.
pub fn rl(con: &mut Connection, command: &str, args: &[&str]) -> Limit {
    let mut cmd = redis::cmd(command);
    for a in args {
        cmd.arg(*a);
    }
    let reply: Vec<i64> = cmd.query(con).unwrap_or_else(|e| panic!("{command} {args:?} failed: {e}"));
    Limit::from_reply(&reply)
}

/// The error reply of a call that must fail, as "CODE detail".
pub fn rl_error<A: AsRef<[u8]> + std::fmt::Debug>(con: &mut Connection, command: &str, args: &[A]) -> String {
    let mut cmd = redis::cmd(command);
    for a in args {
        cmd.arg(a.as_ref());
    }
    match cmd.query::<Value>(con) {
        Err(e) => match e.detail() {
            Some(detail) => format!("{} {detail}", e.code().unwrap_or("?")),
            None => e.code().unwrap_or("?").to_string(),
        },
        Ok(v) => panic!("expected an error for {command} {args:?}, got {v:?}"),
    }
}

pub fn pttl(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).unwrap()
}

pub fn exists(con: &mut Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(con).unwrap() == 1
}

/// Runs `calls` concurrent calls of `command args` over `connections` connections, released together;
/// returns how many were allowed.
pub fn concurrent_allowed(
    server: &testkit::Server,
    connections: usize,
    per_connection: usize,
    command: &str,
    args: &[&str],
) -> usize {
    use std::sync::{Arc, Barrier};
    let barrier = Arc::new(Barrier::new(connections));
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..connections)
            .map(|_| {
                let barrier = barrier.clone();
                scope.spawn(move || {
                    let mut con = server.conn();
                    barrier.wait();
                    (0..per_connection).filter(|_| rl(&mut con, command, args).allowed).count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}
