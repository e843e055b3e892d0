//! Shared by the client's integration tests: limiters on real servers and what the server counted.

#![allow(dead_code)] // each test binary uses its own subset

use redis_ratelimit_client::{FailurePolicy, Limiter};
use std::net::TcpListener;
use std::time::Duration;
use testkit::redis;
use testkit::Server;

pub fn limiter(server: &Server, failure: FailurePolicy) -> Limiter {
    Limiter::builder(failure).connect(server.url()).expect("a limiter")
}

/// How many times the server ran `command` (lower case, e.g. "rl.token"), from INFO commandstats.
pub fn calls(server: &Server, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut server.conn()).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A loopback port with nothing listening on it (a stopped server).
pub fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Generous bounds for "answered within the deadline": the deadline plus scheduling slack.
pub const DEADLINE: Duration = Duration::from_millis(100);
pub const MARGIN: Duration = Duration::from_millis(150);
