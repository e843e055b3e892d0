//! Waiting for capacity, for workers and batch jobs: check, and while denied, sleep the `retry_after`
//! Redis gave (plus a little jitter, so waiters denied together do not wake together) and check again,
//! until allowed or the time allowed for waiting is spent.

use crate::command::Limit;
use crate::decision::Decision;
use crate::limiter::Limiter;
use crate::policy::Policy;
use std::time::Duration;
use tokio::time::Instant;

/// Never sleep less than this between two checks (a denial's `retry_after` is at least 1 ms anyway).
const MIN_SLEEP: Duration = Duration::from_millis(1);

impl Limiter {
    /// Waits until `cost` fits under `policy` at `key`, for at most `max_wait`, and returns the last
    /// decision: allowed (and charged), or the denial that waiting could not get past.
    ///
    /// Between checks it sleeps the denial's `retry_after` plus a random extra of up to a tenth of it
    /// (up to 1 ms for short waits), so waiters denied at the same moment do not all come back at
    /// the same moment and fight over one token again. It never spins: every check but the first
    /// follows a sleep. It returns at once, without sleeping:
    /// - when the request can never fit (`retry_after` is `None`: the cost is above the limit);
    /// - when the next `retry_after` ends after `max_wait`: it would be denied then too;
    /// - when the decision is degraded: an outage is not capacity to wait for, so the failure policy's
    ///   decision comes back as [`check`](Self::check) returns it (allowed under `Open`, denied under
    ///   `Closed`, the local fallback's decision).
    ///
    /// ```no_run
    /// # use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
    /// # use std::time::Duration;
    /// # async fn job(limiter: Limiter) -> Result<(), Box<dyn std::error::Error>> {
    /// let upstream = Policy::token_bucket(10, 2.0)?;
    /// let decision = limiter.until_ready("rl:upstream:crm", &upstream, 1, Duration::from_secs(30)).await;
    /// if decision.allowed {
    ///     // call the upstream
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn until_ready(&self, key: &str, policy: &Policy, cost: u64, max_wait: Duration) -> Decision {
        self.until_ready_all(&[Limit::new(key, policy, cost)], max_wait).await
    }

    /// [`until_ready`](Self::until_ready) for several limits checked together, as
    /// [`check_all`](Self::check_all) does: it waits for the limit that denied.
    pub async fn until_ready_all(&self, limits: &[Limit<'_>], max_wait: Duration) -> Decision {
        // None: a wait too long for the clock to express, which is no bound.
        let give_up = Instant::now().checked_add(max_wait);
        loop {
            let decision = self.check_all(limits).await;
            if decision.allowed || decision.degraded {
                return decision;
            }
            let Some(retry_after) = decision.retry_after else { return decision };
            let mut sleep = jittered(retry_after).max(MIN_SLEEP);
            if let Some(give_up) = give_up {
                let left = give_up.saturating_duration_since(Instant::now());
                // Past the bound (the last check was at it), or denied for longer than is left.
                if left.is_zero() || retry_after > left {
                    return decision;
                }
                sleep = sleep.min(left);
            }
            tokio::time::sleep(sleep).await;
        }
    }
}

/// `retry_after` plus a random extra of up to a tenth of it (up to 1 ms for short waits).
fn jittered(retry_after: Duration) -> Duration {
    let spread = (retry_after / 10).max(MIN_SLEEP);
    let spread_ns = u64::try_from(spread.as_nanos()).unwrap_or(u64::MAX);
    retry_after.saturating_add(Duration::from_nanos(fastrand::u64(0..=spread_ns)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_adds_up_to_a_tenth_and_at_least_spreads_over_a_millisecond() {
        for _ in 0..1000 {
            let long = jittered(Duration::from_secs(1));
            assert!(long >= Duration::from_secs(1) && long <= Duration::from_millis(1100), "{long:?}");
            let short = jittered(Duration::from_millis(2));
            assert!(short >= Duration::from_millis(2) && short <= Duration::from_millis(3), "{short:?}");
        }
        let spread: std::collections::HashSet<Duration> =
            (0..100).map(|_| jittered(Duration::from_secs(1))).collect();
        assert!(spread.len() > 50, "waiters do not wake together: {} distinct of 100", spread.len());
        assert_eq!(jittered(Duration::MAX), Duration::MAX);
    }
}
