//! Outages as a user meets them: the breaker's background probe ends an outage as soon as Redis
//! answers again (after a pause, a kill and restart on the same port, a Sentinel failover), without
//! waiting for the cool-down (60 s here, longer than any wait of these tests: only the probe can end
//! it); each outage logged once when it starts and once when it ends, and counted; an unknown or
//! refused command is a configuration fault, not an outage; a Closed outage denial names the limit
//! that could not be checked. Behaviour only: no assertion on durations.

mod support;

use http::{Request, StatusCode};
use http_body_util::BodyExt;
use redis_ratelimit_client::http::{PeerAddr, RateLimitLayer, MISCONFIGURED, UNAVAILABLE};
use redis_ratelimit_client::{Backend, Decision, FailurePolicy, Limiter, Policy};
use std::convert::Infallible;
use std::time::Duration;
use support::web::{logs, prometheus, series};
use support::{closed_port, wait_until, DEADLINE};
use testkit::redis;
use testkit::sentinel::{Sentinels, SERVICE};
use testkit::{unique_key, Server};
use tower::{ServiceBuilder, ServiceExt};

/// Longer than any wait here: an outage that ends did so by the probe.
const COOLDOWN: Duration = Duration::from_secs(60);

fn builder(name: &str) -> redis_ratelimit_client::LimiterBuilder {
    support::builder(FailurePolicy::Closed).deadline(DEADLINE).breaker(2, COOLDOWN).name(name)
}

fn bucket() -> Policy {
    Policy::token_bucket(1000, 0.001).unwrap()
}

/// Checks until the breaker is open; the degraded decisions it took.
async fn until_open(limiter: &Limiter, key: &str) -> u64 {
    let mut degraded = 0;
    while !limiter.breaker_open() {
        let d = limiter.check(key, &bucket(), 1).await;
        assert!(d.degraded && !d.allowed, "{d:?}");
        degraded += 1;
    }
    degraded
}

/// Checks until Redis decides again (the probe ended the cool-down); the decision, and how many
/// degraded ones came before it.
async fn until_redis_decides(limiter: &Limiter, key: &str) -> (Decision, u64) {
    let (mut decided, mut degraded) = (None, 0);
    wait_until("Redis to decide again, before the cool-down ends", async || {
        let d = limiter.check(key, &bucket(), 1).await;
        degraded += u64::from(d.degraded);
        decided = Some(d).filter(|d| !d.degraded);
        if decided.is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        decided.is_some()
    })
    .await;
    (decided.unwrap(), degraded)
}

/// The log lines of limiter `name` that contain `text`.
fn lines(name: &str, text: &str) -> Vec<String> {
    logs().lines_with(&format!("limiter={name}")).into_iter().filter(|l| l.contains(text)).collect()
}

#[tokio::test]
async fn a_pause_ends_and_the_next_decision_is_redis_logged_and_counted_as_one_outage() {
    let _ = (logs(), prometheus());
    let Some(server) = Server::builder().own() else { return };
    let name = "paused";
    let limiter = builder(name).connect(server.url()).unwrap();
    let key = unique_key("rl:paused");
    assert_eq!(limiter.engine(), "not yet known", "no call decided yet");
    assert!(!limiter.check(&key, &bucket(), 1).await.degraded);
    let engine = if testkit::lua_engine() { "the Lua library through FCALL" } else { "the ratelimit module" };
    assert_eq!(limiter.engine(), engine);
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(60_000).arg("WRITE").query(&mut server.conn()).unwrap();
    let mut degraded = until_open(&limiter, &key).await;
    for _ in 0..5 {
        assert!(limiter.check(&key, &bucket(), 1).await.degraded, "the breaker answers");
        degraded += 1;
    }
    assert_eq!(lines(name, "Redis outage:").len(), 1, "one line when it starts");
    assert!(lines(name, "Redis outage over").is_empty());
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut server.conn()).unwrap();
    let (back, more) = until_redis_decides(&limiter, &key).await;
    degraded += more;
    assert!(back.allowed && !limiter.breaker_open(), "{back:?}");

    let start = lines(name, "Redis outage:");
    assert_eq!(start.len(), 1, "{start:?}");
    assert!(start[0].contains("policy=Closed") && start[0].contains("deadline"), "what failed: {start:?}");
    assert!(start[0].contains(&format!("engine=\"{engine}\"")), "the engine it began on: {start:?}");
    let end = lines(name, "Redis outage over");
    assert_eq!(end.len(), 1, "one line when it ends: {end:?}");
    assert!(end[0].contains(&format!("decisions={degraded} allowed=0")), "{end:?}");
    assert!(end[0].contains("lasted=") && end[0].contains(&format!("engine=\"{engine}\"")), "{end:?}");
    assert_eq!(series(&format!(r#"ratelimit_outages_total{{limiter="{name}"}}"#)), 1.0);
    assert_eq!(
        series(&format!(r#"ratelimit_outage_decisions_total{{limiter="{name}",allowed="false"}}"#)),
        degraded as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_and_restarted_server_decides_again_without_waiting_for_the_cool_down() {
    let Some(mut server) = support::Killable::start() else { return };
    let limiter = builder("restarted").connect(&server.url()).unwrap();
    let key = unique_key("rl:restarted");
    assert!(!limiter.check(&key, &bucket(), 1).await.degraded);
    server.kill();
    until_open(&limiter, &key).await;
    server.start_again();
    let (back, _) = until_redis_decides(&limiter, &key).await;
    assert!(back.allowed && !limiter.breaker_open(), "{back:?}");
    assert_eq!(back.remaining, 1000 - 1, "a fresh server: this check, charged once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_is_followed_without_waiting_for_the_cool_down() {
    let Some(mut topology) = Sentinels::start() else { return };
    let urls = topology.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let limiter = support::builder(FailurePolicy::Closed)
        .deadline(Duration::from_millis(200))
        .breaker(2, COOLDOWN)
        .connect_sentinel(&urls, SERVICE)
        .unwrap();
    let key = unique_key("rl:failover");
    assert!(!limiter.check(&key, &bucket(), 1).await.degraded);
    let old = topology.primary_port().expect("a primary");
    topology.node(old).unwrap().kill();
    until_open(&limiter, &key).await;
    let new = tokio::task::block_in_place(|| topology.wait_failover(old, Duration::from_secs(30)));
    assert!(new.is_some_and(|p| p != old), "the sentinels promote the replica");
    let (back, _) = until_redis_decides(&limiter, &key).await;
    assert!(back.allowed && !limiter.breaker_open(), "{back:?}");
}

/// A layer on `limiter` with a global rate limit and an `export` route limited by concurrency only.
async fn denial(limiter: Limiter, path: &str) -> (StatusCode, serde_json::Value) {
    let layer = RateLimitLayer::new(limiter)
        .global(Policy::token_bucket(100, 1.0).unwrap())
        .concurrency("export", "/export", Policy::concurrency(2, Duration::from_secs(10)).unwrap())
        .build()
        .unwrap();
    let service = ServiceBuilder::new()
        .layer(layer)
        .service_fn(|_: Request<String>| async { Ok::<_, Infallible>(http::Response::new(String::new())) });
    let mut request = Request::get(path).body(String::new()).unwrap();
    request.extensions_mut().insert(PeerAddr("192.0.2.7:4000".parse().unwrap()));
    let response = service.oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn a_closed_outage_denial_names_the_routes_concurrency_limit() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let (status, body) = denial(builder("down").connect(&url).unwrap(), "/export/1").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["type"], UNAVAILABLE);
    assert_eq!(body["limit"], "export", "{body}");
    assert!(body["detail"].as_str().unwrap().starts_with("concurrency limit 'export' could not be checked"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_the_module_is_a_configuration_fault_not_an_outage() {
    if testkit::skip_module_only("a server without the module as a configuration fault") {
        return;
    }
    let _ = (logs(), prometheus());
    let Some(plain) = support::Killable::start_plain() else { return };
    let name = "nomodule";
    // The module asked for (`Auto` takes the Lua library on such a server: tests/engines.rs).
    let limiter = support::builder(FailurePolicy::Closed)
        .backend(Backend::Module)
        .breaker(3, COOLDOWN)
        .name(name)
        .connect(&plain.url())
        .unwrap();
    let d = limiter.check("rl:k", &bucket(), 1).await;
    assert!(d.degraded && !d.allowed, "{d:?}");
    assert!(limiter.misconfigured());
    for _ in 0..3 {
        assert!(limiter.check("rl:k", &bucket(), 1).await.degraded);
    }
    // Redis answers: the breaker (threshold 3) is left alone, and nothing was short-circuited.
    assert!(!limiter.breaker_open(), "a configuration fault is no outage");
    assert_eq!(limiter.counts().short_circuited, 0);
    let fault = lines(name, "misconfigured");
    assert_eq!(fault.len(), 1, "{fault:?}");
    assert!(fault[0].contains("--loadmodule") && fault[0].contains("RL.TOKEN"), "what to fix: {fault:?}");
    let outage = [lines(name, "Redis outage:"), lines(name, "outage over")].concat();
    assert!(outage.is_empty(), "not an outage: {outage:?}");
    // Each call answered with the fault is counted; the log line says it once.
    assert_eq!(series(&format!(r#"ratelimit_configuration_faults_total{{limiter="{name}"}}"#)), 4.0);
    assert_eq!(series(&format!(r#"ratelimit_outages_total{{limiter="{name}"}}"#)), 0.0);

    let (status, body) = denial(limiter, "/export/1").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["type"], MISCONFIGURED, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("misconfigured"), "{body}");
    assert!(!body.to_string().contains("unavailable"), "does not claim an outage: {body}");
}

#[tokio::test]
async fn a_refused_command_is_a_configuration_fault_that_says_which_grant_is_missing() {
    let _ = logs();
    let Some(server) = Server::builder().own() else { return };
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "noperm", "on", ">secret", "~rl:*", "+@connection"][..])
        .query(&mut server.conn())
        .unwrap();
    let url = format!("redis://noperm:secret@127.0.0.1:{}/", server.port);
    let name = "noperm";
    let limiter =
        support::builder(FailurePolicy::Open).breaker(3, COOLDOWN).name(name).connect(&url).unwrap();
    let d = limiter.check("rl:k", &bucket(), 1).await;
    assert!(d.degraded && d.allowed, "open: allowed, degraded: {d:?}");
    assert!(!limiter.breaker_open() && limiter.misconfigured());
    let fault = lines(name, "misconfigured");
    assert_eq!(fault.len(), 1, "{fault:?}");
    assert!(fault[0].contains("+@ratelimit"), "what to fix: {fault:?}");
}
