//! The HTTP layer without Redis: a limiter that decides in this process (`in_process`), driven with
//! tower's `oneshot` on an axum router, no socket. The real-socket tests against Redis are in http.rs.

mod support;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use redis_ratelimit_client::http::{AccessLists, PeerAddr, RateLimitLayer, DENIED, RATE_LIMITED};
use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
use std::net::SocketAddr;
use support::wait_until;
use tower::ServiceExt;

fn request(path: &str, peer: &str) -> Request<Body> {
    let mut req = Request::get(path).body(Body::empty()).unwrap();
    req.extensions_mut().insert(PeerAddr(peer.parse::<SocketAddr>().unwrap()));
    req
}

/// A denial's problem body (JSON).
async fn problem(resp: http::Response<Body>) -> serde_json::Value {
    let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap();
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn the_layer_limits_in_process_with_oneshot() {
    let limiter = Limiter::builder(FailurePolicy::Closed).in_process();
    let layer = RateLimitLayer::new(limiter.clone())
        .route("api", "/api", Policy::token_bucket(3, 0.01).unwrap())
        .build()
        .unwrap();
    let app = Router::new().route("/api/items", get(|| async { "ok" })).layer(layer);
    let mut statuses = vec![];
    for _ in 0..4 {
        let resp = app.clone().oneshot(request("/api/items", "192.0.2.1:5000")).await.unwrap();
        statuses.push(resp.status());
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(resp.headers()["ratelimit-remaining"], "0");
            assert!(resp.headers().contains_key("retry-after"));
            let problem = problem(resp).await;
            assert_eq!(problem["type"], RATE_LIMITED);
        } else {
            assert_eq!(resp.headers().get("x-ratelimit-degraded"), None, "in process is not degraded");
        }
    }
    assert_eq!(statuses[..3], [StatusCode::OK; 3]);
    assert_eq!(statuses[3], StatusCode::TOO_MANY_REQUESTS);
    // Another caller has its own bucket.
    let other = app.clone().oneshot(request("/api/items", "192.0.2.2:5000")).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    let counts = limiter.counts();
    assert_eq!((counts.allowed, counts.denied, counts.degraded), (4, 1, 0));
}

#[tokio::test]
async fn an_in_process_limiter_decides_every_kind_and_refuses_redis_only_calls() {
    let limiter = Limiter::builder(FailurePolicy::Open).in_process();
    let window = Policy::fixed_window(2, std::time::Duration::from_secs(60)).unwrap();
    let mut got = vec![];
    for _ in 0..3 {
        got.push(limiter.check("k", &window, 1).await.allowed);
    }
    assert_eq!(got, [true, true, false]);
    assert!(!limiter.check("k", &window, 1).await.degraded);
    let bucket = Policy::token_bucket(5, 1.0).unwrap();
    assert!(limiter.refund("b", &bucket, 1).await.is_err(), "a refund needs Redis");
}

/// Shadow limits and the access lists need no server either: a shadow route never denies, an
/// enforced global still does, and the lists answer before any limit.
#[tokio::test]
async fn shadow_limits_and_access_lists_work_in_process() {
    let limiter = Limiter::builder(FailurePolicy::Closed).in_process();
    let lists = AccessLists::new();
    lists.allow_network("192.0.2.100/32".parse().unwrap());
    lists.deny_network("2001:db8::/32".parse().unwrap());
    let layer = RateLimitLayer::new(limiter.clone())
        .route("api", "/api", Policy::token_bucket(1, 0.01).unwrap())
        .shadow("api")
        .global(Policy::token_bucket(3, 0.01).unwrap())
        .access_lists(lists.clone())
        .build()
        .unwrap();
    let app = Router::new().route("/api/items", get(|| async { "ok" })).layer(layer);
    let mut statuses = vec![];
    for _ in 0..4 {
        let resp = app.clone().oneshot(request("/api/items", "192.0.2.1:5000")).await.unwrap();
        statuses.push(resp.status().as_u16());
        assert_eq!(resp.headers()["ratelimit-limit"], "3", "the enforced global limit's headers");
    }
    assert_eq!(statuses, [200, 200, 200, 429], "the shadow route of 1 denied nothing");
    let counts = limiter.counts();
    // 4 enforced checks (3 allowed), 3 shadow checks after them (1 allowed, 2 denied).
    assert_eq!((counts.allowed, counts.denied), (4, 3));

    for _ in 0..5 {
        let allowed = app.clone().oneshot(request("/api/items", "192.0.2.100:5000")).await.unwrap();
        assert_eq!(allowed.status(), StatusCode::OK);
    }
    let denied = app.clone().oneshot(request("/api/items", "[2001:db8::1]:5000")).await.unwrap();
    assert_eq!(denied.status(), StatusCode::FORBIDDEN);
    let problem = problem(denied).await;
    assert_eq!(problem["type"], DENIED);
    assert_eq!(limiter.counts(), counts, "listed callers were not checked at all");
}

#[tokio::test]
async fn a_concurrency_route_holds_its_slot_in_process_until_the_body_is_dropped() {
    use redis_ratelimit_client::http::CONCURRENCY_LIMITED;
    let limiter = Limiter::builder(FailurePolicy::Closed).in_process();
    let layer = RateLimitLayer::new(limiter)
        .concurrency("export", "/export", Policy::concurrency(1, std::time::Duration::from_secs(60)).unwrap())
        .build()
        .unwrap();
    let app = Router::new().route("/export/run", get(|| async { "done" })).layer(layer);
    // The first response's body is not consumed yet: its slot is held.
    let first = app.clone().oneshot(request("/export/run", "192.0.2.1:5000")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let second = app.clone().oneshot(request("/export/run", "192.0.2.1:5000")).await.unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    let problem = problem(second).await;
    assert_eq!(
        (problem["type"].as_str(), problem["in_flight_limit"].as_u64()),
        (Some(CONCURRENCY_LIMITED), Some(1))
    );
    // Another caller has its own slot.
    let other = app.clone().oneshot(request("/export/run", "192.0.2.2:5000")).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    // Sending the body to its end frees the slot.
    assert_eq!(axum::body::to_bytes(first.into_body(), 1 << 16).await.unwrap(), "done");
    wait_until("the slot to be freed with the body", async || {
        app.clone().oneshot(request("/export/run", "192.0.2.1:5000")).await.unwrap().status()
            == StatusCode::OK
    })
    .await;
}
