//! envoyproxy/ratelimit itself, built from a fetched snapshot by rls/scripts/peer.sh (never part of
//! this repository): its binary started on free loopback ports over the same Redis and the same
//! configuration directory as this service, killed when dropped.

use redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// The binary: `RLS_PEER_BIN`, or where rls/scripts/peer.sh builds it; None (with the reason on
/// stderr) when neither is there.
pub fn binary() -> Option<PathBuf> {
    let path = std::env::var_os("RLS_PEER_BIN").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/redis-ratelimit/rls-peer/ratelimit")
    });
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "skipped: no envoyproxy/ratelimit binary at {} (rls/scripts/peer.sh builds it from a fetched snapshot)",
            path.display()
        );
        None
    }
}

pub struct Peer {
    child: Child,
    pub grpc: std::net::SocketAddr,
    pub http: String,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Peer {
    /// envoyproxy/ratelimit on Redis at `redis` (`host:port`), reading `runtime_root/config`
    /// (RUNTIME_SUBDIRECTORY empty, as this service reads it), statsd off.
    pub async fn start(binary: &Path, redis: &str, runtime_root: &Path, env: &[(&str, &str)]) -> Peer {
        let (grpc, port, debug) = (free_port(), free_port(), free_port());
        let child = Command::new(binary)
            .env_clear()
            .envs([
                ("REDIS_SOCKET_TYPE", "tcp".to_string()),
                ("REDIS_URL", redis.to_string()),
                ("RUNTIME_ROOT", runtime_root.display().to_string()),
                ("RUNTIME_SUBDIRECTORY", String::new()),
                ("RUNTIME_WATCH_ROOT", "false".into()),
                ("USE_STATSD", "false".into()),
                ("HOST", "127.0.0.1".into()),
                ("PORT", port.to_string()),
                ("GRPC_HOST", "127.0.0.1".into()),
                ("GRPC_PORT", grpc.to_string()),
                ("DEBUG_HOST", "127.0.0.1".into()),
                ("DEBUG_PORT", debug.to_string()),
                ("LOG_LEVEL", "warn".into()),
            ])
            .envs(env.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start envoyproxy/ratelimit");
        let peer = Peer {
            child,
            grpc: format!("127.0.0.1:{grpc}").parse().unwrap(),
            http: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = reqwest::get(format!("{}/healthcheck", peer.http)).await {
                if r.status() == 200 {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "envoyproxy/ratelimit did not become healthy");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        peer
    }

    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc)).await.unwrap()
    }
}
