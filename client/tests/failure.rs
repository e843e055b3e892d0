//! Failure policies against real failures: a stopped server (closed port) and a hung one (`CLIENT
//! PAUSE`), the deadline, the circuit breaker, and recovery.

mod support;

use redis_ratelimit_client::{CallError, Decision, FailurePolicy, Limit, Limiter, Policy};
use std::time::{Duration, Instant};
use support::{calls, closed_port, DEADLINE, MARGIN};
use testkit::redis;
use testkit::{unique_key, Server};

const POLICIES: [FailurePolicy; 3] =
    [FailurePolicy::Open, FailurePolicy::Closed, FailurePolicy::LocalFallback { instances: 2 }];

fn on(url: &str, failure: FailurePolicy) -> Limiter {
    // A breaker that does not open during these checks: each call meets the failure itself.
    Limiter::builder(failure).deadline(DEADLINE).breaker(1000, Duration::from_secs(5)).connect(url).unwrap()
}

/// Checks `n` times, each answered within the deadline and degraded; returns the decisions.
async fn degraded_checks(limiter: &Limiter, n: usize) -> Vec<Decision> {
    // Slow enough that nothing refills during the test.
    let policy = Policy::token_bucket(10, 0.001).unwrap();
    let mut out = vec![];
    for _ in 0..n {
        let start = Instant::now();
        let d = limiter.check("rl:down", &policy, 1).await;
        assert!(start.elapsed() < DEADLINE + MARGIN, "answered in {:?}", start.elapsed());
        assert!(d.degraded, "{d:?}");
        out.push(d);
    }
    out
}

fn assert_policy(failure: FailurePolicy, decisions: &[Decision]) {
    let allowed = decisions.iter().filter(|d| d.allowed).count();
    match failure {
        FailurePolicy::Open => assert_eq!(allowed, decisions.len()),
        FailurePolicy::Closed => assert_eq!(allowed, 0),
        // Capacity 10 over 2 instances: this one admits its share, 5.
        FailurePolicy::LocalFallback { .. } => assert_eq!(allowed, 5),
    }
}

#[tokio::test]
async fn a_stopped_server_is_answered_by_each_policy_within_the_deadline() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    for failure in POLICIES {
        let limiter = on(&url, failure);
        let decisions = degraded_checks(&limiter, 8).await;
        assert_policy(failure, &decisions);
        assert_eq!(limiter.counts().degraded, 8);
        let strict =
            limiter.check_strict(&[Limit::new("k", &Policy::token_bucket(1, 1.0).unwrap(), 1)]).await;
        assert!(matches!(strict, Err(CallError::Redis(_)) | Err(CallError::Deadline(_))), "{strict:?}");
    }
}

#[tokio::test]
async fn a_hung_server_is_answered_by_each_policy_within_the_deadline() {
    let Some(server) = Server::builder().own() else { return };
    for failure in POLICIES {
        let limiter = on(server.url(), failure);
        // Connected and working first, then the server stops answering writes.
        assert!(
            !limiter.check(&unique_key("warm"), &Policy::token_bucket(1, 1.0).unwrap(), 0).await.degraded
        );
        let _: () =
            redis::cmd("CLIENT").arg("PAUSE").arg(3000).arg("WRITE").query(&mut server.conn()).unwrap();
        let decisions = degraded_checks(&limiter, 8).await;
        assert_policy(failure, &decisions);
        let strict =
            limiter.check_strict(&[Limit::new("k", &Policy::token_bucket(1, 1.0).unwrap(), 1)]).await;
        assert!(matches!(strict, Err(CallError::Deadline(d)) if d == DEADLINE), "{strict:?}");
        let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut server.conn()).unwrap();
    }
}

/// Once the breaker is open, calls are answered at once and never reach the server; after the
/// cool-down one probe goes through, and when Redis answers, decisions are Redis' again.
#[tokio::test]
async fn the_breaker_keeps_calls_off_a_hung_server_then_probes_it_back() {
    let Some(server) = Server::builder().own() else { return };
    let cooldown = Duration::from_millis(1500);
    let limiter = Limiter::builder(FailurePolicy::Open)
        .deadline(DEADLINE)
        .breaker(3, cooldown)
        .connect(server.url())
        .unwrap();
    let policy = Policy::token_bucket(100, 0.001).unwrap();
    let key = unique_key("breaker");
    assert!(!limiter.check(&key, &policy, 1).await.degraded);
    let before = calls(&server, "rl.token");
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(1000).arg("WRITE").query(&mut server.conn()).unwrap();

    // Three calls wait for the deadline, then the breaker opens.
    for _ in 0..3 {
        assert!(limiter.check(&key, &policy, 1).await.degraded);
    }
    assert!(limiter.breaker_open());
    // During the cool-down: no waiting, nothing sent.
    let start = Instant::now();
    for _ in 0..50 {
        assert!(limiter.check(&key, &policy, 1).await.degraded);
    }
    assert!(
        start.elapsed() < DEADLINE,
        "50 calls took {:?}: the breaker should answer at once",
        start.elapsed()
    );
    assert_eq!(limiter.counts().short_circuited, 50);
    // The pause ends by itself; the server then runs what reached it: the 3 calls, not the 50.
    testkit::wait_until("the pause to end", || calls(&server, "rl.token") >= before + 3);
    assert_eq!(calls(&server, "rl.token"), before + 3);

    // After the cool-down one probe reaches Redis and closes the breaker.
    tokio::time::sleep(cooldown).await;
    let probe = limiter.check(&key, &policy, 1).await;
    assert!(!probe.degraded && probe.allowed, "{probe:?}");
    assert!(!limiter.breaker_open());
    assert_eq!(probe.remaining, 100 - 5, "the first call, the 3 that waited, and the probe");
}

#[tokio::test]
async fn a_restarted_server_is_used_again_after_the_cool_down() {
    let Some(mut server) = Server::builder().args(&["--appendonly", "no"]).own() else { return };
    let cooldown = Duration::from_millis(500);
    let limiter = Limiter::builder(FailurePolicy::Closed)
        .deadline(DEADLINE)
        .breaker(2, cooldown)
        .connect(server.url())
        .unwrap();
    let policy = Policy::token_bucket(10, 1.0).unwrap();
    assert!(limiter.check("rl:back", &policy, 1).await.allowed);
    let port = server.port;
    server.stop();
    for _ in 0..5 {
        let d = limiter.check("rl:back", &policy, 1).await;
        assert!(d.degraded && !d.allowed);
    }
    assert!(limiter.breaker_open());
    server.start_again();
    assert_eq!(server.port, port);
    let mut back = None;
    for _ in 0..40 {
        tokio::time::sleep(cooldown / 4).await;
        let d = limiter.check("rl:back", &policy, 1).await;
        if !d.degraded {
            back = Some(d);
            break;
        }
    }
    let d = back.expect("Redis decides again once it is back");
    assert!(d.allowed && !limiter.breaker_open());
}
