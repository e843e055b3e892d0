//! Limiter policies: which algorithm, with which parameters. A policy is core's validated limiter
//! (`ratelimit_core::kind::AnyLimiter`) with its parameters as the module's commands take them: the
//! constructors write the parameters and have core's grammar parse them back, so a policy is valid
//! exactly when the module would accept it, and an invalid one names the field in core's words:
//! `Policy::token_bucket(0, 5.0)` is an error that names `capacity`.

use crate::batching::{self, Batch};
use crate::error::PolicyError;
use ratelimit_core::args::seconds;
use ratelimit_core::error::ParamError;
use ratelimit_core::kind::{AnyLimiter, LimiterKind, RequestForm};
use std::sync::Arc;
use std::time::Duration;

/// One limit's algorithm and parameters; which module command decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    limiter: AnyLimiter,
    /// Its two parameters as the commands take them (`capacity rate`, `limit window`, `limit
    /// lease`). Shared: a policy is cloned per request (per-caller lookups), its text is not copied.
    params: Arc<[String; 2]>,
    /// Units taken in batches and spent in this process (docs/high-volume.md); None: one call per
    /// check.
    batch: Option<Batch>,
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

impl From<ParamError> for PolicyError {
    fn from(e: ParamError) -> PolicyError {
        PolicyError::new(e.field, e.expected)
    }
}

impl Policy {
    /// `kind`'s policy from its two parameters as its command takes them, validated by core.
    fn parse(kind: LimiterKind, params: [String; 2]) -> Result<Policy, PolicyError> {
        let limiter =
            AnyLimiter::parse(kind, [params[0].as_bytes(), params[1].as_bytes()]).map_err(|e| match e {
                ratelimit_core::args::ArgError::Invalid(p) => p.into(),
                other => PolicyError::new("policy", other.to_string()),
            })?;
        Ok(Policy { limiter, params: Arc::new(params), batch: None })
    }

    /// A token bucket (RL.TOKEN): bursts of up to `capacity`, `per_second` tokens per second on average.
    pub fn token_bucket(capacity: u64, per_second: f64) -> Result<Policy, PolicyError> {
        // Rust prints the shortest decimal that reads back as the same f64: exact for the module's
        // parser (which refuses NaN, infinities and anything <= 0 as it refuses them from any client).
        Self::parse(LimiterKind::TokenBucket, [capacity.to_string(), format!("{per_second}")])
    }

    /// `limit` requests (or units) per `window` with the given window algorithm (positive whole
    /// milliseconds).
    pub fn window(algorithm: Window, limit: u64, window: Duration) -> Result<Policy, PolicyError> {
        let kind = match algorithm {
            Window::SlidingLog => LimiterKind::SlidingLog,
            Window::Fixed => LimiterKind::FixedWindow,
            Window::SlidingCounter => LimiterKind::SlidingCounter,
        };
        Self::parse(kind, [limit.to_string(), seconds(window.as_nanos())])
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
        Self::parse(LimiterKind::Leases, [limit.to_string(), seconds(lease.as_nanos())])
    }

    /// This policy with its units taken in batches of up to `max` (1 to the limit) per call and
    /// spent in this process, each batch held at most `lease` (at least 1 ms, whole milliseconds;
    /// [`DEFAULT_LEASE`](crate::DEFAULT_LEASE) is 1 s) before the unused units go back: fewer round
    /// trips for hot keys, never admitted beyond the limit, at most `batch - 1` units per key idle
    /// in each instance (docs/high-volume.md). Token buckets, fixed windows and sliding counters;
    /// the kinds that take no refunds (a sliding log, a concurrency limit) refuse it.
    pub fn batched(self, max: u64, lease: Duration) -> Result<Policy, PolicyError> {
        if batching::window_end(self.kind()).is_none() {
            return Err(PolicyError::new(
                "batch",
                batching::BATCH_KIND.replace("{kind}", self.kind().name()),
            ));
        }
        if max == 0 || max > self.limit() {
            return Err(PolicyError::new("batch", batching::BATCH_SIZE));
        }
        if lease.as_millis() == 0 || !lease.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(PolicyError::new("lease", batching::BATCH_LEASE));
        }
        Ok(Policy { batch: Some(Batch { max, lease }), ..self })
    }

    /// The batch this policy's units are taken in, if any.
    pub fn batch(&self) -> Option<Batch> {
        self.batch
    }

    /// True when a request of cost 0 reads this limit without taking anything (a sliding log
    /// counts requests: it has no cost 0).
    pub(crate) fn kind_is_peekable(&self) -> bool {
        self.kind().request_form() == RequestForm::Cost
    }

    /// True for a concurrency limit ([`Policy::concurrency`]).
    pub fn is_concurrency(&self) -> bool {
        self.kind().request_form() == RequestForm::Lease
    }

    /// The capacity or limit: what `RateLimit-Limit` says.
    pub fn limit(&self) -> u64 {
        self.limiter.limit()
    }

    /// The time the limit is measured over: the window, or a token bucket's full refill time
    /// (`capacity / rate`), a concurrency limit's lease. The IETF draft's `w` parameter.
    pub fn window_length(&self) -> Duration {
        Duration::from_nanos(u64::try_from(self.limiter.period_ns()).unwrap_or(0))
    }

    /// Which kind of limiter this is.
    pub(crate) fn kind(&self) -> LimiterKind {
        self.limiter.kind()
    }

    /// The validated core limiter.
    #[doc(hidden)] // for the contract's generator
    pub fn limiter(&self) -> &AnyLimiter {
        &self.limiter
    }

    /// Its two parameters as its command takes them after the key.
    #[doc(hidden)] // for the contract's generator
    pub fn params(&self) -> &[String; 2] {
        &self.params
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
        assert_eq!(message, "invalid capacity: must be a whole number >= 1");
    }

    #[test]
    fn valid_policies_report_limit_and_window() {
        let p = Policy::token_bucket(10, 5.0).unwrap();
        assert_eq!((p.limit(), p.window_length()), (10, Duration::from_secs(2)));
        let w = Policy::sliding_log(5, Duration::from_millis(900_000)).unwrap();
        assert_eq!((w.limit(), w.window_length()), (5, Duration::from_secs(900)));
        assert_eq!(
            Policy::token_bucket(10, 5.0).unwrap().limiter().share(3),
            *Policy::token_bucket(3, 5.0 / 3.0).unwrap().limiter()
        );
        assert_eq!(Policy::fixed_window(2, Duration::from_secs(1)).unwrap().limiter().share(5).limit(), 1);
        let c = Policy::concurrency(5, Duration::from_millis(1500)).unwrap();
        assert_eq!(
            (c.limit(), c.window_length(), c.limiter().share(2).limit()),
            (5, Duration::from_millis(1500), 2)
        );
    }

    #[test]
    fn every_kind_has_a_policy() {
        let one = Duration::from_secs(1);
        for kind in LimiterKind::ALL {
            // A kind added to core's registry without a constructor here fails to compile.
            let policy = match kind {
                // A reservation is a token bucket's request (`Limiter::until_ready`), not a policy.
                LimiterKind::TokenBucket | LimiterKind::Reservation => Policy::token_bucket(2, 1.0),
                LimiterKind::FixedWindow => Policy::fixed_window(2, one),
                LimiterKind::SlidingCounter => Policy::sliding_counter(2, one),
                LimiterKind::SlidingLog => Policy::sliding_log(2, one),
                LimiterKind::Leases => Policy::concurrency(2, one),
            };
            let policy = policy.unwrap();
            assert_eq!(
                (policy.kind(), policy.limit(), policy.window_length()),
                (
                    kind.owner(),
                    2,
                    Duration::from_secs([2, 1][usize::from(kind.owner() != LimiterKind::TokenBucket)])
                )
            );
        }
    }
}
