//! Who is limited, from the application: the layer's counters scraped from a Prometheus endpoint over
//! a real socket and parsed, and the admin reads (RL.INSPECT, RL.TOP) through the limiter.

mod support;

use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusBuilder;
use redis_ratelimit_client::http::RateLimitLayer;
use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;
use support::closed_port;
use testkit::{unique_key, Server};

/// Prometheus text format: `name{labels} value` lines into a map (comments skipped).
fn parse_exposition(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[tokio::test]
async fn counters_by_route_limit_and_outcome_are_scraped_from_a_prometheus_endpoint() {
    // The one test in this binary that installs the process-wide recorder.
    let handle = PrometheusBuilder::new().install_recorder().expect("a recorder");
    let server = Server::builder().single();
    let prefix = unique_key("rl");
    let limiter = support::builder(FailurePolicy::Closed).name("api").connect(server.url()).unwrap();
    let down = support::builder(FailurePolicy::Open)
        .name("down")
        .connect(&format!("redis://127.0.0.1:{}/", closed_port()))
        .unwrap();
    let layer = |limiter: Limiter| {
        RateLimitLayer::new(limiter)
            .key_prefix(&prefix)
            .route("search", "/search", Policy::token_bucket(3, 0.001).unwrap())
            .global(Policy::token_bucket(100, 0.001).unwrap())
    };
    let metrics = handle.clone();
    let app = Router::new()
        .route("/search", get(|| async { "results" }))
        .layer(layer(limiter))
        .route("/metrics", get(move || std::future::ready(metrics.render())))
        .nest("/down", Router::new().route("/search", get(|| async { "results" })).layer(layer(down)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
    });
    for _ in 0..5 {
        reqwest::get(format!("{base}/search")).await.unwrap();
    }
    reqwest::get(format!("{base}/down/search")).await.unwrap();

    let resp = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(resp.status(), 200);
    let series = parse_exposition(&resp.text().await.unwrap());
    let get = |s: &str| series.get(s).copied().unwrap_or_else(|| panic!("no series {s} in {series:?}"));
    assert_eq!(get(r#"ratelimit_http_requests_total{route="search",limit="search",outcome="allowed"}"#), 3.0);
    assert_eq!(get(r#"ratelimit_http_requests_total{route="search",limit="search",outcome="denied"}"#), 2.0);
    assert_eq!(get(r#"ratelimit_client_decisions_total{limiter="api",outcome="allowed"}"#), 3.0);
    assert_eq!(get(r#"ratelimit_client_decisions_total{limiter="down",outcome="degraded_allowed"}"#), 1.0);
}

#[tokio::test]
async fn admin_reads_show_a_clients_state_and_the_most_denied_keys() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = support::builder(FailurePolicy::Closed).connect(server.url()).unwrap();
    let policy = Policy::token_bucket(3, 0.01).unwrap();
    for _ in 0..10 {
        limiter.check("rl:{user:ada}:search", &policy, 1).await;
    }
    let seen = limiter.inspect("rl:{user:ada}:search", Some(&policy)).await.unwrap().expect("state");
    assert_eq!(seen.limiter, "RL.TOKEN");
    assert_eq!(seen.remaining, Some(0));
    assert!(seen.retry_after.unwrap() > Duration::from_secs(90));
    assert!(seen.fields["ttl_ms"] > 0 && seen.fields.contains_key("tat_ms"));
    assert_eq!(limiter.inspect("rl:nobody", Some(&policy)).await.unwrap(), None);
    if testkit::skip_module_only("RL.TOP: the library keeps no statistics of denied keys") {
        return;
    }
    let top = limiter.top_denied(5).await.unwrap();
    assert_eq!(top.len(), 1);
    assert_eq!((top[0].key.as_str(), top[0].denied), ("rl:{user:ada}:search", 7));
}
