//! The client's errors: invalid policies (refused when built) and failed calls to Redis.

use std::time::Duration;

/// A policy that cannot be built; names the field and says what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
#[non_exhaustive]
pub struct PolicyError {
    /// The parameter at fault: `capacity`, `rate`, `limit`, `window`, ...
    pub field: &'static str,
    pub reason: String,
}

impl PolicyError {
    pub(crate) fn new(field: &'static str, reason: impl Into<String>) -> PolicyError {
        PolicyError { field, reason: reason.into() }
    }
}

/// Why Redis gave no decision. The limiter turns each into a degraded decision by its failure policy;
/// [`Limiter::check_strict`](crate::Limiter::check_strict) returns them as they are.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    #[error("no answer from Redis within the deadline ({0:?})")]
    Deadline(Duration),
    #[error("the circuit breaker is open: Redis is not called until the cool-down ends")]
    BreakerOpen,
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("unexpected reply from Redis: {0}")]
    Reply(String),
    #[error("{0}")]
    Usage(&'static str),
    /// The address given to `connect` cannot be used (a missing scheme, a malformed URL).
    #[error("invalid Redis URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
}
