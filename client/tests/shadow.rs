//! Shadow limits (dry runs) through a real socket, a real HTTP client and a real server: decided in
//! Redis and counted, never enforced, no header from them, never a veto over an enforced limit, and
//! checked in a call of their own (the server's call count says how many).

mod support;

use axum::routing::get;
use axum::Router;
use redis_ratelimit_client::http::{LayerError, RateLimitLayer};
use redis_ratelimit_client::{FailurePolicy, Policy};
use support::web::{header, logs, prometheus, series, serve};
use support::{calls, closed_port};
use testkit::{unique_key, Server};

fn app(layer: RateLimitLayer) -> Router {
    Router::new().route("/api/items", get(|| async { "ok" })).layer(layer)
}

fn counter(route: &str, limit: &str, outcome: &str) -> f64 {
    series(&format!(
        r#"ratelimit_http_requests_total{{route="{route}",limit="{limit}",outcome="{outcome}"}}"#
    ))
}

/// The key the layer uses for this test's loopback caller.
/// The key the layer writes for limit `limit` (a token bucket in every test here).
fn key(prefix: &str, limit: &str) -> String {
    format!("{prefix}:{{ip:127.0.0.1}}:{limit}:token_bucket")
}

#[tokio::test]
async fn a_shadow_route_is_decided_and_counted_but_never_enforced() {
    prometheus();
    logs();
    let server = Server::builder().single();
    let limiter = support::builder(FailurePolicy::Closed).connect(server.url()).unwrap();
    let prefix = unique_key("rl");
    let layer = RateLimitLayer::new(limiter.clone())
        .key_prefix(&prefix)
        .shadow("shadow-only") // before the route: the order does not matter
        .route("shadow-only", "/api", Policy::token_bucket(2, 0.001).unwrap())
        .structured_headers(true)
        .build()
        .unwrap();
    let base = serve(app(layer)).await;
    for i in 0..5 {
        let resp = reqwest::get(format!("{base}/api/items")).await.unwrap();
        assert_eq!(resp.status(), 200, "request {i} is served");
        for name in ["ratelimit-limit", "ratelimit-remaining", "ratelimit-policy", "retry-after"] {
            assert_eq!(header(&resp, name), None, "request {i}: no {name} from a shadow limit");
        }
        assert_eq!(resp.text().await.unwrap(), "ok");
    }
    // Decided in Redis: the bucket was charged by the two requests it allowed.
    let policy = Policy::token_bucket(2, 0.001).unwrap();
    assert_eq!(limiter.check(&key(&prefix, "shadow-only"), &policy, 0).await.remaining, 0);
    assert_eq!(counter("shadow-only", "shadow-only", "shadow_allowed"), 2.0);
    assert_eq!(counter("shadow-only", "shadow-only", "shadow_denied"), 3.0);
    assert_eq!(counter("shadow-only", "shadow-only", "denied"), 0.0, "nothing enforced");
    // One line for three denials: the line is itself rate-limited (one per 10 s).
    let lines = logs().lines_with("limit=shadow-only");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("shadow limit would have denied a request"), "{lines:?}");
    assert!(lines[0].contains(&format!("key={}", key(&prefix, "shadow-only"))), "{lines:?}");
}

/// An enforced route with a shadow global limit that is much stricter: had they been checked in one
/// all-or-nothing call, the shadow denial would have turned the route's allowed requests into
/// uncharged denials. They are not.
#[tokio::test]
async fn a_shadow_limit_never_vetoes_an_enforced_one() {
    prometheus();
    // Counts the server's calls: needs a server of its own.
    let Some(server) = Server::builder().own() else { return };
    let limiter = support::builder(FailurePolicy::Closed).connect(server.url()).unwrap();
    let prefix = unique_key("rl");
    let route = Policy::token_bucket(3, 0.001).unwrap();
    let global = Policy::token_bucket(1, 0.001).unwrap();
    let layer = RateLimitLayer::new(limiter.clone())
        .key_prefix(&prefix)
        .route("veto", "/api", route.clone())
        .global(global.clone())
        .shadow("all")
        .build()
        .unwrap();
    let base = serve(app(layer)).await;
    let before = calls(&server, "rl.token");
    let mut seen = vec![];
    for _ in 0..5 {
        let resp = reqwest::get(format!("{base}/api/items")).await.unwrap();
        let limit = header(&resp, "ratelimit-limit").map(String::from);
        let remaining = header(&resp, "ratelimit-remaining").map(String::from);
        seen.push((resp.status().as_u16(), limit.unwrap(), remaining.unwrap()));
    }
    let expect = |s: u16, l: &str, r: &str| (s, l.to_string(), r.to_string());
    assert_eq!(
        seen,
        [
            expect(200, "3", "2"),
            expect(200, "3", "1"),
            expect(200, "3", "0"),
            expect(429, "3", "0"),
            expect(429, "3", "0")
        ],
        "the route's limit decides and is the one in the headers, never the shadow global's"
    );
    // Five enforced calls; a shadow call for each of the three served requests only (the two the
    // route denied would not have been charged by an enforced global either).
    assert_eq!(calls(&server, "rl.token") - before, 8);
    assert_eq!(limiter.check(&key(&prefix, "veto"), &route, 0).await.remaining, 0, "all 3 charged");
    assert_eq!(limiter.check(&key(&prefix, "all"), &global, 0).await.remaining, 0, "1 charged");
    assert_eq!(counter("veto", "veto", "allowed"), 3.0);
    assert_eq!(counter("veto", "veto", "denied"), 2.0);
    assert_eq!(counter("veto", "all", "shadow_allowed"), 1.0);
    assert_eq!(counter("veto", "all", "shadow_denied"), 2.0);
}

/// A shadow route under an enforced global limit: the headers and the denials are the global's.
#[tokio::test]
async fn an_enforced_global_limit_speaks_for_a_request_with_a_shadow_route() {
    prometheus();
    let server = Server::builder().single();
    let layer = RateLimitLayer::new(support::builder(FailurePolicy::Closed).connect(server.url()).unwrap())
        .key_prefix(&unique_key("rl"))
        .route("trial", "/api", Policy::token_bucket(1, 0.001).unwrap())
        .shadow("trial")
        .global(Policy::token_bucket(3, 0.001).unwrap());
    let base = serve(app(layer.build().unwrap())).await;
    let mut seen = vec![];
    for _ in 0..4 {
        let resp = reqwest::get(format!("{base}/api/items")).await.unwrap();
        let remaining = header(&resp, "ratelimit-remaining").unwrap().to_string();
        assert_eq!(header(&resp, "ratelimit-limit"), Some("3"), "the global limit's");
        seen.push((resp.status().as_u16(), remaining));
    }
    let expect: Vec<(u16, String)> =
        [(200, "2"), (200, "1"), (200, "0"), (429, "0")].map(|(s, r)| (s, r.to_string())).into();
    assert_eq!(seen, expect);
    assert_eq!(counter("trial", "trial", "shadow_allowed"), 1.0);
    assert_eq!(counter("trial", "trial", "shadow_denied"), 2.0);
    assert_eq!(counter("trial", "all", "denied"), 1.0);
}

#[test]
fn build_refuses_a_shadow_that_names_no_limit() {
    let _runtime = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = _runtime.enter();
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let layer = || RateLimitLayer::new(support::builder(FailurePolicy::Open).connect(&url).unwrap());
    let policy = || Policy::token_bucket(10, 1.0).unwrap();
    let misspelt = layer().route("export", "/export", policy()).global(policy()).shadow("exprot").build();
    assert_eq!(
        misspelt.unwrap_err(),
        LayerError::ShadowForUnknownLimit { limit: "exprot".into(), known: "'export', 'all'".into() }
    );
    let no_global = layer().route("export", "/export", policy()).shadow("all").build();
    assert_eq!(
        no_global.unwrap_err().to_string(),
        "shadow 'all': there is no limit of that name (limits: 'export')"
    );
    assert!(layer().shadow("export").route("export", "/export", policy()).build().is_ok());
    assert!(layer().global(policy()).shadow("all").build().is_ok(), "a dry run of the whole layer");
}
