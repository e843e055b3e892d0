//! The local fallback on a real outage: every rate kind is served by one algorithm, core's token
//! bucket of its limit refilled over its period at the instance's share (`client/src/fallback.rs`),
//! whatever its own algorithm is.

mod support;

use redis_ratelimit_client::{Decision, FailurePolicy, Policy};
use std::time::{Duration, Instant};
use support::{closed_port, DEADLINE};

/// A fixed window and a sliding log of 4 per 2 s on one of 2 instances, nothing listening: each is a
/// bucket of 2 refilled one a second. At most the share in a burst (plus what refilled while it
/// ran), every decision degraded with the share as its limit, and one back after the denial's
/// `retry_after`.
#[tokio::test]
async fn a_window_and_a_log_are_one_bucket_each_at_the_share_while_redis_is_down() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let limiter = support::builder(FailurePolicy::LocalFallback { instances: 2 })
        .deadline(DEADLINE)
        .connect(&url)
        .unwrap();
    let two_seconds = Duration::from_secs(2);
    let policies = [
        ("rl:fb:fixed", Policy::fixed_window(4, two_seconds).unwrap()),
        ("rl:fb:log", Policy::sliding_log(4, two_seconds).unwrap()),
    ];
    for (key, policy) in &policies {
        let start = Instant::now();
        let mut burst: Vec<Decision> = vec![];
        for _ in 0..5 {
            burst.push(limiter.check(key, policy, 1).await);
        }
        let took = start.elapsed();
        let allowed = burst.iter().filter(|d| d.allowed).count() as u64;
        assert!(
            (2..=2 + took.as_secs()).contains(&allowed),
            "{key}: {allowed} in {took:?}: the share, plus one a second"
        );
        assert!(burst.iter().all(|d| d.degraded && d.limit == 2), "{key}: {burst:?}");
        let denied = burst.iter().find(|d| !d.allowed).expect("a denial");
        let wait = denied.retry_after.expect("a wait");
        assert!(wait > Duration::ZERO && wait <= Duration::from_secs(1), "{key}: {denied:?}");
        tokio::time::sleep(wait).await;
        assert!(limiter.check(key, policy, 1).await.allowed, "{key}: one back after retry_after");
    }
}
