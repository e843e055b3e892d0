//! The bounds every limiter shares, in one place: the module validates arguments against them and the
//! client validates policies against them.

use crate::time::{Nanos, NANOS_PER_SEC};

/// The longest state horizon, in seconds (about 95 years): a bucket's full refill time, a window, a
/// lease. It keeps `now + horizon` far inside i64 nanoseconds for any clock reading of this century.
pub const MAX_HORIZON_SECS: u64 = 3_000_000_000;

/// [`MAX_HORIZON_SECS`] in nanoseconds.
pub const MAX_HORIZON_NS: Nanos = MAX_HORIZON_SECS as Nanos * NANOS_PER_SEC;

/// The highest token rate, per second: one token per nanosecond, the clock's resolution.
pub const MAX_RATE_PER_SEC: u64 = 1_000_000_000;

/// The largest limit of a sliding log: its memory grows with the limit.
pub const MAX_LOG_LIMIT: u64 = 1_000_000;

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
