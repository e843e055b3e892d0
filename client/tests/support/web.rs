//! For the HTTP layer's tests: an axum app on a real loopback socket, an authentication layer that
//! names the principal and tenant from headers, the process's Prometheus recorder and log lines.

use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redis_ratelimit_client::http::{Principal, Tenant};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

/// Serves `app` on a free loopback port, with ConnectInfo; returns its base URL.
pub async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
    });
    format!("http://{addr}")
}

/// The application's authentication, as a test stands it in: `x-user` names the principal and
/// `x-tenant` the tenant. Added after the rate limit layer, so it runs before it.
pub fn with_auth(app: Router) -> Router {
    app.layer(axum::middleware::from_fn(
        |mut req: axum::extract::Request, next: axum::middleware::Next| async move {
            let user = header_value(&req, "x-user");
            let tenant = header_value(&req, "x-tenant");
            if let Some(user) = user {
                req.extensions_mut().insert(Principal(user));
            }
            if let Some(tenant) = tenant {
                req.extensions_mut().insert(Tenant(tenant));
            }
            next.run(req).await
        },
    ))
}

fn header_value(req: &axum::extract::Request, name: &str) -> Option<String> {
    req.headers().get(name).and_then(|v| v.to_str().ok()).map(String::from)
}

/// A GET with extra headers.
pub async fn get(client: &reqwest::Client, url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = client.get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

pub fn header<'a>(resp: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    resp.headers().get(name).map(|v| v.to_str().unwrap())
}

/// The Prometheus recorder of this test binary, installed by the first test that asks (counters
/// recorded before it are not kept: ask before serving). Tests tell their series apart by route name.
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| PrometheusBuilder::new().install_recorder().expect("a recorder"))
}

/// One series' value from the recorder's text exposition, 0 when it is not there.
pub fn series(series: &str) -> f64 {
    let text = prometheus().render();
    let values: HashMap<&str, f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name, value.parse().ok()?))
        })
        .collect();
    values.get(series).copied().unwrap_or(0.0)
}

/// The log lines of this test binary, from a process-wide subscriber installed by the first test
/// that asks: tests tell their lines apart by route name. (A per-test `set_default` subscriber misses
/// lines when another thread registers the same call site at the same time.)
pub fn logs() -> &'static Logs {
    static LOGS: OnceLock<Logs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt().with_writer(logs.clone()).with_ansi(false).finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
        logs
    })
}

#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

impl Logs {
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        text.lines().filter(|l| l.contains(needle)).map(String::from).collect()
    }
}
