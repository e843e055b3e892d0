//! `redis-ratelimit-rls`: Envoy's rate limit service on the redis-ratelimit module (or its Lua library).
//! Configured by its environment (see rls/README.md).

use redis_ratelimit_rls::settings::Settings;
use redis_ratelimit_rls::{http, server};
use std::process::ExitCode;
use tokio::net::TcpListener;

fn logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LOG_LEVEL")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

async fn bind(addr: std::net::SocketAddr, what: &str) -> Result<TcpListener, ExitCode> {
    TcpListener::bind(addr).await.map_err(|e| {
        tracing::error!(listen = %addr, "cannot listen for {what}: {e}");
        ExitCode::from(1)
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            logs(false);
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    logs(settings.log_json);
    let service = match server::start(&settings).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    let grpc = match bind(settings.listen, "gRPC").await {
        Ok(l) => l,
        Err(code) => return code,
    };
    let web = match bind(settings.http_listen, "HTTP").await {
        Ok(l) => l,
        Err(code) => return code,
    };
    let prometheus = match settings.prometheus_listen {
        Some(addr) => match bind(addr, "the metrics").await {
            Ok(l) => Some(l),
            Err(code) => return code,
        },
        None => None,
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let shutdown = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    tracing::info!(
        grpc = %grpc.local_addr().map_or(settings.listen, |a| a),
        http = %web.local_addr().map_or(settings.http_listen, |a| a),
        config = %settings.config_dir.display(),
        "serving envoy.service.ratelimit.v3.RateLimitService, /json, /healthcheck and {}",
        settings.metrics_path
    );
    tokio::spawn(http::serve(web, http::router(service.clone(), &settings.metrics_path), shutdown()));
    if let Some(listener) = prometheus {
        tokio::spawn(http::serve(
            listener,
            http::metrics_router(service.clone(), &settings.metrics_path),
            shutdown(),
        ));
    }
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = stop.send(true);
    });
    match server::serve(grpc, service, shutdown()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(1)
        }
    }
}
