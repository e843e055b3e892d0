//! The demo application as a server (the compose file's `app`): an axum service behind
//! `RateLimitLayer`, with the admin endpoints of `make demo`. Configured by the environment:
//!
//! - `REDIS_URL` (default `redis://127.0.0.1:6379/`), `LISTEN` (default `127.0.0.1:8080`);
//! - `FAILURE_POLICY`: `open` (default), `closed`, or `local:<instances>`;
//! - `TRUSTED_PROXIES`: comma-separated networks whose forwarding headers are believed (none).
//!
//! Routes: `GET /api/...` (10 per client, 5/s; 100 per client over all routes), `GET /health` (never
//! limited), `GET /admin/metrics` (Prometheus), `GET /admin/ratelimit/{caller}` (RL.INSPECT + RL.TOP).

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use redis_ratelimit_client::http::{limit_key, RateLimitLayer};
use redis_ratelimit_client::{FailurePolicy, Limiter, Policy, VerifyError};
use std::net::SocketAddr;

#[derive(Clone)]
struct App {
    limiter: Limiter,
    api: Policy,
}

fn failure_policy(text: &str) -> Result<FailurePolicy, String> {
    match text {
        "open" => Ok(FailurePolicy::Open),
        "closed" => Ok(FailurePolicy::Closed),
        other => match other.strip_prefix("local:").and_then(|n| n.parse().ok()) {
            Some(instances) => Ok(FailurePolicy::LocalFallback { instances }),
            None => Err(format!("FAILURE_POLICY must be open, closed or local:<instances>, not {other:?}")),
        },
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_string());
    let failure = failure_policy(&env("FAILURE_POLICY", "open"))?;
    let limiter =
        Limiter::builder(failure).name("app").connect(&env("REDIS_URL", "redis://127.0.0.1:6379/"))?;
    // The start-up check. A missing module or ACL permission is a mistake to fix now; Redis not up
    // yet is an outage like any other, which the failure policy handles.
    match limiter.verify().await {
        Ok(module) => {
            let version = module.version.map_or_else(|| "of unknown version".to_string(), |v| v.to_string());
            println!("ratelimit module {version} answers {}", module.commands.join(", "));
        }
        Err(VerifyError::Unreachable(e)) => {
            eprintln!("warning: Redis is not reachable yet ({e}); the failure policy decides until it is");
        }
        Err(e) => return Err(e.into()),
    }
    let proxies = env("TRUSTED_PROXIES", "");
    let proxies =
        proxies.split(',').filter(|p| !p.is_empty()).map(str::parse).collect::<Result<Vec<_>, _>>()?;
    let api = Policy::token_bucket(10, 5.0)?;
    let layer = RateLimitLayer::new(limiter.clone())
        .route("api", "/api", api.clone())
        .global(Policy::token_bucket(100, 20.0)?)
        .skip("/health")
        .skip("/admin/")
        .trusted_proxies(proxies)
        .structured_headers(true)
        .build()?;
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    let app = Router::new()
        .route("/api/{*rest}", get(|| async { "ok\n" }))
        .route("/health", get(|| async { "ok\n" }))
        .route("/admin/metrics", get(move || std::future::ready(prometheus.render())))
        .route(
            "/admin/ratelimit/{caller}",
            get(|State(app): State<App>, Path(caller): Path<String>| async move {
                Json(
                    app.limiter
                        .report(&limit_key(&format!("rl:{{{caller}}}"), "api", &app.api), &app.api)
                        .await,
                )
            }),
        )
        .with_state(App { limiter, api })
        .layer(layer);
    let listen: SocketAddr = env("LISTEN", "127.0.0.1:8080").parse()?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening on http://{listen}");
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    Ok(())
}
