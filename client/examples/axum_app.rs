//! The axum example of the README and docs/client.md as a complete program (`cargo run --release -p
//! redis-ratelimit-client --example axum_app`, with a module-enabled Redis at `REDIS_URL`). The region
//! between the `readme:rust` markers is shown in both pages verbatim; `tests/readme.rs` checks that it is.

// [readme:rust]
use axum::{routing::get, Router};
use redis_ratelimit_client::http::RateLimitLayer;
use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
use std::net::SocketAddr;

async fn items() -> &'static str {
    "[]"
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    // The failure policy is the one required choice; the deadline defaults to 100 ms.
    let limiter = Limiter::builder(FailurePolicy::Open).connect(&redis)?;
    // The module is loaded and answers for this user (fails loudly at start-up otherwise).
    limiter.verify().await?;
    let layer = RateLimitLayer::new(limiter)
        .route("login", "/login", Policy::token_bucket(5, 0.1)?) // strict on login
        .route("api", "/api", Policy::token_bucket(10, 5.0)?) // bursts of 10, 5/s
        .global(Policy::token_bucket(100, 20.0)?) // per client, over all routes
        .skip("/health")
        .trusted_proxies(["10.0.0.0/8".parse()?])
        .structured_headers(true)
        .build()?; // refuses what cannot work, naming the route
    let app =
        Router::new().route("/api/items", get(items)).route("/health", get(|| async { "ok" })).layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    // Served with ConnectInfo, so the layer knows each client's address.
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    Ok(())
}
// [/readme:rust]
