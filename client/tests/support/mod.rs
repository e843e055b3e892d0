//! Shared by the client's integration tests: limiters on real servers and what the server counted.

#![allow(dead_code)] // each test binary uses its own subset

pub mod failover;
pub mod web;

use redis_ratelimit_client::{FailurePolicy, Limiter, LimiterBuilder};
use std::net::TcpListener;
use std::time::Duration;
use testkit::redis;
use testkit::Server;

/// The deadline of the tests' limiters: the tests that are about deadlines set their own. Three test
/// binaries share two cores (scripts/cargo-tests.sh), and a first call's connect can outlast the
/// 100 ms default there; under a closed failure policy that reads as a denial the test did not expect.
pub const TEST_DEADLINE: Duration = Duration::from_secs(5);

/// `Limiter::builder` with [`TEST_DEADLINE`].
pub fn builder(failure: FailurePolicy) -> LimiterBuilder {
    Limiter::builder(failure).deadline(TEST_DEADLINE)
}

pub fn limiter(server: &Server, failure: FailurePolicy) -> Limiter {
    builder(failure).connect(server.url()).expect("a limiter")
}

/// How many times the server ran `command` (lower case, e.g. "rl.token"), from INFO commandstats.
/// On the Lua library (`RL_TEST_ENGINE=lua`) the server counts FCALL and EVALSHA, not the function
/// they run: there an `rl.*` command counts the calls of every function that ran (not those that
/// never did: "Function not found", NOSCRIPT). The tests that count send one command at a time, or
/// count several with [`calls_of`].
pub fn calls(server: &Server, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut server.conn()).unwrap();
    count_calls(&info, command)
}

/// The calls of all of `commands` (see [`calls`]): on the Lua library, each function call once.
pub fn calls_of(server: &Server, commands: &[&str]) -> u64 {
    if testkit::lua_engine() {
        return calls(server, commands[0]);
    }
    commands.iter().map(|c| calls(server, c)).sum()
}

/// True, with the skip message, on the Lua library for an assertion that counts one command among
/// others the limiter sends: the server counts FCALL and EVALSHA, not the function they run.
pub fn skip_counting_one_of_several() -> bool {
    let lua = testkit::lua_engine();
    if lua {
        testkit::skip("RL_TEST_ENGINE=lua: the server counts FCALL, not which function it ran");
    }
    lua
}

/// A loopback port with nothing listening on it (a stopped server).
pub fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until `done` says so, asking every 10 ms, for async tests: the runtime's other tasks (a
/// server, a release in the background) run while it waits. Panics naming `what` after 30 s.
pub async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "timed out after 30 s waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Generous bounds for "answered within the deadline": the deadline plus scheduling slack.
pub const DEADLINE: Duration = Duration::from_millis(100);
pub const MARGIN: Duration = Duration::from_millis(150);

/// A redis-server with the module that a test can SIGKILL and start again on the same port, empty
/// (a crash, where `Server::stop` is a SHUTDOWN), or as a server of the other kind: testkit's server,
/// ready by its rule. Killed on drop.
pub struct Killable {
    pub port: u16,
    server: Server,
}

impl Killable {
    /// None, with a message, when `RL_TEST_REDIS_URL` says to use an external server.
    /// Stock on the Lua library (`RL_TEST_ENGINE=lua`), as testkit's servers are.
    pub fn start() -> Option<Killable> {
        Self::start_with(Server::builder())
    }

    /// A plain redis-server, without the module.
    pub fn start_plain() -> Option<Killable> {
        Self::start_with(Server::builder().stock())
    }

    fn start_with(builder: testkit::Builder) -> Option<Killable> {
        let server = builder.own()?;
        Some(Killable { port: server.port(), server })
    }

    pub fn url(&self) -> String {
        self.server.url().to_string()
    }

    /// Whether the next start loads the module (a failover to a server of the other kind).
    pub fn with_module(&mut self, module: bool) {
        self.server.load_module_next(module);
    }

    /// SIGKILL: no shutdown, the sockets of its clients are simply gone.
    pub fn kill(&mut self) {
        self.server.kill();
    }

    /// Starts the server (again) on the same port, empty, and waits until it is ready.
    pub fn start_again(&mut self) {
        self.server.start_again();
    }

    /// How many times the server ran `command` since it started, from INFO commandstats.
    pub fn calls(&self, command: &str) -> u64 {
        calls(&self.server, command)
    }
}

fn count_calls(info: &str, command: &str) -> u64 {
    if testkit::lua_engine() && command.starts_with("rl.") {
        let ran = |c: &str| stat(info, c, "calls").saturating_sub(stat(info, c, "failed_calls"));
        return ran("fcall") + ran("evalsha") + ran("eval");
    }
    stat(info, command, "calls")
}

/// One counter of a command's line in INFO commandstats (`cmdstat_fcall:calls=3,...,failed_calls=1`).
fn stat(info: &str, command: &str, field: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
        .and_then(|rest| rest.split(',').find_map(|kv| kv.strip_prefix(&format!("{field}="))))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
