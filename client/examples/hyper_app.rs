//! The hyper example of docs/client.md as a complete program (`cargo run --release -p
//! redis-ratelimit-client --example hyper_app`, with a module-enabled Redis at `REDIS_URL`): the
//! layer on a hyper 1 server without axum (a hyper-only application depends on the crate with
//! `default-features = false`). The region between the `readme:hyper` markers is shown in the guide
//! verbatim (`tests/readme.rs`); `tests/examples.rs` serves `serve` and sends it real requests.

// [readme:hyper]
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use redis_ratelimit_client::http::{PeerAddr, RateLimitLayer};
use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
use std::convert::Infallible;
use tokio::net::TcpListener;
use tower::ServiceBuilder;

async fn items(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from("[]"))))
}

/// Serves every connection `listener` accepts, each request limited by `layer`.
pub async fn serve(listener: TcpListener, layer: RateLimitLayer) -> std::io::Result<()> {
    loop {
        let (stream, addr) = listener.accept().await?;
        // hyper has no ConnectInfo: each connection's service puts the peer address where the
        // layer looks for it.
        let service = ServiceBuilder::new()
            .map_request(move |mut request: Request<Incoming>| {
                request.extensions_mut().insert(PeerAddr(addr));
                request
            })
            .layer(layer.clone())
            .service_fn(items);
        tokio::spawn(async move {
            let served = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                .await;
            if let Err(e) = served {
                eprintln!("connection from {addr}: {e}");
            }
        });
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let limiter = Limiter::builder(FailurePolicy::Open).connect(&redis)?;
    limiter.verify().await?;
    let layer = RateLimitLayer::new(limiter)
        .route("api", "/api", Policy::token_bucket(10, 5.0)?) // bursts of 10, 5/s
        .build()?;
    serve(TcpListener::bind("127.0.0.1:3000").await?, layer).await?;
    Ok(())
}
// [/readme:hyper]
