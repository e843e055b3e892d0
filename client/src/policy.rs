//! Limiter policies: which algorithm, with which parameters. Validated when built, so a request never
//! meets an invalid one: `Policy::token_bucket(0, 5.0)` is an error that names `capacity`.

use crate::error::PolicyError;
use ratelimit_core::decimal::Decimal;
use ratelimit_core::limits::{MAX_HORIZON_SECS as MAX_SECONDS, MAX_LOG_LIMIT, MAX_RATE_PER_SEC};
use ratelimit_core::token_bucket::TokenBucket;
use std::sync::Arc;
use std::time::Duration;

/// RL.ACQUIRE's largest limit.
const MAX_LEASE_LIMIT: u64 = 100_000;

/// The highest rate the module's nanosecond clock can express.
const MAX_RATE: f64 = MAX_RATE_PER_SEC as f64;

/// One limit's algorithm and parameters; which module command decides it.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    /// RL.TOKEN: a bucket of `capacity` tokens refilled at `rate` per second.
    Token { capacity: u64, rate: Rate },
    /// RL.SLIDE, RL.FIXED, RL.SLIDECOUNT: `limit` units per `window`.
    Window { algorithm: Window, limit: u64, window: Duration },
    /// RL.ACQUIRE: at most `limit` weight of leases held at once, each ending `lease` after it was
    /// taken or last renewed.
    Lease { limit: u64, lease: Duration },
}

/// The window algorithms of the module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// RL.SLIDE: exact sliding log (memory grows with the limit; at most 1,000,000).
    SlidingLog,
    /// RL.FIXED: a window starts at the key's first request.
    Fixed,
    /// RL.SLIDECOUNT: sliding window counter, O(1) memory, within 2x of the limit in the worst case.
    SlidingCounter,
}

/// A validated rate in tokens per second, kept as the decimal text sent to Redis.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rate {
    pub per_second: f64,
    /// Shared: a policy is cloned per request (per-caller lookups), its text is not copied.
    pub text: Arc<str>,
}

impl Policy {
    /// A token bucket (RL.TOKEN): bursts of up to `capacity`, `per_second` tokens per second on average.
    pub fn token_bucket(capacity: u64, per_second: f64) -> Result<Policy, PolicyError> {
        if capacity == 0 {
            return Err(PolicyError::new("capacity", "must be at least 1"));
        }
        if !per_second.is_finite() || per_second <= 0.0 {
            return Err(PolicyError::new(
                "rate",
                format!("must be a number > 0 tokens per second, got {per_second}"),
            ));
        }
        if per_second > MAX_RATE {
            return Err(PolicyError::new("rate", "must be at most 1e9 tokens per second"));
        }
        // Rust prints the shortest decimal that reads back as the same f64: exact for the module's parser.
        let text = format!("{per_second}");
        let decimal =
            Decimal::parse(text.as_bytes()).map_err(|_| PolicyError::new("rate", "is not a decimal"))?;
        // What is left to refuse is the refill time, with the module's own words.
        TokenBucket::new(capacity, decimal).map_err(|e| PolicyError::new(e.field, e.expected))?;
        Ok(Policy { kind: Kind::Token { capacity, rate: Rate { per_second, text: text.into() } } })
    }

    /// `limit` requests (or units) per `window` with the given window algorithm.
    pub fn window(algorithm: Window, limit: u64, window: Duration) -> Result<Policy, PolicyError> {
        if limit == 0 {
            return Err(PolicyError::new("limit", "must be at least 1"));
        }
        if algorithm == Window::SlidingLog && limit > MAX_LOG_LIMIT {
            return Err(PolicyError::new(
                "limit",
                format!("a sliding log holds at most {MAX_LOG_LIMIT}; use Window::SlidingCounter"),
            ));
        }
        if window.is_zero() || !window.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(PolicyError::new("window", "must be a positive whole number of milliseconds"));
        }
        if window.as_secs() > MAX_SECONDS {
            return Err(PolicyError::new("window", format!("must be at most {MAX_SECONDS} seconds")));
        }
        Ok(Policy { kind: Kind::Window { algorithm, limit, window } })
    }

    /// The exact sliding window (RL.SLIDE).
    pub fn sliding_log(limit: u64, window: Duration) -> Result<Policy, PolicyError> {
        Self::window(Window::SlidingLog, limit, window)
    }

    /// The fixed window (RL.FIXED).
    pub fn fixed_window(limit: u64, window: Duration) -> Result<Policy, PolicyError> {
        Self::window(Window::Fixed, limit, window)
    }

    /// The sliding window counter (RL.SLIDECOUNT).
    pub fn sliding_counter(limit: u64, window: Duration) -> Result<Policy, PolicyError> {
        Self::window(Window::SlidingCounter, limit, window)
    }

    /// A concurrency limit (RL.ACQUIRE): at most `limit` (1 to 100,000) weight of work in flight at
    /// once, each permit held on a lease of `lease` (positive whole milliseconds) that its holder
    /// renews while it lives, so a crashed holder's slot comes back when the lease ends. Taken with
    /// [`Limiter::acquire`](crate::Limiter::acquire), never with `check` (it has to be released).
    pub fn concurrency(limit: u64, lease: Duration) -> Result<Policy, PolicyError> {
        if limit == 0 || limit > MAX_LEASE_LIMIT {
            return Err(PolicyError::new("limit", format!("must be from 1 to {MAX_LEASE_LIMIT}")));
        }
        if lease.is_zero() || !lease.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(PolicyError::new("lease", "must be a positive whole number of milliseconds"));
        }
        if lease.as_secs() > MAX_SECONDS {
            return Err(PolicyError::new("lease", format!("must be at most {MAX_SECONDS} seconds")));
        }
        Ok(Policy { kind: Kind::Lease { limit, lease } })
    }

    /// True when a request of cost 0 reads this limit without taking anything (a sliding log
    /// counts requests: it has no cost 0).
    pub(crate) fn kind_is_peekable(&self) -> bool {
        !matches!(self.kind, Kind::Window { algorithm: Window::SlidingLog, .. })
    }

    /// True for a concurrency limit ([`Policy::concurrency`]).
    pub fn is_concurrency(&self) -> bool {
        matches!(self.kind, Kind::Lease { .. })
    }

    /// The capacity or limit: what `RateLimit-Limit` says.
    pub fn limit(&self) -> u64 {
        match &self.kind {
            Kind::Token { capacity, .. } => *capacity,
            Kind::Window { limit, .. } | Kind::Lease { limit, .. } => *limit,
        }
    }

    /// The time the limit is measured over: the window, or a token bucket's full refill time
    /// (`capacity / rate`), a concurrency limit's lease. The IETF draft's `w` parameter.
    pub fn window_length(&self) -> Duration {
        match &self.kind {
            Kind::Token { capacity, rate } => Duration::from_secs_f64(*capacity as f64 / rate.per_second),
            Kind::Window { window, .. } => *window,
            Kind::Lease { lease, .. } => *lease,
        }
    }

    pub(crate) fn kind(&self) -> &Kind {
        &self.kind
    }

    /// This policy with its limit (and rate) divided by `instances`, at least 1: the share of one
    /// application instance when each decides alone (the local fallback).
    pub(crate) fn share(&self, instances: u32) -> Policy {
        let n = u64::from(instances.max(1));
        let kind = match &self.kind {
            Kind::Token { capacity, rate } => {
                let per_second = rate.per_second / n as f64;
                Kind::Token {
                    capacity: (capacity / n).max(1),
                    rate: Rate { per_second, text: format!("{per_second}").into() },
                }
            }
            Kind::Window { algorithm, limit, window } => {
                Kind::Window { algorithm: *algorithm, limit: (limit / n).max(1), window: *window }
            }
            Kind::Lease { limit, lease } => Kind::Lease { limit: (limit / n).max(1), lease: *lease },
        };
        Policy { kind }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_policies_are_refused_naming_the_field() {
        assert_eq!(Policy::token_bucket(0, 5.0).unwrap_err().field, "capacity");
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY, 2e9] {
            assert_eq!(Policy::token_bucket(10, rate).unwrap_err().field, "rate", "{rate}");
        }
        assert_eq!(Policy::token_bucket(u64::MAX, 1.0).unwrap_err().field, "capacity");
        assert_eq!(Policy::fixed_window(0, Duration::from_secs(1)).unwrap_err().field, "limit");
        assert_eq!(Policy::sliding_log(2_000_000, Duration::from_secs(1)).unwrap_err().field, "limit");
        for window in [Duration::ZERO, Duration::from_micros(1500), Duration::from_secs(4_000_000_000)] {
            assert_eq!(Policy::sliding_counter(5, window).unwrap_err().field, "window", "{window:?}");
        }
        for limit in [0, 100_001] {
            assert_eq!(Policy::concurrency(limit, Duration::from_secs(1)).unwrap_err().field, "limit");
        }
        for lease in [Duration::ZERO, Duration::from_micros(1500)] {
            assert_eq!(Policy::concurrency(5, lease).unwrap_err().field, "lease", "{lease:?}");
        }
        let message = Policy::token_bucket(0, 5.0).unwrap_err().to_string();
        assert_eq!(message, "invalid capacity: must be at least 1");
    }

    #[test]
    fn valid_policies_report_limit_and_window() {
        let p = Policy::token_bucket(10, 5.0).unwrap();
        assert_eq!((p.limit(), p.window_length()), (10, Duration::from_secs(2)));
        let w = Policy::sliding_log(5, Duration::from_millis(900_000)).unwrap();
        assert_eq!((w.limit(), w.window_length()), (5, Duration::from_secs(900)));
        assert_eq!(
            Policy::token_bucket(10, 5.0).unwrap().share(3),
            Policy::token_bucket(3, 5.0 / 3.0).unwrap()
        );
        assert_eq!(Policy::fixed_window(2, Duration::from_secs(1)).unwrap().share(5).limit(), 1);
        let c = Policy::concurrency(5, Duration::from_millis(1500)).unwrap();
        assert_eq!((c.limit(), c.window_length(), c.share(2).limit()), (5, Duration::from_millis(1500), 2));
    }
}
