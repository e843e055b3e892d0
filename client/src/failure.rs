//! The failure policy: what a limiter does when Redis cannot decide.

/// What a limiter does when Redis cannot decide (unreachable, slower than the deadline, breaker open).
/// There is no default: each limiter states its choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Allow: the API stays available during a Redis outage, unprotected for its duration. Suits
    /// public APIs where the limiter protects rather than sells something.
    Open,
    /// Deny: whatever is behind the limiter is protected, and a Redis outage becomes an API outage.
    /// Suits limits that guard something that cannot take unbounded load, or paid quotas.
    Closed,
    /// Decide in this process with the same algorithms and the limit divided by `instances` (the
    /// number of application instances sharing the limit): a rough bound that stays available.
    LocalFallback { instances: u32 },
}
