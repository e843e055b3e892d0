//! `redis-ratelimit-rls`: Envoy's rate limit service on the redis-ratelimit module (or its Lua library).
//! Configured by its environment (see rls/README.md).

use redis_ratelimit_rls::server;
use redis_ratelimit_rls::settings::Settings;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LOG_LEVEL")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    let service = match server::start(&settings).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    let listener = match tokio::net::TcpListener::bind(settings.listen).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(listen = %settings.listen, "cannot listen: {e}");
            return ExitCode::from(1);
        }
    };
    let listen = listener.local_addr().map_or(settings.listen, |a| a);
    tracing::info!(listen = %listen, config = %settings.config_dir.display(), "serving envoy.service.ratelimit.v3.RateLimitService");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    match server::serve(listener, service, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(1)
        }
    }
}
