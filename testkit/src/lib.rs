//! Throwaway redis-server processes with the ratelimit module loaded, on free loopback ports, killed
//! when dropped (also when a test panics). Used by the integration tests, the demo and the benchmarks.
//!
//! Environment:
//! - `RL_MODULE`: the module to load (default: `target/release/libredis_ratelimit.so` of this repo).
//! - `RL_REDIS_SERVER`: the server binary (default: `redis-server` on PATH).
//! - `RL_TEST_REDIS_URL`: run single-server tests against this server instead of starting one.
//! - `RL_TEST_ENGINE=lua`: start stock servers (no module) unless a test asks for the module; tests of
//!   what only the module has skip themselves (`skip_module_only`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub mod cluster;
pub mod sentinel;

pub use redis;

/// The module's shared object.
pub fn module_path() -> PathBuf {
    if let Ok(p) = std::env::var("RL_MODULE") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("testkit lives in the repo");
    root.join("target/release/libredis_ratelimit.so")
}

/// The redis-server binary.
pub fn server_binary() -> String {
    std::env::var("RL_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// An external server to test against instead of starting one, from `RL_TEST_REDIS_URL`.
pub fn external_url() -> Option<String> {
    std::env::var("RL_TEST_REDIS_URL").ok().filter(|u| !u.is_empty())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

/// A free port whose cluster bus port (10,000 higher, at most 65535) is free too.
fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port <= 55535 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

fn did_not_start(port: u16, log: &str) -> ! {
    panic!("redis-server on port {port} exited before it answered; its log:\n{log}")
}

fn scratch_dir() -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "rl-test-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("cannot create a scratch directory");
    dir
}

/// A redis-server child process, or an external server; killed and cleaned up on drop.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    url: String,
    pub dir: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// The modules loaded, in order (the ratelimit module last, unless stock).
    preload: Vec<String>,
    binary: String,
    /// Started without the module (a stock server, as managed Redis is).
    stock: bool,
}

/// Says a test skipped, and why, in one format: `skipped: <reason>`.
pub fn skip(reason: &str) {
    eprintln!("skipped: {reason}");
}

/// Whether the suites run on the Lua library: `RL_TEST_ENGINE=lua` makes [`Builder::start`] start stock
/// servers (no module), where the client's default engine (`Backend::Auto`) takes the library.
pub fn lua_engine() -> bool {
    std::env::var("RL_TEST_ENGINE").is_ok_and(|v| v.eq_ignore_ascii_case("lua"))
}

/// True, with the skip message, when the suite runs on the Lua library (`RL_TEST_ENGINE=lua`) and the
/// test checks what only the module has (`reason`: what that is).
pub fn skip_module_only(reason: &str) -> bool {
    let lua = lua_engine();
    if lua {
        skip(&format!("RL_TEST_ENGINE=lua and this test needs the module: {reason}"));
    }
    lua
}

/// True, with the skip message, when `RL_TEST_REDIS_URL` names an external server and the test must
/// start servers of its own.
pub fn skip_when_external() -> bool {
    let external = external_url().is_some();
    if external {
        skip("RL_TEST_REDIS_URL is set and this test must start its own servers");
    }
    external
}

/// How to start a server: `Server::builder().args(&["--appendonly", "yes"]).own()`.
#[derive(Default)]
pub struct Builder {
    args: Vec<String>,
    env: Vec<(String, String)>,
    preload: Vec<String>,
    binary: Option<String>,
    stock: bool,
}

impl Builder {
    /// Extra configuration (`["--appendonly", "yes"]`).
    pub fn args(mut self, extra: &[&str]) -> Builder {
        self.args.extend(extra.iter().map(|s| s.to_string()));
        self
    }

    /// Environment variables for the server process (LD_PRELOAD of a clock shim, for instance).
    pub fn envs(mut self, env: &[(&str, &str)]) -> Builder {
        self.env.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self
    }

    /// Modules loaded before this one (`--loadmodule` each, in order).
    pub fn preload(mut self, modules: &[&Path]) -> Builder {
        self.preload.extend(modules.iter().map(|p| p.display().to_string()));
        self
    }

    /// Another server binary than `RL_REDIS_SERVER` (benchmarks beside other builds).
    pub fn binary(mut self, binary: &str) -> Builder {
        self.binary = Some(binary.to_string());
        self
    }

    /// Without the module: a stock server, as managed services run (for the Lua library).
    pub fn stock(mut self) -> Builder {
        self.stock = true;
        self
    }

    /// Starts a fresh server with the module loaded (unless [`Builder::stock`], or `RL_TEST_ENGINE=lua`:
    /// see [`lua_engine`]).
    pub fn start(self) -> Server {
        let binary = self.binary.unwrap_or_else(server_binary);
        let mut preload = self.preload;
        let stock = self.stock || lua_engine();
        if !stock {
            preload.push(module_path().display().to_string());
        }
        // A first start's port is chosen free, but another process may take it (or, for a cluster node,
        // its bus port, 10,000 higher) before the server binds it: that start is retried on another.
        let cluster = self.args.iter().any(|a| a == "--cluster-enabled");
        for attempt in 1.. {
            let port = if cluster { free_cluster_port() } else { free_port() };
            let dir = scratch_dir();
            match Server::try_start_in(
                dir,
                port,
                self.args.clone(),
                self.env.clone(),
                preload.clone(),
                &binary,
                stock,
            ) {
                Ok(server) => return server,
                Err(log) if attempt < 5 && log.contains("already in use") => continue,
                Err(log) => did_not_start(port, &log),
            }
        }
        unreachable!()
    }

    /// A fresh server for tests that need their own (replicas, restarts), or None, with the skip
    /// message, when `RL_TEST_REDIS_URL` says to use an external server.
    pub fn own(self) -> Option<Server> {
        if skip_when_external() {
            return None;
        }
        Some(self.start())
    }

    /// The server named by `RL_TEST_REDIS_URL`, or else a fresh one.
    pub fn single(self) -> Server {
        match external_url() {
            Some(url) => Server {
                child: None,
                port: 0,
                url,
                dir: PathBuf::new(),
                args: vec![],
                env: vec![],
                preload: vec![],
                binary: String::new(),
                stock: false,
            },
            None => self.start(),
        }
    }
}

impl Server {
    /// The one way to start a server: see [`Builder`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    fn start_in(
        dir: PathBuf,
        port: u16,
        args: Vec<String>,
        env: Vec<(String, String)>,
        preload: Vec<String>,
        binary: String,
        stock: bool,
    ) -> Server {
        Self::try_start_in(dir, port, args, env, preload, &binary, stock)
            .unwrap_or_else(|log| did_not_start(port, &log))
    }

    /// Starts a server and waits until it answers; Err(its log) when it exits first.
    fn try_start_in(
        dir: PathBuf,
        port: u16,
        args: Vec<String>,
        env: Vec<(String, String)>,
        preload: Vec<String>,
        binary: &str,
        stock: bool,
    ) -> Result<Server, String> {
        let module = module_path();
        assert!(
            stock || module.exists(),
            "{} is missing: run `cargo build --release` (make test does)",
            module.display()
        );
        let log = std::fs::File::create(dir.join("server.log")).expect("cannot create the server log");
        let child = Command::new(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--dir"])
            .arg(&dir)
            .args(debug_command_option(binary))
            .args(preload.iter().flat_map(|m| ["--loadmodule", m.as_str()]))
            .args(&args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            // Config errors go to stderr: the log holds both, so a server that exits says why.
            .stderr(log.try_clone().expect("cannot share the server log"))
            .stdout(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
        let url = format!("redis://127.0.0.1:{port}/");
        let binary = binary.to_string();
        let mut server = Server { child: Some(child), port, url, dir, args, env, preload, binary, stock };
        server.wait_ready()?;
        Ok(server)
    }

    /// Waits until the server answers; Err(its log) if it exits first.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = self.try_conn() {
                // Ready means: this child answers (not another server that took the port) and has
                // loaded its AOF or RDB. INFO is answered while loading, hence `loading:0`; plain INFO
                // holds both sections (Redis 6.2 takes one section name only).
                let info = redis::cmd("INFO").query::<String>(&mut c).unwrap_or_default();
                let pid = self.child.as_ref().map(|c| c.id().to_string()).unwrap_or_default();
                let has = |line: &str| info.lines().any(|l| l.trim() == line);
                if has(&format!("process_id:{pid}")) && has("loading:0") {
                    return Ok(());
                }
            }
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default());
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not start; see {}",
                self.port,
                self.dir.join("server.log").display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url.as_str())?.get_connection_with_timeout(Duration::from_secs(5))
    }

    /// A new connection to the server.
    pub fn conn(&self) -> redis::Connection {
        self.try_conn().unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.url))
    }

    /// Stops the server (SHUTDOWN with the given mode, e.g. "NOSAVE" or "SAVE") and starts it again
    /// with the same port, directory and configuration, so it reloads what it persisted.
    pub fn restart(&mut self, shutdown: &str) {
        self.shutdown(shutdown);
        self.start_again();
    }

    /// The server's process id (None for an external or stopped server).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server with SIGKILL (a crash: nothing is saved, nothing more is replicated); its port
    /// is closed until [`Server::start_again`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server (SHUTDOWN NOSAVE): its port is closed until [`Server::start_again`].
    pub fn stop(&mut self) {
        self.shutdown("NOSAVE");
    }

    /// The port it listens on (the same after [`Server::start_again`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the next [`Server::start_again`] loads the module: a failover to a server of the other
    /// kind.
    pub fn load_module_next(&mut self, module: bool) {
        let path = module_path().display().to_string();
        self.preload.retain(|m| *m != path);
        if module {
            self.preload.push(path);
        }
        self.stock = !module;
    }

    /// Stops the server with SHUTDOWN `mode` ("SAVE", "NOSAVE") and waits for its process.
    pub fn shutdown(&mut self, mode: &str) {
        if let Some(mut child) = self.child.take() {
            let _ = redis::cmd("SHUTDOWN").arg(mode).exec(&mut self.conn());
            let _ = child.wait();
        }
    }

    /// Starts a stopped server again, with the same port, directory and configuration.
    pub fn start_again(&mut self) {
        self.shutdown("NOSAVE");
        let fresh = Self::start_in(
            self.dir.clone(),
            self.port,
            self.args.clone(),
            self.env.clone(),
            self.preload.clone(),
            self.binary.clone(),
            self.stock,
        );
        // The old value owns no process any more, so dropping it leaves the shared directory alone.
        drop(std::mem::replace(self, fresh));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A key name unique to this process and call, so tests sharing an external server never collide.
pub fn unique_key(prefix: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}:{}:{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

/// One field of `INFO`, e.g. `info_field(&mut c, "persistence", "rdb_changes_since_last_save")`.
pub fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(con).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(field).and_then(|rest| rest.strip_prefix(':')))
        .map(|v| v.trim().to_string())
}

/// Waits (up to 20 s, then panics) until `done` says so.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A peer to compare against, built by `scripts/peers.sh`: the path in `var` (`RL_BENCH_CELL_MODULE`
/// for redis-cell's module, `RL_BENCH_GCRA_SERVER` for a redis-server with core's GCRA), or else
/// where that script caches it (`cached`, under `~/.cache/redis-ratelimit/peers`). None when absent.
pub fn peer(var: &str, cached: &str) -> Option<PathBuf> {
    let path = match std::env::var(var) {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            let cache = std::env::var("RL_PEER_CACHE").map(PathBuf::from).unwrap_or_else(|_| {
                PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/redis-ratelimit/peers")
            });
            cache.join(cached)
        }
    };
    path.exists().then_some(path)
}

/// redis-cell's module (`RL_BENCH_CELL_MODULE`), see [`peer`].
pub fn cell_module() -> Option<PathBuf> {
    peer("RL_BENCH_CELL_MODULE", "redis-cell/libredis_cell.so")
}

/// A redis-server with core's GCRA command (`RL_BENCH_GCRA_SERVER`), see [`peer`].
pub fn gcra_server() -> Option<PathBuf> {
    peer("RL_BENCH_GCRA_SERVER", "redis-gcra/redis-server")
}

/// `--enable-debug-command local` (DEBUG for the tests: digests, reloads) where the server has the
/// option (Redis 7+, Valkey); nothing for Redis 6.2, where DEBUG is always enabled.
fn debug_command_option(binary: &str) -> Vec<&'static str> {
    let version = Command::new(binary).arg("--version").output().map(|o| o.stdout).unwrap_or_default();
    let text = String::from_utf8_lossy(&version);
    let old = text.contains("Redis server v=6.") || text.contains("Redis server v=5.");
    if old {
        vec![]
    } else {
        vec!["--enable-debug-command", "local"]
    }
}

#[cfg(test)]
mod start_tests {
    use super::*;

    /// The case a first start retries: another server holds the port (and answers on it), and the new
    /// one exits saying so.
    #[test]
    fn a_server_whose_port_is_taken_exits_with_a_log_that_says_so() {
        let taken = Builder::default().stock().start();
        let port = taken.port;
        let started =
            Server::try_start_in(scratch_dir(), port, vec![], vec![], vec![], &server_binary(), true);
        let log = started.err().expect("the server cannot bind a taken port");
        assert!(log.contains("already in use"), "{log}");
    }

    /// A restart returns once the data set is loaded: the first command after it gets an answer,
    /// not LOADING. Two hidden configs make the load slow (`key-load-delay`, microseconds per key)
    /// and let the server answer during it (by default it does so only every 2 MB read).
    #[test]
    fn a_restart_returns_once_the_data_is_loaded() {
        let slow_load = ["--key-load-delay", "200", "--loading-process-events-interval-bytes", "1024"];
        let mut server = Builder::default().stock().args(&slow_load).start();
        let keys = 5000;
        let mut con = server.conn();
        let _: () = redis::cmd("DEBUG").arg("POPULATE").arg(keys).query(&mut con).unwrap();
        server.restart("SAVE");
        let size: redis::RedisResult<i64> = redis::cmd("DBSIZE").query(&mut server.conn());
        assert_eq!(size.unwrap(), keys, "the first command after a restart sees every key");
    }
}
