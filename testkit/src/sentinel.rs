//! A primary behind Sentinel on loopback: a module-enabled primary and replica and three sentinels
//! (`redis-server --sentinel`), quorum 2, with short timeouts so a failover takes a few seconds. All
//! processes are stopped on drop, also when a test panics.

use crate::{free_port, scratch_dir, server_binary, wait_until, Server};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The service name the sentinels monitor.
pub const SERVICE: &str = "rl-primary";
/// Sentinel's settings: a node is down after this long without an answer...
pub const DOWN_AFTER_MS: u64 = 1000;
/// ...and a failover that has not finished in this long is retried.
pub const FAILOVER_TIMEOUT_MS: u64 = 5000;

pub struct Sentinels {
    /// The primary and the replica at the start (either may be the primary after a failover).
    pub nodes: Vec<Server>,
    sentinels: Vec<(Child, u16, PathBuf)>,
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for (child, _, dir) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Sentinels {
    /// Starts the topology and waits until the sentinels know the replica and each other; None (with
    /// the skip message) when `RL_TEST_REDIS_URL` says to use an external server.
    pub fn start() -> Option<Sentinels> {
        if crate::skip_when_external() {
            return None;
        }
        let primary = Server::builder().args(&["--repl-diskless-sync-delay", "0"]).start();
        let replica_of = primary.port.to_string();
        let replica = Server::builder()
            .args(&["--replicaof", "127.0.0.1", &replica_of, "--repl-diskless-sync-delay", "0"])
            .start();
        let mut con = replica.conn();
        wait_until("the replica's link", || {
            crate::info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up")
        });
        let sentinels = (0..3).map(|_| start_sentinel(primary.port)).collect();
        let topology = Sentinels { nodes: vec![primary, replica], sentinels };
        wait_until("the sentinels to see the replica and each other", || {
            topology.sentinels.iter().all(|(_, port, _)| {
                let info = sentinel_info(*port);
                info.contains("slaves=1") && info.contains("sentinels=3")
            })
        });
        Some(topology)
    }

    /// The sentinels' addresses as URLs (`redis://127.0.0.1:port/`).
    pub fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(|(_, port, _)| format!("redis://127.0.0.1:{port}/")).collect()
    }

    /// The port of the primary the sentinels name now.
    pub fn primary_port(&self) -> Option<u16> {
        let (_, port, _) = self.sentinels.first()?;
        let mut con =
            redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?.get_connection().ok()?;
        let addr: Vec<String> =
            redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(SERVICE).query(&mut con).ok()?;
        addr.get(1)?.parse().ok()
    }

    /// The node listening on `port`.
    pub fn node(&mut self, port: u16) -> Option<&mut Server> {
        self.nodes.iter_mut().find(|n| n.port == port)
    }

    /// Waits until the sentinels name another primary than `old` (a failover), up to `limit`; the
    /// new primary's port.
    pub fn wait_failover(&self, old: u16, limit: Duration) -> Option<u16> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(port) = self.primary_port().filter(|p| *p != old) {
                return Some(port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

fn start_sentinel(primary: u16) -> (Child, u16, PathBuf) {
    let dir = scratch_dir();
    let port = free_port();
    let config = dir.join("sentinel.conf");
    std::fs::write(
        &config,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\nsentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\nsentinel parallel-syncs {SERVICE} 1\n",
            dir = dir.display()
        ),
    )
    .expect("cannot write the sentinel's configuration");
    let log = std::fs::File::create(dir.join("sentinel.log")).expect("cannot create the sentinel's log");
    let child = Command::new(server_binary())
        .arg(&config)
        .arg("--sentinel")
        .stdout(log)
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start a sentinel");
    let deadline = Instant::now() + Duration::from_secs(10);
    while sentinel_info_checked(port).is_none() {
        assert!(Instant::now() < deadline, "the sentinel on port {port} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, port, dir)
}

fn sentinel_info_checked(port: u16) -> Option<String> {
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?.get_connection().ok()?;
    redis::cmd("INFO").arg("sentinel").query(&mut con).ok()
}

fn sentinel_info(port: u16) -> String {
    sentinel_info_checked(port).unwrap_or_default()
}
