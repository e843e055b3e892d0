//! Failure policies against real failures: a stopped server (closed port) and a hung one (`CLIENT
//! PAUSE`), the deadline, the circuit breaker, and recovery.

mod support;

use redis_ratelimit_client::{CallError, Decision, FailurePolicy, Limit, Limiter, Policy};
use std::time::{Duration, Instant};
use support::{calls, calls_of, closed_port, wait_until, DEADLINE, MARGIN};
use testkit::redis;
use testkit::{unique_key, Server};

const POLICIES: [FailurePolicy; 3] =
    [FailurePolicy::Open, FailurePolicy::Closed, FailurePolicy::LocalFallback { instances: 2 }];

fn on(url: &str, failure: FailurePolicy) -> Limiter {
    // A breaker that does not open during these checks: each call meets the failure itself.
    support::builder(failure).deadline(DEADLINE).breaker(1000, Duration::from_secs(5)).connect(url).unwrap()
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

/// `take` follows the failure policy like `check`: `Open` grants all asked, `Closed` none,
/// `LocalFallback` what the in-process share holds; all degraded. `take_strict` returns the error.
#[tokio::test]
async fn take_on_a_stopped_server_follows_each_policy_and_take_strict_returns_the_error() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let policy = Policy::token_bucket(10, 0.001).unwrap();
    for failure in POLICIES {
        let limiter = on(&url, failure);
        let mut taken = 0;
        for _ in 0..3 {
            let grant = limiter.take("rl:down", &policy, 4).await;
            assert!(grant.decision.degraded, "{grant:?}");
            assert_eq!(grant.decision.allowed, grant.taken > 0, "{grant:?}");
            taken += grant.taken;
        }
        let expected = match failure {
            FailurePolicy::Open => 12,
            FailurePolicy::Closed => 0,
            // Capacity 10 over 2 instances: 4, then the 1 left, then none.
            FailurePolicy::LocalFallback { .. } => 5,
        };
        assert_eq!(taken, expected, "{failure:?}");
        assert_eq!(limiter.counts().degraded, 3);
        let strict = limiter.take_strict("rl:down", &policy, 4).await;
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
    let limiter = support::builder(FailurePolicy::Open)
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
    wait_until("the pause to end", async || calls(&server, "rl.token") >= before + 3).await;
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
    let limiter = support::builder(FailurePolicy::Closed)
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
    wait_until("Redis to decide again once it is back", async || {
        back = Some(limiter.check("rl:back", &policy, 1).await).filter(|d| !d.degraded);
        back.is_some()
    })
    .await;
    let d = back.unwrap();
    assert!(d.allowed && !limiter.breaker_open());
}

/// Calls that were sent to Redis and failed: degraded decisions the breaker did not short-circuit.
fn failed_calls(limiter: &Limiter) -> u64 {
    let c = limiter.counts();
    c.degraded - c.short_circuited
}

/// Redis is killed (SIGKILL: the limiter's connection dies under it) and restarted on the same port.
/// The breaker's probe after the cool-down must find it: the first call sent after the restart is
/// decided by Redis, and each check is charged exactly once (the server ran one RL.TOKEN per check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_after_the_cool_down_finds_a_killed_and_restarted_server() {
    let Some(mut server) = support::Killable::start() else { return };
    let cooldown = Duration::from_millis(1000);
    let limiter = support::builder(FailurePolicy::Closed)
        .deadline(DEADLINE)
        .breaker(2, cooldown)
        .connect(&server.url())
        .unwrap();
    let policy = Policy::token_bucket(100, 0.001).unwrap();
    let key = unique_key("rl:killed");
    assert!(!limiter.check(&key, &policy, 1).await.degraded);
    server.kill();
    while !limiter.breaker_open() {
        assert!(limiter.check(&key, &policy, 1).await.degraded);
    }
    let failed_before = failed_calls(&limiter);
    server.start_again();
    let restarted = Instant::now();
    // Checks again and again: short-circuited until the cool-down ends, then the probe.
    let mut first = None;
    wait_until("Redis to decide again", async || {
        first = Some(limiter.check(&key, &policy, 1).await).filter(|d| !d.degraded);
        first.is_some()
    })
    .await;
    let first = first.unwrap();
    eprintln!("first decision from Redis {:?} after the restart", restarted.elapsed());
    assert_eq!(failed_calls(&limiter) - failed_before, 0, "the probe itself reached the restarted server");
    assert!(first.allowed && !limiter.breaker_open());
    for _ in 0..4 {
        assert!(!limiter.check(&key, &policy, 1).await.degraded);
    }
    // The restarted server is empty: the probe and the 4 checks, each charged once.
    assert_eq!(server.calls("rl.token"), 5);
    assert_eq!(limiter.check(&key, &policy, 0).await.remaining, 100 - 5);
}

/// Without the breaker opening: one call fails while Redis is down, and the first call after the
/// restart is Redis' again (not a failure on the dead connection), charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_call_after_a_restart_is_decided_by_redis() {
    let Some(mut server) = support::Killable::start() else { return };
    let limiter = support::builder(FailurePolicy::Open)
        .deadline(DEADLINE)
        .breaker(1000, Duration::from_secs(5))
        .connect(&server.url())
        .unwrap();
    let policy = Policy::token_bucket(10, 0.001).unwrap();
    let key = unique_key("rl:restart");
    assert!(!limiter.check(&key, &policy, 1).await.degraded);
    server.kill();
    assert!(limiter.check(&key, &policy, 1).await.degraded);
    server.start_again();
    let d = limiter.check(&key, &policy, 1).await;
    assert!(!d.degraded, "{d:?}");
    assert_eq!(d.remaining, 9, "a fresh server: this check, charged once");
    assert_eq!(server.calls("rl.token"), 1);
}

/// No call while Redis is down: the connection's disconnect notice (RESP3) arrives while the server
/// restarts (tens of ms), so the first call after it checks the connection instead of meeting the
/// dead one. Five rounds of kill, restart, call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_after_an_unnoticed_restart_is_decided_by_redis() {
    let Some(mut server) = support::Killable::start() else { return };
    let limiter = support::builder(FailurePolicy::Open)
        .deadline(DEADLINE)
        .breaker(1000, Duration::from_secs(5))
        .connect(&server.url())
        .unwrap();
    let policy = Policy::token_bucket(10, 0.001).unwrap();
    let key = unique_key("rl:unnoticed");
    for round in 0..5 {
        assert!(!limiter.check(&key, &policy, 1).await.degraded);
        server.kill();
        server.start_again();
        let d = limiter.check_strict(&[Limit::new(&key, &policy, 1)]).await;
        assert!(d.is_ok(), "round {round}: {d:?}");
        assert_eq!(server.calls("rl.token"), 1, "round {round}: charged once");
    }
}

/// Acquire and release meet the deadline and the breaker like a check: a hung server answers
/// neither, the failure policy decides the acquire (closed: a degraded denial), the release says
/// `Deadline`, and once the breaker is open both are answered at once without reaching the server.
#[tokio::test]
async fn acquire_and_release_are_held_to_the_deadline_and_the_breaker() {
    use redis_ratelimit_client::Acquired;
    let Some(server) = Server::builder().own() else { return };
    let limiter = support::builder(FailurePolicy::Closed)
        .deadline(DEADLINE)
        .breaker(2, Duration::from_secs(30))
        .connect(server.url())
        .unwrap();
    let policy = Policy::concurrency(2, Duration::from_secs(60)).unwrap();
    let key = unique_key("leases");
    // Granted by Redis first (a slow machine may need a second try; a success resets the breaker's
    // count of failures in a row).
    let mut held = None;
    for _ in 0..20 {
        if let Acquired::Granted(permit) = limiter.acquire(&key, &policy, 1).await {
            held = Some(permit);
            break;
        }
    }
    let held = held.expect("granted");
    let sent = |server: &Server| calls_of(server, &["rl.all", "rl.acquire"]);
    let before = sent(&server);
    // Longer than the test: the pause ends with UNPAUSE.
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(60_000).arg("WRITE").query(&mut server.conn()).unwrap();
    let start = Instant::now();
    let acquired = limiter.acquire(&key, &policy, 1).await;
    assert!(matches!(&acquired, Acquired::Denied(d) if d.degraded), "closed: a degraded denial");
    assert!(start.elapsed() < DEADLINE + MARGIN, "within the deadline: {:?}", start.elapsed());
    let start = Instant::now();
    let released = held.release().await;
    assert!(matches!(released, Err(CallError::Deadline(d)) if d == DEADLINE), "{released:?}");
    assert!(start.elapsed() < DEADLINE + MARGIN, "within the deadline: {:?}", start.elapsed());
    assert!(limiter.breaker_open(), "two failures open it");
    let (short, start) = (limiter.counts().short_circuited, Instant::now());
    let again = limiter.acquire(&key, &policy, 1).await;
    assert!(matches!(&again, Acquired::Denied(d) if d.degraded));
    assert!(start.elapsed() < DEADLINE, "the open breaker answers at once: {:?}", start.elapsed());
    assert_eq!(limiter.counts().short_circuited, short + 1);
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut server.conn()).unwrap();
    // The server then runs what reached it: the acquire that waited for the deadline, not the one
    // the breaker answered.
    wait_until("the waiting acquire to run", async || sent(&server) > before).await;
    // On the library the release that reached the server is an FCALL too.
    if !support::skip_counting_one_of_several() {
        assert_eq!(sent(&server), before + 1);
    }
}

/// A renew that Redis does not answer (a pause) neither hangs the permit nor calls the lease lost:
/// it may still be held. Once Redis answers again, a lease that ended meanwhile is reported lost.
#[tokio::test]
async fn a_renew_is_held_to_the_deadline_and_a_lease_that_ended_in_an_outage_is_reported_lost() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = on(server.url(), FailurePolicy::Closed);
    // Renewed every 200 ms; the pause outlasts the lease.
    let policy = Policy::concurrency(1, Duration::from_millis(400)).unwrap();
    let key = unique_key("renew");
    let permit = limiter.acquire(&key, &policy, 1).await.permit().expect("granted");
    let renews = |server: &Server| calls(server, "rl.renew");
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(60_000).arg("WRITE").query(&mut server.conn()).unwrap();
    // Renews are sent (every half lease) and give up at the deadline; the lease ends meanwhile.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!permit.lost(), "an unanswered renew does not know that the lease is gone");
    let before = renews(&server);
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut server.conn()).unwrap();
    wait_until("the first answered renew to find the lease gone", async || permit.lost()).await;
    assert!(renews(&server) > before);
    assert!(!permit.release().await.unwrap(), "nothing was held any more");
}
