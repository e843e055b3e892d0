//! Time as the algorithms see it: integer nanoseconds on the server's clock, passed in by the caller.

/// A point in time or a duration, in nanoseconds. Signed so that differences are plain subtraction;
/// an i64 spans ±292 years around the Unix epoch.
pub type Nanos = i64;

pub const NANOS_PER_MS: Nanos = 1_000_000;
pub const NANOS_PER_SEC: Nanos = 1_000_000_000;

/// Microseconds as nanoseconds, saturating.
pub fn us_to_ns(us: u64) -> Nanos {
    Nanos::try_from(us.saturating_mul(1000)).unwrap_or(Nanos::MAX)
}

/// Milliseconds, rounded up: a client that waits this long has waited at least `ns`.
pub fn ceil_ms(ns: Nanos) -> i64 {
    if ns <= 0 {
        return 0;
    }
    // Signed div_ceil is not stable; ns > 0 here, so this is the same.
    ns / NANOS_PER_MS + Nanos::from(ns % NANOS_PER_MS != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_ms_rounds_up_and_floors_at_zero() {
        assert_eq!(ceil_ms(0), 0);
        assert_eq!(ceil_ms(-5), 0);
        assert_eq!(ceil_ms(1), 1);
        assert_eq!(ceil_ms(NANOS_PER_MS), 1);
        assert_eq!(ceil_ms(NANOS_PER_MS + 1), 2);
    }
}
