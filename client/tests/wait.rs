//! Waiting for capacity (`Limiter::until_ready`, `Limiter::take_within`) against a real
//! module-enabled server: token buckets are waited for by reservation, one call per grant (the
//! server's own count), in arrival order; a reservation dropped while its waiter sleeps goes back; a
//! request that can never fit and one that cannot fit in time come back at once; limits that cannot
//! reserve are polled; a degraded decision is not waited on.

mod support;

use redis_ratelimit_client::{FailurePolicy, Limit, Limiter, Policy};
use std::time::{Duration, Instant};
use support::{calls, closed_port, limiter, wait_until};
use testkit::redis;
use testkit::{unique_key, Server};

const LONG: Duration = Duration::from_secs(30);

fn stored(server: &Server, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(&mut server.conn()).unwrap()
}

#[tokio::test]
async fn waiters_on_one_token_are_served_in_turn_by_one_reservation_each() {
    // Counts the server's calls: needs a server of its own.
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    // Two tokens, one back every 100 ms; spent before the waiters start, so both must wait (and
    // both waits fit in one refill, a reservation's longest).
    let policy = Policy::token_bucket(2, 10.0).unwrap();
    let key = unique_key("rl:wait");
    assert!(limiter.check(&key, &policy, 2).await.allowed);
    // Counted from here: on the Lua library the check is an FCALL as the reservations are.
    let before = calls(&server, "rl.reserve");
    let waiter = |limiter: Limiter, key: String, policy: Policy| {
        tokio::spawn(async move {
            let d = limiter.until_ready(&key, &policy, 1, LONG).await;
            (d, Instant::now())
        })
    };
    let started = Instant::now();
    let first = waiter(limiter.clone(), key.clone(), policy.clone());
    let second = waiter(limiter.clone(), key.clone(), policy.clone());
    let ((first, at1), (second, at2)) = (first.await.unwrap(), second.await.unwrap());
    assert!(first.allowed && !first.degraded && first.retry_after == Some(Duration::ZERO), "{first:?}");
    assert!(second.allowed && !second.degraded, "{second:?}");
    // One reservation each: no polling. They slept their turns: one refill, then two.
    assert_eq!(calls(&server, "rl.reserve") - before, 2);
    let (early, late) = (at1.min(at2) - started, at1.max(at2) - started);
    assert!(early >= Duration::from_millis(50), "the first turn is a refill away: {early:?}");
    assert!(late >= Duration::from_millis(150), "the second turn comes after the first: {late:?}");
    assert_eq!(limiter.counts().allowed, 3, "the first check and the two waiters");
}

#[tokio::test]
async fn a_queue_longer_than_one_refill_is_waited_in_turns() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    // One token every 50 ms: four waiters queue 200 ms deep, four times a reservation's longest wait.
    let policy = Policy::token_bucket(1, 20.0).unwrap();
    let key = unique_key("rl:wait-turns");
    assert!(limiter.check(&key, &policy, 1).await.allowed);
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let (limiter, key, policy) = (limiter.clone(), key.clone(), policy.clone());
            tokio::spawn(async move { limiter.until_ready(&key, &policy, 1, LONG).await })
        })
        .collect();
    for w in waiters {
        assert!(w.await.unwrap().allowed);
    }
    let made = calls(&server, "rl.reserve");
    // Each is denied at most a few times (its turn beyond a refill) before its reservation; a
    // polling loop at 50 ms would make many more.
    assert!((4..=16).contains(&made), "{made} RL.RESERVE calls for four waiters");
}

#[tokio::test]
async fn a_reservation_dropped_while_its_waiter_sleeps_goes_back() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    let policy = Policy::token_bucket(1, 1.0).unwrap();
    let key = unique_key("rl:wait-cancel");
    assert!(limiter.check(&key, &policy, 1).await.allowed);
    let before = stored(&server, &key);
    // The waiter gives up after 100 ms of its 1 s wait.
    let gave_up =
        tokio::time::timeout(Duration::from_millis(100), limiter.until_ready(&key, &policy, 1, LONG));
    assert!(gave_up.await.is_err());
    assert_ne!(stored(&server, &key), before, "the reservation was taken");
    // Counted from here: on the Lua library the check and the reservation are FCALLs as the refund is.
    let refunds = calls(&server, "rl.refund");
    wait_until("the reservation to be refunded", async || stored(&server, &key) == before).await;
    assert_eq!(calls(&server, "rl.refund") - refunds, 1);
}

#[tokio::test]
async fn a_request_that_can_never_fit_returns_at_once_with_its_decision() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    let policy = Policy::token_bucket(3, 20.0).unwrap();
    let never = limiter.until_ready(&unique_key("rl:wait"), &policy, 5, LONG).await;
    assert!(never.never_fits(), "{never:?}");
    assert_eq!((never.limit, never.remaining), (3, 3), "nothing was taken");
    assert_eq!(calls(&server, "rl.reserve"), 1, "one call, no retry");
}

#[tokio::test]
async fn max_wait_bounds_the_wait() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    // The next token comes in 100 s; waiting 300 ms cannot get it.
    let policy = Policy::token_bucket(1, 0.01).unwrap();
    let key = unique_key("rl:wait");
    assert!(limiter.check(&key, &policy, 1).await.allowed);
    let before = stored(&server, &key);
    // Counted from here: on the Lua library the check is an FCALL as the reservation is.
    let reserves = calls(&server, "rl.reserve");
    let denied = limiter.until_ready(&key, &policy, 1, Duration::from_millis(300)).await;
    assert!(!denied.allowed && !denied.degraded, "{denied:?}");
    assert!(denied.retry_after.unwrap() > Duration::from_secs(90), "{denied:?}");
    assert_eq!(calls(&server, "rl.reserve") - reserves, 1, "no sleep that could not end in a grant");
    assert_eq!(stored(&server, &key), before, "a denial reserves nothing");

    // A wait that ends inside max_wait: the token comes back in 200 ms, reserved by one call.
    let soon = Policy::token_bucket(1, 5.0).unwrap();
    let key = unique_key("rl:wait");
    assert!(limiter.check(&key, &soon, 1).await.allowed);
    let reserves = calls(&server, "rl.reserve");
    let started = Instant::now();
    let d = limiter.until_ready(&key, &soon, 1, Duration::from_secs(5)).await;
    assert!(d.allowed, "{d:?}");
    assert!(started.elapsed() >= Duration::from_millis(150), "it slept until the token was there");
    assert_eq!(calls(&server, "rl.reserve") - reserves, 1, "one reservation, slept");
}

#[tokio::test]
async fn limits_that_cannot_reserve_are_polled_with_the_buckets_reserving_beside_them() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    let bucket = Policy::token_bucket(10, 100.0).unwrap();
    let log = Policy::sliding_log(1, Duration::from_millis(300)).unwrap();
    let (b, l) = (unique_key("rl:w:bucket"), unique_key("rl:w:log"));
    assert!(limiter.check(&l, &log, 1).await.allowed);
    let limits = [Limit::new(&b, &bucket, 1), Limit::new(&l, &log, 1)];
    let started = Instant::now();
    let d = limiter.until_ready_all(&limits, LONG).await;
    assert!(d.allowed, "{d:?}");
    assert!(started.elapsed() >= Duration::from_millis(200), "it waited for the log's window");
    let made = calls(&server, "rl.all");
    assert!((2..=4).contains(&made), "denied by the log, slept its retry_after, allowed: {made} calls");
}

#[tokio::test]
async fn a_batch_takes_at_least_min_and_up_to_max_in_one_reservation() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    let policy = Policy::token_bucket(5, 20.0).unwrap();
    let key = unique_key("rl:batch");
    let all = limiter.take_within(&key, &policy, 1, 5, LONG).await;
    assert_eq!((all.decision.allowed, all.taken), (true, 5), "{all:?}");
    let started = Instant::now();
    let two = limiter.take_within(&key, &policy, 2, 5, LONG).await;
    assert_eq!((two.decision.allowed, two.taken), (true, 2), "the minimum, reserved: {two:?}");
    assert!(started.elapsed() >= Duration::from_millis(75), "two tokens at 20/s were 100 ms away");
    assert_eq!(calls(&server, "rl.reserve"), 2);
    let refused = limiter.take_within(&key, &policy, 3, 2, LONG).await;
    assert!(refused.decision.never_fits() && refused.taken == 0, "max < min is refused: {refused:?}");
    let strict = limiter.take_within_strict(&key, &policy, 0, 2, LONG).await;
    assert!(strict.is_err(), "a batch of at least 0 is refused");
}

#[tokio::test]
async fn a_degraded_decision_follows_the_failure_policy_and_is_not_waited_on() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let policy = Policy::token_bucket(1, 0.01).unwrap();
    for (failure, allowed) in [(FailurePolicy::Open, true), (FailurePolicy::Closed, false)] {
        let limiter = support::builder(failure).connect(&url).unwrap();
        let d = limiter.until_ready("rl:wait:down", &policy, 1, LONG).await;
        assert!(d.degraded, "{failure:?}: {d:?}");
        assert_eq!(d.allowed, allowed, "{failure:?}");
        assert_eq!(limiter.counts().degraded, 1, "{failure:?}: one check, no retry during an outage");
    }
}

#[tokio::test]
async fn a_batch_follows_the_failure_policy() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let policy = Policy::token_bucket(10, 1.0).unwrap();
    for (failure, taken) in [(FailurePolicy::Open, 4), (FailurePolicy::Closed, 0)] {
        let limiter = support::builder(failure).connect(&url).unwrap();
        let batch = limiter.take_within("rl:batch:down", &policy, 2, 4, LONG).await;
        assert!(batch.decision.degraded, "{failure:?}: {batch:?}");
        assert_eq!(batch.taken, taken, "{failure:?}");
    }
    let fallback = support::builder(FailurePolicy::LocalFallback { instances: 2 }).connect(&url).unwrap();
    let batch = fallback.take_within("rl:batch:down", &policy, 1, 8, LONG).await;
    assert_eq!((batch.decision.degraded, batch.taken), (true, 5), "this instance's half of the bucket");
}
