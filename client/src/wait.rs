//! Waiting for capacity, for workers and batch jobs, as reservations: one call takes what the token
//! buckets can grant within the wait (RL.RESERVE, or RESERVE groups of RL.ALL), the bucket's queue
//! puts waiters in arrival order, and the caller sleeps the wait it was given, once. A reservation
//! given up while sleeping (the future dropped: cancelled, timed out) is refunded. Limits that
//! cannot reserve (windows, logs) decide now; while one of them denies, the waiter sleeps that
//! denial's `retry_after` (plus a little jitter) and asks again.

use crate::command::{self, Limit};
use crate::connection::Transport;
use crate::decision::Decision;
use crate::limiter::{now_ns, Limiter};
use crate::policy::Policy;
use ratelimit_core::kind::LimiterKind;
use std::time::Duration;
use tokio::time::Instant;

/// Never sleep less than this between two calls (a denial's `retry_after` is at least 1 ms anyway).
const MIN_SLEEP: Duration = Duration::from_millis(1);

impl Limiter {
    /// Waits until `cost` fits under `policy` at `key`, for at most `max_wait`, and returns the
    /// decision: allowed (charged, and the wait is over: use it now), or the denial that waiting
    /// could not get past.
    ///
    /// A token bucket is waited for by reservation: one call takes the tokens from the bucket's
    /// future and says how long to sleep before using them, so waiters are served in the order
    /// they asked, one call per grant. A reservation waits at most one full refill of the bucket;
    /// a longer `max_wait` is spent in turns (asking again when the queue ahead is shorter than a
    /// refill). If the returned future is dropped while it sleeps, the tokens go back to the bucket
    /// (`RL.REFUND`, sent in the background). It returns at once, without sleeping:
    /// - when the request can never fit (`retry_after` is `None`: the cost is above the limit);
    /// - when the wait needed is longer than `max_wait`;
    /// - when the decision is degraded: an outage is not capacity to wait for, so the failure policy's
    ///   decision comes back as [`check`](Self::check) returns it (allowed under `Open`, denied under
    ///   `Closed`, the local fallback's decision, which does not wait).
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
    /// [`check_all`](Self::check_all) does, in one call each time: the token buckets among them
    /// reserve, the other limits decide at the call. A sliding log cannot reserve (nor can a
    /// window): while one of them denies, this polls, sleeping its `retry_after` plus a random
    /// extra of up to a tenth of it (so waiters denied together do not come back together).
    pub async fn until_ready_all(&self, limits: &[Limit<'_>], max_wait: Duration) -> Decision {
        // None: a wait too long for the clock to express, which is no bound.
        let give_up = Instant::now().checked_add(max_wait);
        loop {
            let left = give_up.map_or(max_wait, |g| g.saturating_duration_since(Instant::now()));
            let decision = self.reserve_all(limits, left).await;
            if decision.degraded {
                return decision;
            }
            if decision.allowed {
                let reserved = limits.iter().map(|l| (l.key, l.policy, l.cost));
                return self.sleep_reserved(decision, reserved).await;
            }
            let Some(retry_after) = decision.retry_after else { return decision };
            if left.is_zero() || retry_after > left {
                return decision;
            }
            // The in-process backend decides now: its denials are waited out whole.
            let reserving = limits.get(decision.limiting).map(|l| l.policy).filter(|_| !self.is_local());
            tokio::time::sleep(next_try(retry_after, reserving).min(left)).await;
        }
    }

    fn is_local(&self) -> bool {
        matches!(self.backend(), Transport::Local(_))
    }

    /// One call over `limits`, the token buckets reserving within `max_wait`.
    async fn reserve_all(&self, limits: &[Limit<'_>], max_wait: Duration) -> Decision {
        let result = match self.backend() {
            Transport::Local(local) => Ok(local.decide(limits, now_ns(), false)),
            _ => match command::reserve(limits, max_wait) {
                Ok(cmd) => self.send_decision(&cmd, limits).await,
                Err(e) => Err(e),
            },
        };
        self.settle(limits, result)
    }

    /// Sleeps the wait an allowed reservation was given, refunding what it reserved (`key`,
    /// `policy`, units) if dropped meanwhile; then the decision, usable now.
    pub(crate) async fn sleep_reserved<'a>(
        &self,
        mut decision: Decision,
        reserved: impl Iterator<Item = (&'a str, &'a Policy, u64)>,
    ) -> Decision {
        let wait = decision.retry_after.unwrap_or_default();
        if !wait.is_zero() {
            let mut held = Held { limiter: self.clone(), reserved: vec![] };
            held.reserved.extend(
                reserved
                    .filter(|(_, p, units)| *units > 0 && p.kind().refunds())
                    .map(|(k, p, u)| (k.to_owned(), p.clone(), u)),
            );
            tokio::time::sleep(wait).await;
            held.reserved.clear();
            decision.retry_after = Some(Duration::ZERO);
        }
        decision
    }
}

/// How long to sleep after a denial of `retry_after` by the limit of `policy` (None: a limit that
/// did not reserve): a reserving token bucket can be asked again as soon as the wait is within one
/// refill (a reservation's longest); any other limit when its `retry_after` is over, plus jitter.
pub(crate) fn next_try(retry_after: Duration, policy: Option<&Policy>) -> Duration {
    let sleep = match policy {
        Some(p) if p.kind() == LimiterKind::TokenBucket => {
            let refill = Duration::from_nanos(u64::try_from(p.limiter().period_ns()).unwrap_or(0));
            jittered(retry_after.saturating_sub(refill))
        }
        _ => jittered(retry_after),
    };
    sleep.max(MIN_SLEEP)
}

/// A reservation being slept on: refunded when dropped before its wait is over.
struct Held {
    limiter: Limiter,
    reserved: Vec<(String, Policy, u64)>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.reserved.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (limiter, reserved) = (self.limiter.clone(), std::mem::take(&mut self.reserved));
        runtime.spawn(async move {
            for (key, policy, units) in reserved {
                limiter.give_back(&key, &policy, units).await;
            }
        });
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
