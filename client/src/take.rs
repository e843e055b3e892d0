//! Partial grants (`RL.TAKE`): as many tokens as a bucket holds now, up to a maximum, for workers and
//! batch consumers ("up to 100 of my quota"), in one call, under the limiter's failure policy; and
//! batches that wait (`RL.RESERVE .. UPTO`): at least a minimum, up to a maximum, in one reservation.

use crate::connection::Transport;
use crate::decision::{Decision, Taken};
use crate::error::CallError;
use crate::limiter::{now_ns, Limiter};
use crate::policy::Policy;
use crate::reply_class::ReplyClass;
use crate::Limit;
use ratelimit_core::kind::LimiterKind;
use ratelimit_core::token_bucket::Reserve;
use std::time::Duration;
use tokio::time::Instant;

impl Limiter {
    /// Takes as many whole tokens as the token bucket `policy` holds at `key` now, up to `max`
    /// (`RL.TAKE`). The same key and state as [`check`](Limiter::check) with that policy. Never
    /// fails: when Redis cannot decide, the failure policy does, marked `degraded`: `Open` grants
    /// all `max`, `Closed` takes none, `LocalFallback` takes what the in-process bucket's share
    /// holds, up to `max`. A call that cannot be built (not a token bucket, `max` of 0) is refused
    /// whatever the failure policy (none taken, `retry_after` None, not degraded), as by
    /// [`check`](Limiter::check); [`take_strict`](Self::take_strict) returns it as an error.
    pub async fn take(&self, key: &str, policy: &Policy, max: u64) -> Taken {
        self.settle_take(key, policy, max, self.take_strict(key, policy, max).await)
    }

    /// A grant of up to `max` from a call's result: Redis' own, a refusal of a call that cannot be
    /// built, or the failure policy's; counted.
    fn settle_take(&self, key: &str, policy: &Policy, max: u64, result: Result<Taken, CallError>) -> Taken {
        let (taken, short_circuited) = match result {
            Ok(taken) => (taken, false),
            Err(e) if ReplyClass::of(&e) == ReplyClass::Usage => {
                (Taken { decision: self.refuse(&[Limit::new(key, policy, max)], &e), taken: 0 }, false)
            }
            Err(e) => (self.degrade_take(key, policy, max, &e), matches!(e, CallError::BreakerOpen)),
        };
        self.record(&taken.decision, short_circuited);
        taken
    }

    /// Like [`take`](Self::take) without the failure policy: Redis' grant or the reason there is
    /// none. The breaker and the deadline still apply.
    pub async fn take_strict(&self, key: &str, policy: &Policy, max: u64) -> Result<Taken, CallError> {
        if policy.kind() != LimiterKind::TokenBucket {
            return Err(CallError::Usage("partial grants are taken from token buckets"));
        }
        if max == 0 {
            return Err(CallError::Usage("take at least one token (max >= 1)"));
        }
        if let Transport::Local(local) = self.backend() {
            return Ok(local.take(&Limit::new(key, policy, max), now_ns(), false));
        }
        taken_reply(self.query(&crate::command::take(key, policy, max)).await?)
    }
}

impl Limiter {
    /// A batch for a worker: waits for at least `min` tokens of the token bucket `policy` at `key`,
    /// for at most `max_wait`, and takes as many more as the bucket holds when asked, up to `max`,
    /// in one reservation (`RL.RESERVE key capacity rate min max_wait UPTO max`): the tokens are
    /// taken when asked, and this sleeps until they may be used, served in the order workers asked
    /// (see [`until_ready`](Self::until_ready); dropped while sleeping, the tokens go back). Under
    /// the failure policy like [`take`](Self::take), marked `degraded`: `Open` grants `max`,
    /// `Closed` takes none, `LocalFallback` takes what the in-process bucket's share holds, up to
    /// `max` (without waiting). `taken` is 0 when no batch of `min` could be had within `max_wait`.
    ///
    /// ```no_run
    /// # use redis_ratelimit_client::{Limiter, Policy};
    /// # use std::time::Duration;
    /// # async fn job(limiter: Limiter) -> Result<(), Box<dyn std::error::Error>> {
    /// let upstream = Policy::token_bucket(20, 20.0)?;
    /// let batch = limiter.take_within("rl:upstream:crm", &upstream, 1, 10, Duration::from_secs(5)).await;
    /// for _ in 0..batch.taken {
    ///     // one upstream call per token
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn take_within(
        &self,
        key: &str,
        policy: &Policy,
        min: u64,
        max: u64,
        max_wait: Duration,
    ) -> Taken {
        let result = self.take_within_strict(key, policy, min, max, max_wait).await;
        self.settle_take(key, policy, max, result)
    }

    /// Like [`take_within`](Self::take_within) without the failure policy: Redis' grant or the
    /// reason there is none. The breaker and the deadline still apply.
    pub async fn take_within_strict(
        &self,
        key: &str,
        policy: &Policy,
        min: u64,
        max: u64,
        max_wait: Duration,
    ) -> Result<Taken, CallError> {
        if min == 0 || max < min {
            return Err(CallError::Usage("a batch takes at least one token, and max >= min"));
        }
        let give_up = Instant::now().checked_add(max_wait);
        loop {
            let left = give_up.map_or(max_wait, |g| g.saturating_duration_since(Instant::now()));
            let taken = self.reserve_batch(key, policy, min, max, left).await?;
            let decision = taken.decision;
            if decision.allowed {
                let reserved = std::iter::once((key, policy, taken.taken));
                let decision = self.sleep_reserved(decision, reserved).await;
                return Ok(Taken { decision, taken: taken.taken });
            }
            match decision.retry_after {
                Some(retry_after) if !left.is_zero() && retry_after <= left => {
                    tokio::time::sleep(crate::wait::next_try(retry_after, Some(policy)).min(left)).await;
                }
                _ => return Ok(Taken { decision, taken: 0 }),
            }
        }
    }

    /// One reservation of a batch.
    async fn reserve_batch(
        &self,
        key: &str,
        policy: &Policy,
        min: u64,
        max: u64,
        max_wait: Duration,
    ) -> Result<Taken, CallError> {
        let cmd = crate::command::reserve_batch(key, policy, min, max, max_wait)?;
        if let Transport::Local(local) = self.backend() {
            let max_wait_ns = i64::try_from(crate::command::whole_ms(max_wait)).unwrap_or(i64::MAX);
            let request = Reserve { cost: min, upto: max, max_wait_ns };
            return Ok(local.reserve(&Limit::new(key, policy, max), request, now_ns(), false));
        }
        taken_reply(self.query(&cmd).await?)
    }

    /// Gives back what a reservation given up had taken: to Redis, or to the in-process state.
    pub(crate) async fn give_back(&self, key: &str, policy: &Policy, units: u64) {
        if let Transport::Local(local) = self.backend() {
            return local.refund(key, policy, units, now_ns());
        }
        let result = match crate::command::refund(key, policy, units) {
            Ok(cmd) => self.query(&cmd).await.map(drop),
            Err(e) => Err(e),
        };
        if let Err(error) = result {
            tracing::debug!(limiter = %self.name(), key, units, %error, "a reservation given up could not be refunded");
        }
    }
}

/// A reply of five fields and the number taken (RL.TAKE, RL.RESERVE with UPTO).
fn taken_reply(value: redis::Value) -> Result<Taken, CallError> {
    let reply: Vec<i64> = redis::from_redis_value(value).map_err(|e| CallError::Reply(e.to_string()))?;
    let (Some(decision), Some(&taken)) = (reply.get(..5).and_then(Decision::from_reply), reply.get(5)) else {
        return Err(CallError::Reply(format!("{reply:?}")));
    };
    Ok(Taken { decision, taken: u64::try_from(taken).unwrap_or(0) })
}
