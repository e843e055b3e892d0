//! Partial grants (`RL.TAKE`): as many tokens as a bucket holds now, up to a maximum, for workers and
//! batch consumers ("up to 100 of my quota"), in one call, under the limiter's failure policy.

use crate::connection::Backend;
use crate::decision::Decision;
use crate::error::CallError;
use crate::limiter::{now_ns, Limiter};
use crate::policy::Policy;
use crate::Limit;
use ratelimit_core::kind::LimiterKind;

/// What a partial grant took.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Taken {
    /// The bucket after the grant: `allowed` when at least one token was taken, `remaining` after
    /// taking, `retry_after` (when none was) until one token is there; `degraded` when the failure
    /// policy decided.
    pub decision: Decision,
    /// Tokens taken, from 0 to `max`.
    pub taken: u64,
}

impl Limiter {
    /// Takes as many whole tokens as the token bucket `policy` holds at `key` now, up to `max`
    /// (`RL.TAKE`). The same key and state as [`check`](Limiter::check) with that policy. Never
    /// fails: when Redis cannot decide, the failure policy does, marked `degraded`: `Open` grants
    /// all `max`, `Closed` takes none, `LocalFallback` takes what the in-process bucket's share
    /// holds, up to `max`. A call that cannot be built (not a token bucket, `max` of 0) is refused
    /// whatever the failure policy (none taken, `retry_after` None, not degraded), as by
    /// [`check`](Limiter::check); [`take_strict`](Self::take_strict) returns it as an error.
    pub async fn take(&self, key: &str, policy: &Policy, max: u64) -> Taken {
        let (taken, short_circuited) = match self.take_strict(key, policy, max).await {
            Ok(taken) => (taken, false),
            Err(CallError::Usage(reason)) => {
                (Taken { decision: self.refuse(&[Limit::new(key, policy, max)], reason), taken: 0 }, false)
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
        if let Backend::Local(local) = self.backend() {
            return Ok(local.take(&Limit::new(key, policy, max), now_ns(), false));
        }
        let mut cmd = crate::command::with_params("RL.TAKE", key, policy);
        cmd.arg(max);
        let value = self.query(&cmd).await?;
        let reply: Vec<i64> = redis::from_redis_value(value).map_err(|e| CallError::Reply(e.to_string()))?;
        let (Some(decision), Some(&taken)) = (reply.get(..5).and_then(Decision::from_reply), reply.get(5))
        else {
            return Err(CallError::Reply(format!("{reply:?}")));
        };
        Ok(Taken { decision, taken: u64::try_from(taken).unwrap_or(0) })
    }
}
