//! ShouldRateLimit over a real gRPC connection, on a redis-server with the module and on a stock one
//! (the Lua library), with envoyproxy/ratelimit's configuration.

mod support;

use redis_ratelimit_rls::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use std::time::{Duration, Instant};
use support::{descriptor, domain, Rls};
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
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: route
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: dry
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: plan
    value: basic
    rate_limit: {unit: minute, requests_per_unit: 2, name: basic}
  - key: plan
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 10, replaces: [{name: basic}]}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 4}
  - key: slide
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_log}
  - key: counter
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window}
"#;

async fn service(server: &Server, env: &[(&str, &str)]) -> (Rls, String) {
    let d = domain("grpc");
    (Rls::start(server.url(), &CONFIG.replace("{D}", &d), env).await, d)
}

/// Every configuration feature through the service: matching, hits_addend, unlimited, a blocked
/// descriptor, shadow mode, replaces, each algorithm, the headers.
async fn features(server: &Server) {
    let (mut rls, d) = service(server, &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")]).await;
    let ip: &[(&str, &str)] = &[("remote_address", "10.0.0.1")];
    for remaining in [2, 1, 0] {
        let r = rls.ask(&d, &[ip], 0).await.unwrap();
        assert!(r.ok(), "{r:?}");
        assert_eq!((r.status(0), r.limit(0)), ((false, remaining), Some(3)));
    }
    let r = rls.ask(&d, &[ip], 0).await.unwrap();
    assert!(r.over() && r.status(0) == (true, 0));
    let headers = r.headers();
    assert_eq!(headers[0], ("RateLimit-Limit".to_string(), "3".to_string()));
    assert_eq!(headers[1], ("RateLimit-Remaining".to_string(), "0".to_string()));
    let reset: u64 = headers[2].1.parse().unwrap();
    assert!((1..=60).contains(&reset), "{headers:?}");
    // Another value of the key: its own counter. The nested entry is the more specific rule.
    assert!(rls.ask(&d, &[&[("remote_address", "10.0.0.2")]], 0).await.unwrap().ok());
    let login: &[(&str, &str)] = &[("remote_address", "10.0.0.2"), ("path", "/login")];
    assert_eq!(rls.ask(&d, &[login], 0).await.unwrap().limit(0), Some(1));
    assert!(rls.ask(&d, &[login], 0).await.unwrap().over());
    // A descriptor that matches nothing: OK, no limit.
    let r = rls.ask(&d, &[&[("unknown", "x")]], 0).await.unwrap();
    assert!(r.ok() && r.limit(0).is_none() && r.headers().is_empty());
    let r = rls.ask("no-such-domain", &[ip], 0).await.unwrap();
    assert!(r.ok() && r.limit(0).is_none());
    // hits_addend is the cost; a descriptor's own wins.
    let tenant: &[(&str, &str)] = &[("tenant", "7")];
    assert_eq!(rls.ask(&d, &[tenant], 3).await.unwrap().status(0), (false, 2));
    assert!(rls.ask(&d, &[tenant], 3).await.unwrap().over(), "3 more do not fit in 2");
    let mut own = descriptor(tenant);
    own.hits_addend = Some(2);
    let request = support_request(&d, vec![own], 9);
    assert_eq!(rls.send(request).await.unwrap().status(0), (false, 0));
    // Envoy's own limit for a descriptor overrides the configuration's (a fixed window).
    let mut overridden = descriptor(&[("tenant", "override")]);
    overridden.limit = Some(RateLimitOverride { requests_per_unit: 1, unit: 2 });
    let r = rls.send(support_request(&d, vec![overridden.clone()], 0)).await.unwrap();
    assert_eq!((r.ok(), r.limit(0)), (true, Some(1)));
    assert!(rls.send(support_request(&d, vec![overridden], 0)).await.unwrap().over());
    // Wildcards.
    assert_eq!(rls.ask(&d, &[&[("route", "/api/items")]], 0).await.unwrap().limit(0), Some(2));
    assert!(rls.ask(&d, &[&[("route", "/apx")]], 0).await.unwrap().limit(0).is_none());
    // Unlimited and blocked.
    let r = rls.ask(&d, &[&[("free", "x")]], 0).await.unwrap();
    assert_eq!((r.ok(), r.status(0)), (true, (false, u32::MAX)));
    assert!(rls.ask(&d, &[&[("blocked", "x")]], 0).await.unwrap().over());
    // Shadow mode: counted, never over the limit.
    for _ in 0..3 {
        let r = rls.ask(&d, &[&[("dry", "x")]], 0).await.unwrap();
        assert!(r.ok(), "{r:?}");
    }
    assert_eq!(rls.ask(&d, &[&[("dry", "x")]], 0).await.unwrap().status(0), (false, 0), "counted");
    // Replaces: with gold in the request, basic's limit does not apply.
    for _ in 0..4 {
        let r = rls.ask(&d, &[&[("plan", "basic")], &[("plan", "gold")]], 0).await.unwrap();
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.limit(0), None);
    }
    assert!(rls.ask(&d, &[&[("plan", "basic")]], 0).await.unwrap().ok());
    assert!(rls.ask(&d, &[&[("plan", "basic")]], 0).await.unwrap().ok());
    assert!(rls.ask(&d, &[&[("plan", "basic")]], 0).await.unwrap().over());
    // The extension's algorithms: a bucket's burst, a sliding log, a sliding window counter.
    for _ in 0..4 {
        assert!(rls.ask(&d, &[&[("bucket", "b")]], 0).await.unwrap().ok());
    }
    assert!(rls.ask(&d, &[&[("bucket", "b")]], 0).await.unwrap().over());
    // A sliding log counts requests: a cost of 2 never fits.
    assert!(rls.ask(&d, &[&[("slide", "two")]], 2).await.unwrap().over());
    for key in ["slide", "counter"] {
        assert!(rls.ask(&d, &[&[(key, "s")]], 0).await.unwrap().ok());
        assert!(rls.ask(&d, &[&[(key, "s")]], 0).await.unwrap().ok());
        assert!(rls.ask(&d, &[&[(key, "s")]], 0).await.unwrap().over(), "{key}");
    }
    // Envoy's own refusals.
    assert_eq!(rls.ask("", &[ip], 0).await.unwrap_err().code(), tonic::Code::InvalidArgument);
    assert_eq!(rls.ask(&d, &[], 0).await.unwrap_err().code(), tonic::Code::InvalidArgument);
}

fn support_request(
    domain: &str,
    descriptors: Vec<
        redis_ratelimit_rls::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor,
    >,
    hits: u32,
) -> redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::RateLimitRequest {
    redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: hits,
    }
}

/// All or nothing: a request denied by one descriptor charges none; per_descriptor charges every one,
/// as envoyproxy/ratelimit does.
async fn combination(server: &Server) {
    let both: &[&[(&str, &str)]] = &[&[("remote_address", "10.9.9.9")], &[("tenant", "t")]];
    let x_headers = [
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LIMIT_LIMIT_HEADER", "X-RateLimit-Limit"),
        ("LIMIT_REMAINING_HEADER", "X-RateLimit-Remaining"),
        ("LIMIT_RESET_HEADER", "X-RateLimit-Reset"),
    ];
    let (mut rls, d) = service(server, &x_headers).await;
    // The headers describe the descriptor with the fewest left: the address (3) before the tenant (5).
    let r = rls.ask(&d, &[&[("tenant", "h")], &[("remote_address", "10.8.8.8")]], 0).await.unwrap();
    let names: Vec<(String, String)> = r.headers();
    assert_eq!(names[0], ("X-RateLimit-Limit".to_string(), "3".to_string()));
    assert_eq!(names[1], ("X-RateLimit-Remaining".to_string(), "2".to_string()));
    assert_eq!(r.limit(0), None, "the tenant is not the limiting descriptor");
    for _ in 0..5 {
        rls.ask(&d, both, 0).await.unwrap();
    }
    // 3 allowed (the address's limit), 2 denied: the tenant was charged 3 of its 5.
    assert_eq!(rls.ask(&d, &[&[("tenant", "t")]], 0).await.unwrap().status(0), (false, 1));
    let r = rls.ask(&d, both, 0).await.unwrap();
    assert!(r.over());
    // The denying descriptor carries the decision; the other is not described.
    assert_eq!((r.status(0), r.limit(1)), ((true, 0), None));

    let (mut rls, d) = service(server, &[("RLS_COMBINE", "per_descriptor")]).await;
    for _ in 0..5 {
        rls.ask(&d, both, 0).await.unwrap();
    }
    // Every request charged the tenant: 5 of 5, the next one over.
    let r = rls.ask(&d, &[&[("tenant", "t")]], 0).await.unwrap();
    assert!(r.over(), "{r:?}");
    let r = rls.ask(&d, both, 0).await.unwrap();
    assert_eq!((r.status(0), r.status(1)), ((true, 0), (true, 0)));
}

#[tokio::test]
async fn on_the_module() {
    let Some(server) = Server::builder().own() else { return };
    features(&server).await;
    combination(&server).await;
}

#[tokio::test]
async fn on_a_stock_server_through_the_library() {
    let Some(server) = Server::builder().stock().own() else { return };
    features(&server).await;
    combination(&server).await;
}

#[tokio::test]
async fn a_changed_file_is_reloaded_and_a_broken_one_keeps_the_previous() {
    let Some(server) = Server::builder().own() else { return };
    let d = domain("reload");
    let config = |n: u32| {
        format!("domain: {d}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: {n}}}\n")
    };
    let mut rls = Rls::start(server.url(), &config(1), &[]).await;
    assert_eq!(rls.ask(&d, &[&[("k", "a")]], 0).await.unwrap().limit(0), Some(1));
    rls.write_config(&config(7));
    wait_for(&mut rls, &d, Some(7)).await;
    // A broken file: refused, the previous configuration keeps serving.
    rls.write_config(&format!(
        "domain: {d}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: fortnight}}\n"
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(rls.ask(&d, &[&[("k", "b")]], 0).await.unwrap().limit(0), Some(7));
    // A new file in the directory, another domain.
    std::fs::write(
        rls.dir.join("config/other.yaml"),
        "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 9}\n",
    )
    .unwrap();
    rls.write_config(&config(4));
    wait_for(&mut rls, &d, Some(4)).await;
    assert_eq!(rls.ask("other", &[&[("k", "c")]], 0).await.unwrap().limit(0), Some(9));
}

async fn wait_for(rls: &mut Rls, d: &str, limit: Option<u32>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if rls.ask(d, &[&[("k", "probe")]], 0).await.unwrap().limit(0) == limit {
            return;
        }
        assert!(Instant::now() < deadline, "the configuration was not reloaded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Redis stopped: each failure mode answers as it says, within the deadline.
#[tokio::test]
async fn redis_stopped_each_failure_mode() {
    let Some(mut server) = Server::builder().own() else { return };
    let mut services = vec![];
    for mode in ["error", "ok", "over_limit", "local"] {
        let (rls, d) = service(&server, &[("RLS_FAILURE_MODE", mode), ("RLS_BREAKER_FAILURES", "2")]).await;
        services.push((mode, rls, d));
    }
    for (_, rls, d) in &mut services {
        assert!(rls.ask(d, &[&[("tenant", "x")]], 0).await.unwrap().ok(), "Redis up");
    }
    server.stop();
    for (mode, rls, d) in &mut services {
        // Enough calls to open the breaker: answered at once after.
        for _ in 0..4 {
            let start = Instant::now();
            let answer = rls.ask(d, &[&[("tenant", "x")]], 0).await;
            assert!(start.elapsed() < Duration::from_millis(1000), "{mode}: {:?}", start.elapsed());
            match *mode {
                "error" => assert_eq!(answer.unwrap_err().code(), tonic::Code::Unavailable),
                "ok" => assert!(answer.unwrap().ok()),
                "over_limit" => assert!(answer.unwrap().over()),
                // 5 a minute in one instance: 4 more fit after the one Redis counted.
                _ => assert!(answer.unwrap().ok()),
            }
        }
        if *mode == "local" {
            // The in-process limiter has its own count: 5 in all, then over.
            assert!(rls.ask(d, &[&[("tenant", "x")]], 0).await.unwrap().ok());
            assert!(rls.ask(d, &[&[("tenant", "x")]], 0).await.unwrap().over());
        }
    }
    server.start_again();
    for (mode, rls, d) in &mut services {
        let deadline = Instant::now() + Duration::from_secs(10);
        // Back to Redis' own count: the key's one earlier request.
        loop {
            if let Ok(r) = rls.ask(d, &[&[("tenant", "y")]], 0).await {
                if r.status(0) == (false, 4) {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "{mode}: Redis did not decide again");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
