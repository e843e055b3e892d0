//! Beside gRPC, envoyproxy/ratelimit's HTTP endpoints: `POST /json` (a RateLimitRequest's JSON in, the
//! response's JSON out: 200 OK, 429 OVER_LIMIT, 500 UNKNOWN; 400 for a request that is not one),
//! `GET /healthcheck` (200 `OK` while a configuration is loaded and Redis answers, else 500), and the
//! Prometheus page (`/metrics` by default).

use crate::json;
use crate::service::Service;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::future::Future;
use tokio::net::TcpListener;

/// The routes: `/json`, `/healthcheck` and `metrics_path`.
pub fn router(service: Service, metrics_path: &str) -> Router {
    Router::new()
        .route("/json", post(json_endpoint))
        .route("/healthcheck", get(healthcheck))
        .route(metrics_path, get(metrics))
        .with_state(service)
}

/// Only the Prometheus page, for a listener of its own (`PROMETHEUS_ADDR`).
pub fn metrics_router(service: Service, metrics_path: &str) -> Router {
    Router::new().route(metrics_path, get(metrics)).with_state(service)
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body.into()).into_response()
}

async fn json_endpoint(State(service): State<Service>, body: Bytes) -> Response {
    let request = match json::request(&body) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "/json: not a RateLimitRequest");
            return text(StatusCode::BAD_REQUEST, "Bad Request");
        }
    };
    let response = match service.decide(&request).await {
        Ok(r) => r,
        Err(status) if status.code() == tonic::Code::Unavailable => {
            return text(StatusCode::SERVICE_UNAVAILABLE, status.message().to_string());
        }
        Err(status) => {
            tracing::warn!(error = %status.message(), "/json: refused");
            return text(StatusCode::BAD_REQUEST, "Bad Request");
        }
    };
    use crate::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
    let status = match Code::try_from(response.overall_code) {
        Ok(Code::Ok) => StatusCode::OK,
        Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let body = json::response(&response).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn healthcheck(State(service): State<Service>) -> Response {
    match service.healthy().await {
        Ok(()) => text(StatusCode::OK, "OK"),
        Err(reason) => {
            tracing::warn!(%reason, "/healthcheck: unhealthy");
            text(StatusCode::INTERNAL_SERVER_ERROR, reason)
        }
    }
}

async fn metrics(State(service): State<Service>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        service.render_metrics(),
    )
        .into_response()
}
