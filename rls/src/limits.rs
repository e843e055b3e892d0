//! From a descriptor's `rate_limit` to a client policy: envoyproxy/ratelimit's units, and the
//! extension's algorithms.

use redis_ratelimit_client::{Policy, PolicyError};
use std::time::Duration;

/// envoyproxy/ratelimit's units (case-insensitive in its YAML, as there). A month is 30 days and a year
/// 365, as envoyproxy/ratelimit divides them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    pub fn parse(text: &str) -> Option<Unit> {
        Some(match text.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// Envoy's `RateLimitUnit` / `RateLimitResponse.RateLimit.Unit` number (they agree).
    pub fn from_proto(n: i32) -> Option<Unit> {
        Some(match n {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    pub fn to_proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }
}

/// The extension: which of the module's limiters decides a descriptor (`fixed_window` when unsaid,
/// envoyproxy/ratelimit's one algorithm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// RL.FIXED: `requests_per_unit` per window of one `unit`.
    FixedWindow,
    /// RL.SLIDECOUNT: the sliding window counter over one `unit`.
    SlidingWindow,
    /// RL.SLIDE: the exact sliding log over one `unit` (cost 1 per request).
    SlidingLog,
    /// RL.TOKEN: refilled at `requests_per_unit` per `unit`, bursts of `burst` (default
    /// `requests_per_unit`).
    TokenBucket,
    /// The extension's concurrency limit (RL.ACQUIRE / RL.RELEASE): at most `requests_per_unit` leases
    /// held at once, each ending by itself one `unit` after it was taken unless released first.
    Concurrency,
}

impl Algorithm {
    pub fn parse(text: &str) -> Option<Algorithm> {
        Some(match text {
            "fixed_window" => Algorithm::FixedWindow,
            "sliding_window" => Algorithm::SlidingWindow,
            "sliding_log" => Algorithm::SlidingLog,
            "token_bucket" => Algorithm::TokenBucket,
            "concurrency" => Algorithm::Concurrency,
            _ => return None,
        })
    }

    /// The name in Redis keys and logs.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Concurrency => "concurrency",
        }
    }
}

/// A rate limit that the module cannot hold.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LimitError(String);

impl From<PolicyError> for LimitError {
    fn from(e: PolicyError) -> Self {
        LimitError(e.to_string())
    }
}

/// The policy for `requests` per `unit` with `algorithm`; None for 0 requests per unit (every request is
/// over the limit, as in envoyproxy/ratelimit, with nothing to ask Redis).
pub fn policy(
    algorithm: Algorithm,
    requests: u32,
    unit: Unit,
    burst: Option<u64>,
) -> Result<Option<Policy>, LimitError> {
    if requests == 0 {
        return Ok(None);
    }
    let window = Duration::from_secs(unit.seconds());
    let policy = match algorithm {
        Algorithm::FixedWindow => Policy::fixed_window(u64::from(requests), window)?,
        Algorithm::SlidingWindow => Policy::sliding_counter(u64::from(requests), window)?,
        Algorithm::SlidingLog => Policy::sliding_log(u64::from(requests), window)?,
        Algorithm::Concurrency => Policy::concurrency(u64::from(requests), window)?,
        Algorithm::TokenBucket => {
            // Whole tokens per second as the module parses them: the shortest decimal of the f64.
            let rate = f64::from(requests) / unit.seconds() as f64;
            Policy::token_bucket(burst.unwrap_or(u64::from(requests)), rate)?
        }
    };
    Ok(Some(policy))
}
