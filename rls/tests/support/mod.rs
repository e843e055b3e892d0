//! The service started on a free loopback port over a real Redis, and a real tonic client.

#![allow(dead_code)]

pub mod peer;

use redis_ratelimit_rls::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use redis_ratelimit_rls::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use redis_ratelimit_rls::server;
use redis_ratelimit_rls::settings::Settings;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::oneshot;
use tonic::transport::Channel;

pub struct Rls {
    pub client: RateLimitServiceClient<Channel>,
    pub dir: PathBuf,
    pub addr: std::net::SocketAddr,
    /// `http://127.0.0.1:port`: `/json`, `/healthcheck`, `/metrics`.
    pub http: String,
    _stop: oneshot::Sender<()>,
    _stop_http: oneshot::Sender<()>,
}

fn scratch() -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "rls-test-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("config")).unwrap();
    dir
}

impl Rls {
    /// The service on `redis_url` with `config` as `config/config.yaml`, and `env` beside the test's own.
    pub async fn start(redis_url: &str, config: &str, env: &[(&str, &str)]) -> Rls {
        let dir = scratch();
        std::fs::write(dir.join("config/config.yaml"), config).unwrap();
        let mut vars: HashMap<String, String> = HashMap::new();
        vars.insert("REDIS_URL".into(), redis_url.into());
        vars.insert("RUNTIME_ROOT".into(), dir.display().to_string());
        vars.insert("RLS_RELOAD_MS".into(), "20".into());
        vars.insert("RLS_DEADLINE_MS".into(), "100".into());
        for (k, v) in env {
            vars.insert(k.to_string(), v.to_string());
        }
        let settings = Settings::from_vars(&vars).unwrap();
        let service = server::start(&settings).await.unwrap();
        let web = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = format!("http://{}", web.local_addr().unwrap());
        let (stop_http, http_stopped) = oneshot::channel::<()>();
        let router = redis_ratelimit_rls::http::router(service.clone(), &settings.metrics_path);
        tokio::spawn(redis_ratelimit_rls::http::serve(web, router, async {
            let _ = http_stopped.await;
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(server::serve(listener, service, async {
            let _ = stopped.await;
        }));
        let client = RateLimitServiceClient::connect(format!("http://{addr}")).await.unwrap();
        Rls { client, dir, addr, http, _stop: stop, _stop_http: stop_http }
    }

    pub async fn ask(
        &mut self,
        domain: &str,
        descriptors: &[&[(&str, &str)]],
        hits: u32,
    ) -> Result<Reply, tonic::Status> {
        let request = RateLimitRequest {
            domain: domain.into(),
            descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
            hits_addend: hits,
        };
        self.send(request).await
    }

    pub async fn send(&mut self, request: RateLimitRequest) -> Result<Reply, tonic::Status> {
        self.client.should_rate_limit(request).await.map(|r| Reply(r.into_inner()))
    }

    /// Writes `config/config.yaml` anew.
    pub fn write_config(&self, text: &str) {
        let path = self.dir.join("config/config.yaml");
        let tmp = self.dir.join("config/.config.yaml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, path).unwrap();
    }
}

pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries.iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect(),
        ..Default::default()
    }
}

/// A reply, read by name.
#[derive(Debug)]
pub struct Reply(pub RateLimitResponse);

impl Reply {
    pub fn ok(&self) -> bool {
        self.0.overall_code == Code::Ok as i32
    }

    pub fn over(&self) -> bool {
        self.0.overall_code == Code::OverLimit as i32
    }

    /// Descriptor `i`'s (code is OVER_LIMIT, limit_remaining).
    pub fn status(&self, i: usize) -> (bool, u32) {
        let s = &self.0.statuses[i];
        (s.code == Code::OverLimit as i32, s.limit_remaining)
    }

    /// Descriptor `i`'s requests_per_unit, when it has a limit.
    pub fn limit(&self, i: usize) -> Option<u32> {
        self.0.statuses[i].current_limit.as_ref().map(|l| l.requests_per_unit)
    }

    pub fn headers(&self) -> Vec<(String, String)> {
        self.0.response_headers_to_add.iter().map(|h| (h.key.clone(), h.value.clone())).collect()
    }
}

/// A fresh domain per test, so tests sharing a server never share keys.
pub fn domain(name: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!("{name}-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

/// The value of the Prometheus sample `name{labels}` (labels written as on the page), 0 when absent.
pub fn sample(page: &str, series: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0, |v| v.trim().parse().unwrap())
}
