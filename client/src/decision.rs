//! What a limiter says about one request: the five fields of every RL.* reply, typed, plus whether the
//! answer came from Redis or from the failure policy.

use std::time::Duration;

/// The outcome of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    pub allowed: bool,
    /// The capacity or limit (`RateLimit-Limit`).
    pub limit: u64,
    /// Units left after this request (`RateLimit-Remaining`).
    pub remaining: u64,
    /// Zero when allowed; when denied, how long until the same request would be allowed (rounded up
    /// to whole milliseconds, so waiting this long succeeds). `None` when the request costs more than
    /// the limit and can never be allowed.
    pub retry_after: Option<Duration>,
    /// Time until the limiter is back to its initial state: bucket full, window empty.
    pub reset_after: Duration,
    /// In a multi-limit check, the position (0-based) of the limit this decision describes: the one
    /// that denied, or the one with the fewest units left.
    pub limiting: usize,
    /// True when Redis did not decide (unreachable, too slow, breaker open) and the failure policy did.
    pub degraded: bool,
    /// True when decided in this process without a round trip: the pre-check's denial, or units a
    /// batched policy held here (docs/high-volume.md).
    pub local: bool,
}

impl Decision {
    /// True when the request can never be allowed with this policy (its cost is above the limit).
    pub fn never_fits(&self) -> bool {
        !self.allowed && self.retry_after.is_none()
    }

    /// `Retry-After` in whole seconds: rounded up, at least 1. None when allowed or never fits.
    pub fn retry_after_secs(&self) -> Option<u64> {
        if self.allowed {
            return None;
        }
        self.retry_after.map(|d| ceil_secs(d).max(1))
    }

    /// `RateLimit-Reset` in whole seconds, rounded up.
    pub fn reset_after_secs(&self) -> u64 {
        ceil_secs(self.reset_after)
    }

    /// Reads an RL.* reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms (, position)]`.
    #[doc(hidden)] // the contract's generator makes decisions with it too
    pub fn from_reply(reply: &[i64]) -> Option<Decision> {
        let [allowed, limit, remaining, retry_ms, reset_ms, rest @ ..] = reply else { return None };
        let ms = |v: i64| Duration::from_millis(u64::try_from(v).unwrap_or(0));
        Some(Decision {
            allowed: *allowed == 1,
            limit: u64::try_from(*limit).ok()?,
            remaining: u64::try_from(*remaining).ok()?,
            retry_after: (*retry_ms >= 0).then(|| ms(*retry_ms)),
            reset_after: ms(*reset_ms),
            limiting: rest.first().map_or(0, |p| usize::try_from(p - 1).unwrap_or(0)),
            degraded: false,
            local: false,
        })
    }
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_replies_and_rounds_seconds_up() {
        let d = Decision::from_reply(&[0, 10, 0, 200, 2000]).unwrap();
        assert_eq!(d.retry_after, Some(Duration::from_millis(200)));
        assert_eq!((d.retry_after_secs(), d.reset_after_secs()), (Some(1), 2));
        let never = Decision::from_reply(&[0, 10, 3, -1, 1400, 2]).unwrap();
        assert!(never.never_fits());
        assert_eq!((never.retry_after_secs(), never.reset_after_secs(), never.limiting), (None, 2, 1));
        assert_eq!(Decision::from_reply(&[1, 10, 9, 0, 200]).unwrap().retry_after_secs(), None);
        assert_eq!(Decision::from_reply(&[1, 10]), None);
    }
}

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
