//! The examples of docs/client.md run against a real server: the workers' `drain` (batches reserved
//! under the failure policy) and the hyper server's `serve` (the layer without axum), with real
//! HTTP requests.

mod support;

#[allow(dead_code)] // its main is the program's; the test calls drain
#[path = "../examples/worker.rs"]
mod worker;

#[allow(dead_code)] // its main is the program's; the test calls serve
#[path = "../examples/hyper_app.rs"]
mod hyper_app;

use redis_ratelimit_client::http::RateLimitLayer;
use redis_ratelimit_client::{FailurePolicy, Policy};
use support::{calls, closed_port};
use testkit::Server;

#[tokio::test]
async fn the_workers_example_drains_its_queue_in_batches_through_redis() {
    let server = Server::builder().single();
    let limiter = support::builder(FailurePolicy::Closed).connect(server.url()).unwrap();
    let before = calls(&server, "rl.reserve");
    let mut queue: Vec<u32> = (1..=12).collect();
    let batches = worker::drain(&limiter, &mut queue).await.unwrap();
    assert!(queue.is_empty());
    assert!(batches >= 3, "at most 5 a batch: {batches}");
    // One reservation per batch: no polling.
    assert_eq!(calls(&server, "rl.reserve") - before, batches as u64);
    assert_eq!(limiter.counts().degraded, 0, "decided by Redis");
}

#[tokio::test]
async fn the_workers_example_keeps_working_during_an_outage_under_its_failure_policy() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let limiter = support::builder(FailurePolicy::LocalFallback { instances: 3 }).connect(&url).unwrap();
    let mut queue: Vec<u32> = (1..=4).collect();
    let batches = worker::drain(&limiter, &mut queue).await.unwrap();
    assert!(queue.is_empty() && batches >= 1);
    assert!(limiter.counts().degraded >= 1);
}

#[tokio::test]
async fn the_hyper_example_limits_real_requests_by_peer_address() {
    let server = Server::builder().single();
    let limiter = support::builder(FailurePolicy::Closed).connect(server.url()).unwrap();
    let layer = RateLimitLayer::new(limiter)
        .key_prefix(&testkit::unique_key("rl:hyper"))
        .route("api", "/api", Policy::token_bucket(3, 0.001).unwrap())
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(hyper_app::serve(listener, layer));
    let client = reqwest::Client::new();
    let mut statuses = vec![];
    for _ in 0..5 {
        let resp = client.get(format!("{base}/api/items")).send().await.unwrap();
        statuses.push(resp.status().as_u16());
        if resp.status() == 200 {
            assert_eq!(resp.text().await.unwrap(), "[]");
        }
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    let keys: Vec<String> = testkit::redis::cmd("KEYS").arg("rl:hyper*").query(&mut server.conn()).unwrap();
    assert!(keys.iter().any(|k| k.contains("127.0.0.1")), "keyed by the peer address: {keys:?}");
}
