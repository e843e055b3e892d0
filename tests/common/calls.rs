//! Typed wrappers over the RL.* commands for tests.

use testkit::redis::{self, Connection, Value};

pub fn rl(con: &mut Connection, command: &str, args: &[&str]) -> Vec<i64> {
    let mut cmd = redis::cmd(command);
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(con).unwrap_or_else(|e| panic!("{command} {args:?} failed: {e}"))
}

/// The error reply of a call that must fail, as "CODE detail".
pub fn rl_error(con: &mut Connection, command: &str, args: &[&[u8]]) -> String {
    let mut cmd = redis::cmd(command);
    for a in args {
        cmd.arg(*a);
    }
    match cmd.query::<Value>(con) {
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
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
                    (0..per_connection).filter(|_| rl(&mut con, command, args)[0] == 1).count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}
