//! Batched units (docs/high-volume.md) against a real module-enabled server: round trips saved,
//! several instances sharing one key never admitted beyond the limit, the idle bound, units given
//! back on close and lost (at most a batch) without it, and the kinds that refuse the option.

mod support;

use redis_ratelimit_client::{FailurePolicy, Limit, Limiter, Policy};
use std::time::Duration;
use support::{calls, limiter};
use testkit::{unique_key, Server};

/// A bucket that does not refill during a test (one token per 1,000 s).
fn still_bucket(capacity: u64) -> Policy {
    Policy::token_bucket(capacity, 0.001).unwrap()
}

#[tokio::test]
async fn a_hot_key_grows_its_batch_and_close_gives_back_what_was_not_used() {
    // Counts the server's calls: needs a server of its own.
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    let policy = still_bucket(1000).batched(16, Duration::from_secs(60)).unwrap();
    let key = unique_key("batch");
    let before = calls(&server, "rl.token");
    for i in 0..100 {
        let d = limiter.check(&key, &policy, 1).await;
        assert!(d.allowed && !d.degraded, "request {i}: {d:?}");
    }
    // Batches of 1, 2, 4, 8, then 16 taken ahead 12 at a time (below a quarter of the batch held):
    // about 100 / 12 + 4 calls; one call per check would be 100.
    let made = calls(&server, "rl.token") - before;
    assert!(made <= 16, "{made} calls for 100 checks");
    assert!(limiter.counts().local >= 100 - made);
    assert!(limiter.held(&key, &policy) <= 15);
    let plain = still_bucket(1000);
    limiter.close().await.unwrap();
    assert_eq!(limiter.check(&key, &plain, 0).await.remaining, 900, "every unit not admitted is back");
    assert_eq!(limiter.held(&key, &policy), 0);
}

#[tokio::test]
async fn a_quiet_key_costs_one_call_per_check() {
    let Some(server) = Server::builder().own() else { return };
    let limiter = limiter(&server, FailurePolicy::Closed);
    // A lease of 1 ms: each check finds the last batch's lease over (the key is cool).
    let policy = still_bucket(1000).batched(16, Duration::from_millis(1)).unwrap();
    let key = unique_key("quiet");
    let before = calls(&server, "rl.token");
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(limiter.check(&key, &policy, 1).await.allowed);
    }
    assert_eq!(calls(&server, "rl.token") - before, 5);
    assert_eq!(limiter.held(&key, &policy), 0, "a cool key asks no extra");
}

/// `instances` limiters on one server hammer one key with `per_instance` concurrent tasks each, each
/// making `rounds` checks one after the other:
/// (admitted, units taken from Redis and not admitted when the load ended: held or in flight).
/// Closing the limiters then gives every one of those back.
async fn hammer(
    server: &Server,
    policy: &Policy,
    plain: &Policy,
    instances: usize,
    per_instance: usize,
    rounds: usize,
) -> (u64, u64) {
    let key = unique_key("shared");
    let limiters: Vec<Limiter> = (0..instances).map(|_| limiter(server, FailurePolicy::Closed)).collect();
    let mut tasks = vec![];
    for l in &limiters {
        for _ in 0..per_instance {
            let (l, key, policy) = (l.clone(), key.clone(), policy.clone());
            tasks.push(tokio::spawn(async move {
                let mut decisions = vec![];
                for _ in 0..rounds {
                    decisions.push(l.check(&key, &policy, 1).await);
                }
                decisions
            }));
        }
    }
    let mut admitted = 0;
    for t in tasks {
        for d in t.await.unwrap() {
            assert!(!d.degraded, "{d:?}");
            admitted += u64::from(d.allowed);
        }
    }
    let limit = plain.limit();
    let idle = limit - admitted - limiters[0].check(&key, plain, 0).await.remaining;
    for l in &limiters {
        l.close().await.unwrap();
    }
    let after = limiters[0].check(&key, plain, 0).await.remaining;
    assert_eq!(after, limit - admitted, "close gave every unit not admitted back");
    (admitted, idle)
}

#[tokio::test]
async fn several_instances_on_one_bucket_never_admit_beyond_it_and_idle_at_most_their_batches() {
    let server = Server::builder().single();
    let (capacity, batch, instances) = (100, 8, 3);
    let policy = still_bucket(capacity).batched(batch, Duration::from_secs(60)).unwrap();
    let (admitted, idle) = hammer(&server, &policy, &still_bucket(capacity), instances, 80, 1).await;
    assert!(admitted <= capacity);
    assert!(idle <= instances as u64 * (batch - 1), "idle bound: {idle} held");
    assert!(admitted >= capacity - instances as u64 * (batch - 1), "240 requests for 100 tokens: {admitted}");
}

#[tokio::test]
async fn concurrent_checks_of_one_key_share_one_batch_call_so_the_idle_bound_holds_under_load() {
    // A bucket far from empty: without one batch call per key at a time, each of the 80 concurrent
    // checks of an instance would ask a batch of its own (hundreds of units idle).
    let server = Server::builder().single();
    let (capacity, batch, instances) = (10_000, 8, 3);
    let policy = still_bucket(capacity).batched(batch, Duration::from_secs(60)).unwrap();
    for _ in 0..3 {
        let (admitted, idle) = hammer(&server, &policy, &still_bucket(capacity), instances, 40, 10).await;
        assert_eq!(admitted, 1200);
        assert!(idle <= instances as u64 * (batch - 1), "idle bound: {idle} held or in flight");
    }
}

#[tokio::test]
async fn several_instances_on_one_fixed_window_never_admit_beyond_it() {
    let server = Server::builder().single();
    let plain = Policy::fixed_window(50, Duration::from_secs(600)).unwrap();
    let policy = plain.clone().batched(8, Duration::from_secs(60)).unwrap();
    let (admitted, idle) = hammer(&server, &policy, &plain, 2, 20, 3).await;
    assert!((50 - 2 * 7..=50).contains(&admitted), "{admitted}");
    assert!(idle <= 2 * 7, "idle bound: {idle} held");
}

#[tokio::test]
async fn a_limiter_dropped_without_close_loses_at_most_its_batch() {
    let server = Server::builder().single();
    let plain = still_bucket(100);
    let policy = plain.clone().batched(8, Duration::from_secs(60)).unwrap();
    let key = unique_key("dropped");
    let admitted = {
        let l = limiter(&server, FailurePolicy::Closed);
        let mut admitted = 0;
        for _ in 0..20 {
            admitted += u64::from(l.check(&key, &policy, 1).await.allowed);
        }
        admitted
    };
    let other = limiter(&server, FailurePolicy::Closed);
    let remaining = other.check(&key, &plain, 0).await.remaining;
    assert_eq!(admitted, 20);
    let lost = 100 - admitted - remaining;
    assert!(lost <= 7, "lost {lost}: at most batch - 1");
}

#[tokio::test]
async fn a_denied_batch_still_lets_the_request_itself_through() {
    let server = Server::builder().single();
    let plain = still_bucket(10);
    let policy = plain.clone().batched(8, Duration::from_secs(60)).unwrap();
    let (key, a, b) = (
        unique_key("contended"),
        limiter(&server, FailurePolicy::Closed),
        limiter(&server, FailurePolicy::Closed),
    );
    // a takes 1, then 2 (1 held): 7 left; b spends 6 of them one at a time: 1 left.
    assert!(a.check(&key, &policy, 1).await.allowed && a.check(&key, &policy, 1).await.allowed);
    for _ in 0..6 {
        assert!(b.check(&key, &plain, 1).await.allowed);
    }
    assert!(a.check(&key, &policy, 1).await.allowed, "the held unit");
    // a's next batches (the one taken ahead, then its own) do not fit the 1 left: the request alone does.
    assert!(a.check(&key, &policy, 1).await.allowed);
    assert!(!a.check(&key, &policy, 1).await.allowed, "then the bucket is empty");
    assert_eq!(a.held(&key, &policy), 0);
}

#[tokio::test]
async fn a_batch_in_a_multi_limit_check_comes_from_the_buckets_alone() {
    let server = Server::builder().single();
    let l = limiter(&server, FailurePolicy::Closed);
    let bucket = still_bucket(100).batched(8, Duration::from_secs(60)).unwrap();
    let window = Policy::fixed_window(100, Duration::from_secs(600))
        .unwrap()
        .batched(8, Duration::from_secs(60))
        .unwrap();
    let (route, global) = (unique_key("{c}:route"), unique_key("{c}:global"));
    for _ in 0..10 {
        assert!(
            l.check_all(&[Limit::new(&route, &bucket, 1), Limit::new(&global, &window, 1)]).await.allowed
        );
    }
    assert!(l.held(&route, &bucket) > 0);
    assert_eq!(l.held(&global, &window), 0, "a window's end is known only from its own answer");
    let plain_window = Policy::fixed_window(100, Duration::from_secs(600)).unwrap();
    assert_eq!(l.check(&global, &plain_window, 0).await.remaining, 90, "one unit per request");
}

#[test]
fn the_kinds_that_take_no_refunds_refuse_batches_and_bounds_are_checked() {
    let minute = Duration::from_secs(60);
    let log = Policy::sliding_log(10, minute).unwrap().batched(2, minute).unwrap_err();
    assert_eq!(log.to_string(), "invalid batch: a sliding_log cannot batch: it takes no refunds");
    assert!(Policy::concurrency(10, minute).unwrap().batched(2, minute).is_err());
    assert!(still_bucket(10).batched(0, minute).is_err());
    assert!(still_bucket(10).batched(11, minute).is_err());
    assert!(still_bucket(10).batched(10, Duration::ZERO).is_err());
    assert!(Policy::sliding_counter(10, minute).unwrap().batched(10, minute).is_ok());
}
