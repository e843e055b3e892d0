//! Partial grants (`RL.TAKE`): as many tokens as a bucket holds now, up to a maximum, for workers and
//! batch consumers ("up to 100 of my quota"), in one call.

use crate::decision::Decision;
use crate::error::CallError;
use crate::limiter::Limiter;
use crate::policy::Policy;
use ratelimit_core::kind::LimiterKind;

/// What a partial grant took.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Taken {
    /// The bucket after the grant: `allowed` when at least one token was taken, `remaining` after
    /// taking, `retry_after` (when none was) until one token is there.
    pub decision: Decision,
    /// Tokens taken, from 0 to `max`.
    pub taken: u64,
}

impl Limiter {
    /// Takes as many whole tokens as the token bucket `policy` holds at `key` now, up to `max`
    /// (`RL.TAKE`). The same key and state as [`check`](Limiter::check) with that policy. No failure
    /// policy applies: when Redis cannot decide, the error says why (a batch can wait and try again).
    pub async fn take(&self, key: &str, policy: &Policy, max: u64) -> Result<Taken, CallError> {
        if policy.kind() != LimiterKind::TokenBucket {
            return Err(CallError::Usage("partial grants are taken from token buckets"));
        }
        if max == 0 {
            return Err(CallError::Usage("take at least one token (max >= 1)"));
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
