//! Decisions per second through the service (not run by `make test`: `cargo test --release -p
//! redis-ratelimit-rls --test throughput -- --ignored --nocapture`). 32 tasks over 4 gRPC connections,
//! each request two descriptors (an address and a tenant) decided in one RL.ALL, for 3 s.

mod support;

use std::time::{Duration, Instant};
use support::{domain, Rls};
use testkit::Server;

async fn measure(server: &Server, what: &str, env: &[(&str, &str)]) {
    let d = domain("bench");
    let config = format!(
        "domain: {d}\ndescriptors:\n  - key: remote_address\n    rate_limit: {{unit: second, requests_per_unit: 1000000}}\n  - key: tenant\n    rate_limit: {{unit: second, requests_per_unit: 1000000}}\n"
    );
    let mut connections = vec![];
    // A generous deadline: the machine is shared, a measurement must not turn into failures.
    let mut env = env.to_vec();
    env.push(("RLS_DEADLINE_MS", "2000"));
    let first = Rls::start(server.url(), &config, &env).await;
    for _ in 0..4 {
        let channel = tonic::transport::Channel::from_shared(format!("http://{}", first.addr)).unwrap();
        connections.push(channel.connect().await.unwrap());
    }
    let end = Instant::now() + Duration::from_secs(3);
    let mut tasks = vec![];
    for t in 0..32 {
        let channel = connections[t % 4].clone();
        let d = d.clone();
        let what = what.to_string();
        tasks.push(tokio::spawn(async move {
            use redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
            let mut client = RateLimitServiceClient::new(channel);
            let mut latencies = vec![];
            let mut n = 0u64;
            while Instant::now() < end {
                let ip = format!("10.0.{}.{}", t, n % 200);
                let request = redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::RateLimitRequest {
                    domain: d.clone(),
                    descriptors: vec![
                        support::descriptor(&[("remote_address", &ip)]),
                        support::descriptor(&[("tenant", "t")]),
                    ],
                    hits_addend: 1,
                };
                let start = Instant::now();
                let r = client.should_rate_limit(request).await;
                latencies.push(start.elapsed());
                assert_eq!(r.map(|r| r.into_inner().overall_code).ok(), Some(1), "{what}");
                n += 1;
            }
            latencies
        }));
    }
    let mut all = vec![];
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    let p = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    println!(
        "{what}: {:.0} requests/s (2 descriptors each), p50 {:?}, p99 {:?}",
        all.len() as f64 / 3.0,
        p(0.50),
        p(0.99)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn throughput() {
    let Some(module) = Server::builder().own() else { return };
    measure(&module, "module, atomic", &[]).await;
    measure(&module, "module, per_descriptor", &[("RLS_COMBINE", "per_descriptor")]).await;
    let Some(stock) = Server::builder().stock().own() else { return };
    measure(&stock, "library (stock server), atomic", &[]).await;
}
