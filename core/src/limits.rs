//! The bounds every limiter shares, in one place: the module validates arguments against them and the
//! client validates policies against them.

use crate::time::{Nanos, NANOS_PER_SEC};

// Each bound's digits are written once, here, as a macro: the constants below are these numbers and
// the error texts spell them with `concat!` at compile time (no bound is typed twice in core).
macro_rules! max_horizon_secs {
    () => {
        3000000000
    };
}
macro_rules! max_rate_per_sec {
    () => {
        1000000000
    };
}
macro_rules! max_log_limit {
    () => {
        1000000
    };
}
macro_rules! max_lease_limit {
    () => {
        100000
    };
}
pub(crate) use {max_horizon_secs, max_lease_limit, max_log_limit, max_rate_per_sec};

/// The longest state horizon, in seconds (about 95 years): a bucket's full refill time, a window, a
/// lease. It keeps `now + horizon` far inside i64 nanoseconds for any clock reading of this century.
pub const MAX_HORIZON_SECS: u64 = max_horizon_secs!();

/// [`MAX_HORIZON_SECS`] in nanoseconds.
pub const MAX_HORIZON_NS: Nanos = MAX_HORIZON_SECS as Nanos * NANOS_PER_SEC;

/// The highest token rate, per second: one token per nanosecond, the clock's resolution.
pub const MAX_RATE_PER_SEC: u64 = max_rate_per_sec!();

/// The largest limit of a sliding log: its memory grows with the limit.
pub const MAX_LOG_LIMIT: u64 = max_log_limit!();

/// The largest concurrency limit (and weight): each held lease costs an entry of the key's value.
pub const MAX_LEASE_LIMIT: u64 = max_lease_limit!();

/// What a length in seconds (a window, a lease) must be: the text of its error.
pub const SECONDS_EXPECTED: &str =
    concat!("must be a number of seconds > 0, in whole milliseconds (0.001 to ", max_horizon_secs!(), ")");

/// `value` when it lies in `range`, else `error`.
pub(crate) fn in_range<T: PartialOrd>(
    value: T,
    range: std::ops::RangeInclusive<T>,
    error: crate::error::ParamError,
) -> Result<T, crate::error::ParamError> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(error)
    }
}
