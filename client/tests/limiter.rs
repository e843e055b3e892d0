//! The limiter against a real module-enabled server: decisions, multi-limit checks, every policy
//! kind, refunds, and the round trips the high-volume modes save.

mod support;

use redis_ratelimit_client::{CallError, FailurePolicy, Limit, Limiter, Policy};
use std::time::Duration;
use support::{calls, limiter, wait_until};
use testkit::{unique_key, Server};

#[tokio::test]
async fn token_bucket_decisions_carry_every_field() {
    let server = Server::builder().single();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let policy = Policy::token_bucket(10, 5.0).unwrap();
    let key = unique_key("rl:client");
    for i in 0..10 {
        let d = limiter.check(&key, &policy, 1).await;
        assert!(d.allowed && !d.degraded, "request {i}: {d:?}");
        assert_eq!((d.limit, d.remaining, d.retry_after), (10, 9 - i, Some(Duration::ZERO)));
    }
    let d = limiter.check(&key, &policy, 1).await;
    assert!(!d.allowed && !d.degraded);
    assert_eq!((d.remaining, d.retry_after_secs()), (0, Some(1)));
    assert!(d.retry_after.unwrap() <= Duration::from_millis(200));
    assert!(d.reset_after > Duration::from_millis(1900) && d.reset_after <= Duration::from_secs(2));
    let never = limiter.check(&key, &policy, 11).await;
    assert!(never.never_fits() && never.retry_after_secs().is_none());
    assert_eq!(limiter.counts().allowed, 10);
    assert_eq!(limiter.counts().denied, 2);
}

#[tokio::test]
async fn a_route_and_a_global_limit_are_checked_in_one_call_and_a_denial_takes_from_neither() {
    // Counts the server's calls: needs a server of its own.
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    let route = Policy::token_bucket(3, 0.001).unwrap();
    let global = Policy::token_bucket(5, 0.001).unwrap();
    let client = unique_key("c");
    let (a, b, all) =
        (format!("rl:{{{client}}}:a"), format!("rl:{{{client}}}:b"), format!("rl:{{{client}}}:all"));
    let before = calls(&server, "rl.token");
    let mut allowed = 0;
    for key in [&a, &a, &a, &b, &b, &b] {
        let d = limiter.check_all(&[Limit::new(key, &route, 1), Limit::new(&all, &global, 1)]).await;
        allowed += usize::from(d.allowed);
        if !d.allowed {
            assert_eq!((d.limiting, d.limit), (1, 5), "the global limit denies: {d:?}");
        }
    }
    assert_eq!(allowed, 5, "capacity is not multiplied across routes");
    assert_eq!(calls(&server, "rl.token") - before, 6, "one call per check");
    // The denied request took nothing from route b: it still has one token.
    assert_eq!(limiter.check(&b, &route, 0).await.remaining, 1);
}

#[tokio::test]
async fn every_window_kind_decides_through_its_command() {
    // Counts the server's calls: needs a server of its own.
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    let minute = Duration::from_secs(60);
    for (policy, command) in [
        (Policy::sliding_log(3, minute).unwrap(), "rl.slide"),
        (Policy::fixed_window(3, minute).unwrap(), "rl.fixed"),
        (Policy::sliding_counter(3, minute).unwrap(), "rl.slidecount"),
    ] {
        let key = unique_key("w");
        let before = calls(&server, command);
        let allowed: Vec<bool> = futures_all(&limiter, &key, &policy, 4).await;
        assert_eq!(allowed, [true, true, true, false], "{command}");
        assert_eq!(calls(&server, command) - before, 4, "{command}");
    }
}

async fn futures_all(limiter: &Limiter, key: &str, policy: &Policy, n: usize) -> Vec<bool> {
    let mut out = vec![];
    for _ in 0..n {
        out.push(limiter.check(key, policy, 1).await.allowed);
    }
    out
}

#[tokio::test]
async fn two_instances_racing_admit_exactly_the_capacity() {
    let server = Server::builder().single();
    let instances = [limiter(&server, FailurePolicy::Closed), limiter(&server, FailurePolicy::Closed)];
    let policy = Policy::token_bucket(10, 0.001).unwrap();
    let key = unique_key("race");
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let (l, p, k) = (instances[i % 2].clone(), policy.clone(), key.clone());
            tokio::spawn(async move { l.check(&k, &p, 1).await.allowed })
        })
        .collect();
    let mut allowed = 0;
    for t in tasks {
        allowed += usize::from(t.await.unwrap());
    }
    assert_eq!(allowed, 10);
}

#[tokio::test]
async fn the_precheck_answers_repeated_denials_without_a_round_trip() {
    // Counts the server's calls: needs a server of its own.
    let Some(server) = Server::builder().own() else { return };
    let limiter = support::builder(FailurePolicy::Closed).local_precheck(true).connect(server.url()).unwrap();
    let policy = Policy::token_bucket(2, 0.01).unwrap(); // one token per 100 s
    let key = unique_key("abuse");
    let before = calls(&server, "rl.token");
    let allowed = futures_all(&limiter, &key, &policy, 50).await.into_iter().filter(|a| *a).count();
    assert_eq!(allowed, 2);
    assert_eq!(calls(&server, "rl.token") - before, 3, "2 allowed + the first denial; 47 answered locally");
    let held = limiter.check(&key, &policy, 1).await;
    assert!(!held.allowed && !held.degraded && held.retry_after.unwrap() > Duration::from_secs(90));
}

#[tokio::test]
async fn refunds_give_tokens_back() {
    let server = Server::builder().single();
    let limiter = limiter(&server, FailurePolicy::Closed);
    let policy = Policy::token_bucket(10, 0.001).unwrap();
    let key = unique_key("refund");
    assert_eq!(limiter.check(&key, &policy, 4).await.remaining, 6);
    assert_eq!(limiter.refund(&key, &policy, 3).await.unwrap().remaining, 9);
}

#[tokio::test]
async fn calls_that_cannot_be_built_are_usage_errors() {
    let server = Server::builder().single();
    let token = Policy::token_bucket(10, 5.0).unwrap();
    let log = Policy::sliding_log(10, Duration::from_secs(1)).unwrap();
    let slots = Policy::concurrency(2, Duration::from_secs(10)).unwrap();
    for failure in [FailurePolicy::Closed, FailurePolicy::Open] {
        let limiter = limiter(&server, failure);
        for limits in [
            vec![Limit::new("a", &token, 1), Limit::new("c", &log, 2)],
            vec![Limit::new("c", &log, 2)],
            vec![Limit::new("s", &slots, 1)],
            vec![],
        ] {
            let err = limiter.check_strict(&limits).await.unwrap_err();
            assert!(matches!(err, redis_ratelimit_client::CallError::Usage(_)), "{err:?}");
            let d = limiter.check_all(&limits).await;
            assert!(
                !d.allowed && !d.degraded && d.retry_after.is_none(),
                "refused, never fits, whatever the failure policy ({failure:?}): {d:?}"
            );
        }
        // The same for acquisitions that cannot be built (a weight of 0, a sliding log's cost of 2).
        for limits in
            [vec![Limit::new("s", &slots, 0)], vec![Limit::new("s", &slots, 1), Limit::new("c", &log, 2)]]
        {
            match limiter.acquire_all(&limits).await {
                redis_ratelimit_client::Acquired::Denied(d) => assert!(
                    !d.degraded && d.retry_after.is_none(),
                    "refused whatever the failure policy ({failure:?}): {d:?}"
                ),
                redis_ratelimit_client::Acquired::Granted(p) => {
                    panic!("granted ({failure:?}): {:?}", p.decision())
                }
            }
        }
    }
}

/// Limits of different kinds go into one RL.ALL: all or nothing, the most restrictive reported.
#[tokio::test]
async fn limits_of_different_kinds_are_checked_in_one_atomic_call() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    let token = Policy::token_bucket(10, 0.001).unwrap();
    let log = Policy::sliding_log(2, Duration::from_secs(60)).unwrap();
    let window = Policy::fixed_window(5, Duration::from_secs(60)).unwrap();
    let (t, l, w) = (unique_key("{mix}:t"), unique_key("{mix}:l"), unique_key("{mix}:w"));
    let limits = [Limit::new(&t, &token, 1), Limit::new(&l, &log, 1), Limit::new(&w, &window, 1)];
    let decisions = [
        limiter.check_all(&limits).await,
        limiter.check_all(&limits).await,
        limiter.check_all(&limits).await,
    ];
    assert!(decisions.iter().all(|d| !d.degraded));
    assert_eq!(decisions.iter().map(|d| d.allowed).collect::<Vec<_>>(), [true, true, false]);
    assert_eq!((decisions[2].limiting, decisions[2].limit), (1, 2), "the log denies");
    assert_eq!(calls(&server, "rl.all"), 3, "one call each");
    assert_eq!(limiter.check(&t, &token, 0).await.remaining, 8, "the denial took no token");
}

#[tokio::test]
async fn take_grants_what_a_bucket_holds_up_to_max() {
    let server = Server::builder().single();
    let limiter = support::builder(FailurePolicy::Closed).connect(server.url()).unwrap();
    let key = testkit::unique_key("rl:take");
    let bucket = Policy::token_bucket(10, 0.01).unwrap();
    let first = limiter.take(&key, &bucket, 4).await;
    assert_eq!((first.taken, first.decision.allowed, first.decision.remaining), (4, true, 6));
    let rest = limiter.take(&key, &bucket, 100).await;
    assert_eq!((rest.taken, rest.decision.remaining), (6, 0));
    let none = limiter.take(&key, &bucket, 1).await;
    assert_eq!((none.taken, none.decision.allowed, none.decision.degraded), (0, false, false));
    assert!(none.decision.retry_after.is_some());
    let window = Policy::fixed_window(5, std::time::Duration::from_secs(1)).unwrap();
    let refused = limiter.take(&key, &window, 1).await;
    assert!(refused.taken == 0 && refused.decision.never_fits() && !refused.decision.degraded, "{refused:?}");
    let strict = limiter.take_strict(&key, &window, 1).await;
    assert!(matches!(strict, Err(CallError::Usage(_))), "only token buckets: {strict:?}");
    assert!(matches!(limiter.take_strict(&key, &bucket, 0).await, Err(CallError::Usage(_))), "max >= 1");
}

/// `wait_for_replicas` on a server with no replica: WAIT times out, and `on_timeout` decides. An
/// allowed decision is kept as degraded or turned into a degraded denial; a refused acquisition gives
/// its lease back; a denial does not wait.
#[tokio::test]
async fn without_enough_replicas_the_wait_timeout_policy_decides() {
    use redis_ratelimit_client::{Acquired, WaitTimeout};
    let server = Server::builder().single();
    let waiting = |on_timeout| {
        support::builder(FailurePolicy::Open)
            .wait_for_replicas(1, Duration::from_millis(20), on_timeout)
            .connect(server.url())
            .unwrap()
    };
    let bucket = Policy::token_bucket(2, 0.001).unwrap();
    let allow = waiting(WaitTimeout::AllowDegraded);
    let key = unique_key("rl:wait:allow");
    let d = allow.check(&key, &bucket, 1).await;
    assert!(d.allowed && d.degraded && d.remaining == 1, "allowed, its write unacknowledged: {d:?}");
    let deny = waiting(WaitTimeout::Deny);
    let d = deny.check(&key, &bucket, 1).await;
    assert!(!d.allowed && d.degraded && d.retry_after == Some(Duration::from_secs(1)), "{d:?}");
    // The bucket is empty now (the refused request's token stays taken): a denial, from Redis, unwaited.
    let d = deny.check(&key, &bucket, 1).await;
    assert!(!d.allowed && !d.degraded, "{d:?}");
    // A refused acquisition gives its lease back.
    let leases = Policy::concurrency(1, Duration::from_secs(60)).unwrap();
    let lease_key = unique_key("rl:wait:lease");
    assert!(matches!(deny.acquire(&lease_key, &leases, 1).await, Acquired::Denied(d) if d.degraded));
    let mut con = server.conn();
    wait_until("the refused acquisition's lease to be given back", async || {
        testkit::redis::cmd("EXISTS").arg(&lease_key).query::<i64>(&mut con).unwrap() == 0
    })
    .await;
    assert!(matches!(allow.acquire(&lease_key, &leases, 1).await, Acquired::Granted(_)));
}
