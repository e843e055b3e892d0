//! Beside gRPC, over real HTTP: envoyproxy/ratelimit's `/json` and `/healthcheck`, the Prometheus page
//! with per-descriptor counts under its stat names, and the binary's JSON logs. One module server for
//! all of it.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{domain, sample, Rls};
use testkit::Server;

const CONFIG: &str = r#"
domain: {D}
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
    descriptors:
      - key: path
        value: /login
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: dry
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
"#;

async fn post(http: &reqwest::Client, rls: &Rls, body: Value) -> (u16, Value) {
    let r = http.post(format!("{}/json", rls.http)).body(body.to_string()).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn page(http: &reqwest::Client, rls: &Rls) -> String {
    let r = http.get(format!("{}/metrics", rls.http)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
    r.text().await.unwrap()
}

fn request(d: &str, descriptors: &[&[(&str, &str)]]) -> Value {
    json!({
        "domain": d,
        "descriptors": descriptors.iter().map(|entries| json!({
            "entries": entries.iter().map(|(k, v)| json!({"key": k, "value": v})).collect::<Vec<_>>()
        })).collect::<Vec<_>>(),
    })
}

#[tokio::test]
async fn json_healthcheck_metrics_and_logs() {
    let Some(mut server) = Server::builder().own() else { return };
    let d = domain("http");
    let mut rls =
        Rls::start(server.url(), &CONFIG.replace("{D}", &d), &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")])
            .await;
    let http = reqwest::Client::new();
    let ip: &[(&str, &str)] = &[("remote_address", "10.0.0.1")];

    // /json: protojson's names, enums by name, durations as text; 200 then 429 when over.
    let (status, body) = post(&http, &rls, request(&d, &[ip])).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["overallCode"], "OK");
    let s = &body["statuses"][0];
    assert_eq!((&s["code"], &s["limitRemaining"]), (&json!("OK"), &json!(2)));
    assert_eq!(s["currentLimit"], json!({"requestsPerUnit": 3, "unit": "MINUTE"}));
    let reset = s["durationUntilReset"].as_str().unwrap();
    assert!(reset.ends_with('s') && reset.trim_end_matches('s').parse::<f64>().unwrap() <= 60.0, "{reset}");
    assert_eq!(body["responseHeadersToAdd"][0], json!({"key": "RateLimit-Limit", "value": "3"}));
    // The proto's own field names are read too, and the request's cost.
    let mut two = request(&d, &[ip]);
    two["hits_addend"] = json!(2);
    let (status, body) = post(&http, &rls, two).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["statuses"][0].get("limitRemaining").is_none(), "0 is left out, as protojson does: {body}");
    let (status, body) = post(&http, &rls, request(&d, &[ip])).await;
    assert_eq!(
        (status, &body["overallCode"], &body["statuses"][0]["code"]),
        (429, &json!("OVER_LIMIT"), &json!("OVER_LIMIT"))
    );
    // The same state as gRPC's.
    assert!(rls.ask(&d, &[ip], 0).await.unwrap().over());
    // Not a request: 400.
    for bad in ["{", r#"{"domain": 5}"#, r#"{"domain": "d", "unknown": 1}"#] {
        let r = http.post(format!("{}/json", rls.http)).body(bad).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{bad}");
    }
    let (status, _) = post(&http, &rls, json!({"domain": "", "descriptors": []})).await;
    assert_eq!(status, 400);

    // The metrics, in hits, under envoyproxy/ratelimit's names: 1 + 2 + 1 (JSON) + 1 (gRPC) on a limit of 3.
    let m = page(&http, &rls).await;
    let series = |stat: &str, labels: &str| {
        sample(&m, &format!("ratelimit_service_rate_limit_{stat}{{domain=\"{d}\",{labels}}}"))
    };
    let key = "key1=\"remote_address\"";
    assert_eq!(
        ["total_hits", "within_limit", "over_limit", "near_limit", "shadow_mode"].map(|s| series(s, key)),
        [5, 3, 2, 1, 0],
        "{m}"
    );
    assert_eq!(sample(&m, "ratelimit_service_config_load_success"), 1);
    assert_eq!(sample(&m, "ratelimit_service_should_rate_limit_error{err_type=\"service_error\"}"), 1);
    // A nested rule: key2; shadow mode: over the limit, answered OK, counted in shadow_mode;
    // detailed_metric: the request's value in the key.
    let login: &[(&str, &str)] = &[("remote_address", "10.0.0.2"), ("path", "/login")];
    for _ in 0..2 {
        rls.ask(&d, &[login], 0).await.unwrap();
    }
    for _ in 0..3 {
        assert!(rls.ask(&d, &[&[("dry", "x")]], 0).await.unwrap().ok());
    }
    rls.ask(&d, &[&[("user", "ann")]], 0).await.unwrap();
    // All or nothing: the tenant is not charged when the address denies, and says so.
    assert!(rls.ask(&d, &[&[("tenant", "t")], ip], 0).await.unwrap().over());
    let m = page(&http, &rls).await;
    let series = |stat: &str, labels: &str| {
        sample(&m, &format!("ratelimit_service_rate_limit_{stat}{{domain=\"{d}\",{labels}}}"))
    };
    let nested = "key1=\"remote_address\",key2=\"path_/login\"";
    assert_eq!((series("total_hits", nested), series("over_limit", nested)), (2, 1), "{m}");
    assert_eq!(
        ["total_hits", "over_limit", "shadow_mode", "within_limit"].map(|s| series(s, "key1=\"dry\"")),
        [3, 2, 2, 1]
    );
    assert_eq!(series("total_hits", "key1=\"user_ann\""), 1, "{m}");
    assert_eq!((series("total_hits", "key1=\"tenant\""), series("within_limit", "key1=\"tenant\"")), (1, 0));

    // A reload and a refused file: counted.
    rls.write_config(&CONFIG.replace("{D}", &d).replace("requests_per_unit: 10", "requests_per_unit: 11"));
    wait(|| async { sample(&page(&http, &rls).await, "ratelimit_service_config_load_success") == 2 }).await;
    rls.write_config("domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n");
    wait(|| async { sample(&page(&http, &rls).await, "ratelimit_service_config_load_error") == 1 }).await;

    // /healthcheck: OK while a configuration is loaded and Redis answers.
    let health = |rls: &Rls| {
        let url = format!("{}/healthcheck", rls.http);
        let http = http.clone();
        async move {
            let r = http.get(url).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    assert_eq!(health(&rls).await, (200, "OK".to_string()));
    // No domain configured: not healthy.
    let empty = Rls::start(server.url(), &CONFIG.replace("{D}", &domain("empty")), &[]).await;
    std::fs::remove_file(empty.dir.join("config/config.yaml")).unwrap();
    wait(|| async { health(&empty).await.0 == 500 }).await;
    assert!(health(&empty).await.1.contains("no configuration"));
    // Redis stopped: not healthy, and the metrics say why.
    server.stop();
    let (status, reason) = health(&rls).await;
    assert_eq!(status, 500, "{reason}");
    assert!(rls.ask(&d, &[ip], 0).await.is_err(), "RLS_FAILURE_MODE=error: UNAVAILABLE");
    let (status, _) = post(&http, &rls, request(&d, &[ip])).await;
    assert_eq!(status, 503);
    let m = page(&http, &rls).await;
    assert!(sample(&m, "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"}") >= 2, "{m}");
    assert_eq!(sample(&m, "ratelimit_redis_outages_total"), 1, "{m}");
    server.start_again();
    wait(|| async { health(&rls).await.0 == 200 }).await;

    binary_logs_json(&server).await;
}

/// `detailed_metric` keys come from the request's values: past the cap of distinct keys a new key's
/// counts go to one overflow series (`domain="",key1="overflow"`) and are counted, so a caller sending
/// distinct values grows neither the page nor the memory without bound. Nothing is lost: the totals
/// over every series are the hits sent.
#[tokio::test]
async fn detailed_metric_series_are_bounded() {
    let Some(server) = Server::builder().own() else { return };
    let d = domain("bounded");
    let mut rls = Rls::start(server.url(), &CONFIG.replace("{D}", &d), &[]).await;
    let http = reqwest::Client::new();
    let cap = redis_ratelimit_rls::metrics::DEFAULT_MAX_KEYS; // RLS_MAX_METRIC_KEYS unset
                                                              // A configured key first: it takes a place under the cap like any other. Then distinct users, 500
                                                              // more than the cap; then a user that has its series, and one past the cap, with costs.
    rls.ask(&d, &[&[("tenant", "t")]], 0).await.unwrap();
    let users = cap + 500;
    for i in 0..users {
        assert!(rls.ask(&d, &[&[("user", &format!("u{i}"))]], 0).await.unwrap().ok());
    }
    rls.ask(&d, &[&[("user", "u0")]], 3).await.unwrap();
    rls.ask(&d, &[&[("user", &format!("u{}", users - 1))]], 2).await.unwrap();
    let m = page(&http, &rls).await;
    let family = |stat: &str| -> Vec<(String, u64)> {
        let prefix = format!("ratelimit_service_rate_limit_{stat}{{");
        m.lines()
            .filter(|l| l.starts_with(&prefix))
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').unwrap();
                (series.to_string(), value.parse().unwrap())
            })
            .collect()
    };
    let overflow = |stat: &str| {
        sample(&m, &format!("ratelimit_service_rate_limit_{stat}{{domain=\"\",key1=\"overflow\"}}"))
    };
    for stat in ["total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"] {
        let series = family(stat);
        assert!(series.len() <= cap + 1, "{stat}: {} series", series.len());
    }
    // The tenant and 999 users have their own series; the other 501 users are the overflow's: 501 hits
    // and 2 more, in 502 descriptors.
    let total = family("total_hits");
    assert_eq!(total.len(), cap + 1, "every place taken, and the overflow");
    assert_eq!(series_of(&m, &d, "key1=\"tenant\""), 1);
    assert_eq!(series_of(&m, &d, "key1=\"user_u0\""), 4);
    assert_eq!(series_of(&m, &d, "key1=\"user_u998\""), 1);
    assert_eq!(series_of(&m, &d, "key1=\"user_u999\""), 0, "past the cap: no series of its own");
    assert_eq!(
        (overflow("total_hits"), overflow("within_limit"), overflow("over_limit")),
        (503, 503, 0),
        "{m}"
    );
    assert_eq!(sample(&m, "ratelimit_service_metric_overflow_total"), 502);
    // The totals are the hits sent: 1 + 1,500 + 3 + 2.
    assert_eq!(total.iter().map(|(_, v)| v).sum::<u64>(), 1 + users as u64 + 3 + 2);
    assert_eq!(family("within_limit").iter().map(|(_, v)| v).sum::<u64>(), 1 + users as u64 + 3 + 2);
}

/// `total_hits` of `domain="d",<labels>`.
fn series_of(page: &str, d: &str, labels: &str) -> u64 {
    sample(page, &format!("ratelimit_service_rate_limit_total_hits{{domain=\"{d}\",{labels}}}"))
}

async fn wait<F: std::future::Future<Output = bool>>(mut done: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done().await {
        assert!(Instant::now() < deadline, "not reached in 10 s");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The binary, killed when the test ends however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The binary as deployed: its environment, its three ports, `LOG_FORMAT=json`: every line on its
/// output one JSON object, a request logged with its domain at debug level.
async fn binary_logs_json(server: &Server) {
    let d = domain("logs");
    let dir = std::env::temp_dir().join(format!("rls-bin-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("config")).unwrap();
    std::fs::write(dir.join("config/c.yaml"), CONFIG.replace("{D}", &d)).unwrap();
    let (grpc, port, prom) = (free_port(), free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_redis-ratelimit-rls"))
        .env_clear()
        .envs([
            ("REDIS_URL", server.url().to_string()),
            ("RUNTIME_ROOT", dir.display().to_string()),
            ("GRPC_HOST", "127.0.0.1".into()),
            ("GRPC_PORT", grpc.to_string()),
            ("HOST", "127.0.0.1".into()),
            ("PORT", port.to_string()),
            ("PROMETHEUS_ADDR", format!("127.0.0.1:{prom}")),
            ("LOG_FORMAT", "json".into()),
            ("LOG_LEVEL", "debug".into()),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut running = Running(child);
    let lines = BufReader::new(running.0.stdout.take().unwrap()).lines();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait(|| {
        let http = http.clone();
        let url = format!("{base}/healthcheck");
        async move { matches!(http.get(url).send().await, Ok(r) if r.status() == 200) }
    })
    .await;
    let r = http
        .post(format!("{base}/json"))
        .body(request(&d, &[&[("tenant", "j")]]).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let m = http.get(format!("http://127.0.0.1:{prom}/metrics")).send().await.unwrap().text().await.unwrap();
    assert_eq!(
        sample(&m, &format!("ratelimit_service_rate_limit_total_hits{{domain=\"{d}\",key1=\"tenant\"}}")),
        1
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let line = tokio::time::timeout_at(deadline.into(), rx.recv()).await.unwrap().expect("the log ended");
        let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(event["level"].is_string() && event["timestamp"].is_string(), "{line}");
        if event["message"] == "ShouldRateLimit" {
            assert_eq!(
                (&event["level"], &event["domain"], &event["overall"]),
                (&json!("DEBUG"), &json!(d), &json!("Ok"))
            );
            break;
        }
    }
}

/// A descriptor's key that holds something else (another program's string) is Redis answering, not an
/// outage (docs/errors.md): the failure mode answers for that descriptor, but no outage and no Redis
/// error is counted, the service stays healthy, and other descriptors are decided by Redis.
#[tokio::test]
async fn a_conflicting_key_is_no_outage() {
    let Some(server) = Server::builder().own() else { return };
    let d = domain("conflict");
    let mut rls = Rls::start(server.url(), &CONFIG.replace("{D}", &d), &[("RLS_FAILURE_MODE", "ok")]).await;
    let http = reqwest::Client::new();
    let ip: &[(&str, &str)] = &[("remote_address", "10.0.0.9")];
    assert!(!rls.ask(&d, &[ip], 0).await.unwrap().over());
    let keys: Vec<String> = testkit::redis::cmd("KEYS").arg("*").query(&mut server.conn()).unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let _: () = testkit::redis::cmd("SET").arg(&keys[0]).arg("x").query(&mut server.conn()).unwrap();
    for _ in 0..3 {
        assert!(!rls.ask(&d, &[ip], 0).await.unwrap().over(), "RLS_FAILURE_MODE=ok decides it");
    }
    let tenant: &[(&str, &str)] = &[("tenant", "t")];
    assert!(!rls.ask(&d, &[tenant], 0).await.unwrap().over());
    let m = page(&http, &rls).await;
    assert_eq!(sample(&m, "ratelimit_redis_outages_total"), 0, "{m}");
    assert_eq!(sample(&m, "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"}"), 0, "{m}");
    assert_eq!(sample(&m, "ratelimit_redis_degraded_decisions_total"), 3, "{m}");
    let r = http.get(format!("{}/healthcheck", rls.http)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
}
