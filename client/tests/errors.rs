//! Errors are not outages (docs/errors.md), against real servers: a key holding another limiter's
//! state is a conflict (the failure policy decides, logged once per key, counted, the breaker left
//! alone); the caller's mistakes (a key twice, an empty key, keys in several slots of a cluster) are
//! refused and never degraded; a cold stock cluster under many callers loads the library once per
//! node and decides exactly; a limit whose kind changes in a deploy starts afresh on its own key.

mod support;

use redis_ratelimit_client::http::RateLimitLayer;
use redis_ratelimit_client::{CallError, FailurePolicy, Limit, Policy, ReplyClass};
use std::time::Duration;
use testkit::cluster::Cluster;
use testkit::{unique_key, Server};

fn bucket() -> Policy {
    Policy::token_bucket(10, 1.0).unwrap()
}

fn window() -> Policy {
    Policy::fixed_window(10, Duration::from_secs(60)).unwrap()
}

#[tokio::test]
async fn a_key_holding_another_kind_is_a_conflict_decided_by_the_policy_and_not_an_outage() {
    let server = Server::builder().single();
    for failure in [FailurePolicy::Open, FailurePolicy::Closed] {
        let limiter =
            support::builder(failure).breaker(1, Duration::from_secs(60)).connect(server.url()).unwrap();
        let key = unique_key("rl:conflict");
        assert!(limiter.check(&key, &bucket(), 1).await.allowed);
        for _ in 0..3 {
            let d = limiter.check(&key, &window(), 1).await;
            assert!(d.degraded, "{d:?}");
            assert_eq!(d.allowed, failure == FailurePolicy::Open, "{d:?}");
        }
        let strict = limiter.check_strict(&[Limit::new(&key, &window(), 1)]).await.unwrap_err();
        assert_eq!(ReplyClass::of(&strict), ReplyClass::Conflict, "{strict}");
        // Redis answered: the breaker (threshold 1) stays closed, and other keys are decided by Redis.
        assert!(!limiter.breaker_open() && !limiter.misconfigured());
        let other = limiter.check(&unique_key("rl:conflict"), &window(), 1).await;
        assert!(other.allowed && !other.degraded, "{other:?}");
        assert_eq!(limiter.counts().conflicts, 4);
    }
}

#[tokio::test]
async fn the_callers_mistakes_are_refused_before_sending_and_never_degraded() {
    let server = Server::builder().single();
    let limiter = support::builder(FailurePolicy::Open)
        .breaker(1, Duration::from_secs(60))
        .connect(server.url())
        .unwrap();
    let (b, w) = (bucket(), window());
    let key = unique_key("rl:usage");
    let cases: [(Vec<Limit<'_>>, &str); 3] = [
        (vec![Limit::new("", &b, 1)], "ERR invalid key: must be a non-empty string"),
        (vec![Limit::new(&key, &b, 1), Limit::new(&key, &b, 1)], "ERR the same key appears more than once"),
        (vec![Limit::new(&key, &b, 1), Limit::new(&key, &w, 1)], "ERR the same key appears more than once"),
    ];
    for (limits, text) in cases {
        let d = limiter.check_all(&limits).await;
        assert!(!d.allowed && !d.degraded && d.retry_after.is_none(), "refused, whatever the policy: {d:?}");
        match limiter.check_strict(&limits).await {
            Err(CallError::Usage(got)) => assert_eq!(got, text),
            other => panic!("{other:?}"),
        }
    }
    assert!(!limiter.breaker_open());
    assert_eq!(limiter.counts().usage_errors, 6, "every refusal counted, check_strict's too");
    assert_eq!(limiter.counts().degraded, 0);
    // Nothing was written: the key was never sent.
    let exists: bool = testkit::redis::cmd("EXISTS").arg(&key).query(&mut server.conn()).unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn keys_in_several_slots_of_a_cluster_are_the_callers_mistake() {
    let Some(cluster) = Cluster::start() else { return };
    let nodes: Vec<&str> = cluster.nodes.iter().map(|n| n.url()).collect();
    let limiter = support::builder(FailurePolicy::Open).connect_cluster(&nodes).await.unwrap();
    let b = bucket();
    // Two keys whose slots differ (no hash tag).
    let (a, z) = (unique_key("rl:slot-a"), unique_key("rl:slot-z"));
    let d = limiter.check_all(&[Limit::new(&a, &b, 1), Limit::new(&z, &b, 1)]).await;
    assert!(!d.allowed && !d.degraded, "refused, not allowed by fail open: {d:?}");
    let strict = limiter.check_strict(&[Limit::new(&a, &b, 1), Limit::new(&z, &b, 1)]).await.unwrap_err();
    assert_eq!(ReplyClass::of(&strict), ReplyClass::Usage, "{strict}");
    // Refused before sending, with Redis' own text: no node ran a limiter's command.
    match &strict {
        CallError::Usage(text) => assert!(text.starts_with("CROSSSLOT "), "{text}"),
        other => panic!("not refused before sending: {other:?}"),
    }
    let sent: u64 = cluster.nodes.iter().map(|n| support::calls(n, "rl.token")).sum();
    assert_eq!(sent, 0, "nothing sent");
    assert_eq!(limiter.counts().usage_errors, 2);
}

#[tokio::test]
async fn a_cold_stock_cluster_under_many_callers_loads_once_per_node_and_decides_exactly() {
    let Some(cluster) = Cluster::start_stock() else { return };
    let nodes: Vec<&str> = cluster.nodes.iter().map(|n| n.url()).collect();
    let limiter = support::builder(FailurePolicy::Closed).connect_cluster(&nodes).await.unwrap();
    let policy = Policy::token_bucket(5, 0.001).unwrap();
    let keys: Vec<String> = (0..20).map(|i| unique_key(&format!("rl:cold{i}"))).collect();
    let mut tasks = vec![];
    for caller in 0..200 {
        let (limiter, key, policy) = (limiter.clone(), keys[caller % keys.len()].clone(), policy.clone());
        tasks.push(tokio::spawn(async move { limiter.check(&key, &policy, 1).await }));
    }
    let mut allowed = 0;
    for task in tasks {
        let d = task.await.unwrap();
        assert!(!d.degraded, "{d:?}");
        allowed += u64::from(d.allowed);
    }
    assert_eq!(allowed, 5 * keys.len() as u64, "each key's 5 tokens, exactly");
    for primary in cluster.primaries() {
        let loads = support::calls(primary, "function|load");
        assert!(loads <= 1, "at most one FUNCTION LOAD per node: {loads} on {}", primary.port);
    }
}

#[tokio::test]
async fn a_route_whose_kind_changes_starts_afresh_and_one_whose_numbers_change_carries_on() {
    use support::web::{get, header, serve};
    let server = Server::builder().single();
    let prefix = unique_key("rl:deploy");
    let app = |policy: Policy| {
        let limiter = support::builder(FailurePolicy::Closed).connect(server.url()).unwrap();
        let layer = RateLimitLayer::new(limiter).key_prefix(&prefix).route("api", "/", policy);
        axum::Router::new().route("/", axum::routing::get(|| async { "ok" })).layer(layer)
    };
    let client = reqwest::Client::new();
    let before = serve(app(Policy::token_bucket(3, 0.001).unwrap())).await;
    for _ in 0..2 {
        assert_eq!(get(&client, &format!("{before}/"), &[]).await.status(), 200);
    }
    // The next deploy: the same route as a fixed window. It must not meet the bucket's state.
    let after = serve(app(Policy::fixed_window(3, Duration::from_secs(60)).unwrap())).await;
    let response = get(&client, &format!("{after}/"), &[]).await;
    assert_eq!(response.status(), 200, "{response:?}");
    assert_eq!(header(&response, "x-ratelimit-degraded"), None, "{response:?}");
    // Another deploy changes the window's numbers only: it counts on from the same key.
    let bigger = serve(app(Policy::fixed_window(4, Duration::from_secs(60)).unwrap())).await;
    let response = get(&client, &format!("{bigger}/"), &[]).await;
    assert_eq!(header(&response, "ratelimit-remaining"), Some("2"), "2 of 4 used: {response:?}");
}

#[tokio::test]
async fn a_key_outside_the_users_patterns_is_refused_without_moving_the_engine() {
    if testkit::skip_module_only("the module's command for a user without FCALL") {
        return;
    }
    let Some(server) = Server::builder().own() else { return };
    let () = testkit::redis::cmd("ACL")
        .arg(&["SETUSER", "app", "on", ">secret", "~rl:*", "+@connection", "+rl.token"][..])
        .query(&mut server.conn())
        .unwrap();
    let url = format!("redis://app:secret@127.0.0.1:{}/", server.port);
    let limiter = support::builder(FailurePolicy::Closed).connect(&url).unwrap();
    // NOPERM for the key, not for the command: misconfigured for this call, and the engine stays unknown.
    let d = limiter.check("other:key", &bucket(), 1).await;
    assert!(d.degraded && !d.allowed, "{d:?}");
    let strict = limiter.check_strict(&[Limit::new("other:key", &bucket(), 1)]).await.unwrap_err();
    assert_eq!(ReplyClass::of(&strict), ReplyClass::Misconfigured, "{strict}");
    // A key the user may use is decided by the module (before, the engine had moved on to FCALL and
    // EVALSHA, refused to this user, and every call was degraded).
    let d = limiter.check(&unique_key("rl:acl"), &bucket(), 1).await;
    assert!(d.allowed && !d.degraded, "{d:?}");
}
