//! Waiting for capacity (`Limiter::until_ready`) against a real module-enabled server: waiters get
//! through in a bounded number of calls (the server's own count), a request that can never fit and
//! one that cannot fit in time come back at once, and a degraded decision is not waited on.

mod support;

use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
use std::time::Duration;
use support::{calls, closed_port, limiter};
use testkit::{unique_key, Server};

const LONG: Duration = Duration::from_secs(30);

#[tokio::test]
async fn two_waiters_on_one_token_both_get_through_in_a_bounded_number_of_calls() {
    // Counts the server's calls: needs a server of its own.
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    // One token, back every 50 ms; spent before the waiters start, so both must wait.
    let policy = Policy::token_bucket(1, 20.0).unwrap();
    let key = unique_key("rl:wait");
    assert!(limiter.check(&key, &policy, 1).await.allowed);
    let before = calls(&server, "rl.token");
    let waiter = |limiter: Limiter, key: String, policy: Policy| {
        tokio::spawn(async move { limiter.until_ready(&key, &policy, 1, LONG).await })
    };
    let first = waiter(limiter.clone(), key.clone(), policy.clone());
    let second = waiter(limiter.clone(), key.clone(), policy.clone());
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert!(first.allowed && !first.degraded, "{first:?}");
    assert!(second.allowed && !second.degraded, "{second:?}");
    // Each waiter is denied at most twice: at the start, and once more when it wakes in the refill
    // period the other one took. A loop that did not sleep retry_after would make hundreds of calls.
    let made = calls(&server, "rl.token") - before;
    assert!((3..=6).contains(&made), "{made} RL.TOKEN calls for two waiters");
    let counts = limiter.counts();
    assert_eq!(counts.allowed, 3, "the first check and the two waiters");
    assert_eq!(counts.denied, made - 2);
}

#[tokio::test]
async fn a_request_that_can_never_fit_returns_at_once_with_its_decision() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    let policy = Policy::token_bucket(3, 20.0).unwrap();
    let before = calls(&server, "rl.token");
    let never = limiter.until_ready(&unique_key("rl:wait"), &policy, 5, LONG).await;
    assert!(never.never_fits(), "{never:?}");
    assert_eq!((never.limit, never.remaining), (3, 3), "nothing was taken");
    assert_eq!(calls(&server, "rl.token") - before, 1, "one check, no retry");
}

#[tokio::test]
async fn max_wait_bounds_the_wait() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    // The next token comes in 100 s; waiting 300 ms cannot get it.
    let policy = Policy::token_bucket(1, 0.01).unwrap();
    let key = unique_key("rl:wait");
    assert!(limiter.check(&key, &policy, 1).await.allowed);
    let before = calls(&server, "rl.token");
    let denied = limiter.until_ready(&key, &policy, 1, Duration::from_millis(300)).await;
    assert!(!denied.allowed && !denied.degraded, "{denied:?}");
    assert!(denied.retry_after.unwrap() > Duration::from_secs(90), "{denied:?}");
    assert_eq!(calls(&server, "rl.token") - before, 1, "no sleep that could not end in an allowed check");

    // A wait that ends inside max_wait: the token comes back in 200 ms.
    let soon = Policy::token_bucket(1, 5.0).unwrap();
    let key = unique_key("rl:wait");
    assert!(limiter.check(&key, &soon, 1).await.allowed);
    let before = calls(&server, "rl.token");
    let d = limiter.until_ready(&key, &soon, 1, Duration::from_secs(5)).await;
    assert!(d.allowed, "{d:?}");
    assert_eq!(calls(&server, "rl.token") - before, 2, "denied, slept retry_after, allowed");
}

#[tokio::test]
async fn a_degraded_decision_follows_the_failure_policy_and_is_not_waited_on() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let policy = Policy::token_bucket(1, 0.01).unwrap();
    for (failure, allowed) in [(FailurePolicy::Open, true), (FailurePolicy::Closed, false)] {
        let limiter = Limiter::builder(failure).connect(&url).unwrap();
        let d = limiter.until_ready("rl:wait:down", &policy, 1, LONG).await;
        assert!(d.degraded, "{failure:?}: {d:?}");
        assert_eq!(d.allowed, allowed, "{failure:?}");
        assert_eq!(limiter.counts().degraded, 1, "{failure:?}: one check, no retry during an outage");
    }
}
