//! Serving: the gRPC service on a listener, and the configuration's reload beside it.

use crate::metrics::Metrics;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use crate::reload::{self, Reloader};
use crate::service::Service;
use crate::settings::Settings;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves `service` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    service: Service,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(service))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

/// Everything `settings` asks for: the configuration read (refused whole when it cannot work), the
/// limiter, the reload task, and the service ready to serve.
pub async fn start(settings: &Settings) -> Result<Service, String> {
    let (handle, seen) =
        reload::first(&settings.config_dir, settings.merge_domains).map_err(|e| e.to_string())?;
    let metrics = Arc::new(Metrics::new(settings.near_limit_ratio, settings.max_metric_keys));
    metrics.config_load_success.inc();
    let limiter = settings.limiter().await?;
    let service = Service::new(limiter, handle.clone(), settings.options.clone(), metrics.clone());
    let reloader = Reloader::new(settings.config_dir.clone(), settings.merge_domains, handle, seen, metrics);
    tokio::spawn(reloader.run(settings.reload_every));
    Ok(service)
}
