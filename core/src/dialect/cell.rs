//! `CL.THROTTLE key max_burst count_per_period period [quantity]` as redis-cell 0.5 replies, and
//! `RL.THROTTLE`, the same command under the name Valkey's request for a built-in limiter proposes.
//!
//! A bucket of `max_burst + 1` tokens refilled at `count_per_period` tokens per `period` seconds. The
//! reply: `limited` (0 allowed, 1 limited), `limit` (max_burst + 1), `remaining`, `retry_after` and
//! `reset_after` in seconds, rounded as redis-cell rounds them: the whole seconds, plus one when the
//! rest is at least a millisecond. `retry_after` is -1 when allowed, and when the quantity is above
//! the limit (it never fits).
//!
//! Where redis-cell and this engine differ (see docs/migrating.md):
//! - the emission interval: redis-cell truncates `period / count` to whole nanoseconds, so it may
//!   refill faster than asked (by less than 1 ns per token); this engine rounds it up, never faster;
//! - `remaining`: redis-cell divides truncated microseconds in floating point, which is off when the
//!   interval is not a whole number of microseconds; this engine divides nanoseconds exactly;
//! - inputs redis-cell does not check: negative numbers (computed with wrapping arithmetic there) and
//!   a burst that would take longer than `limits::MAX_HORIZON_SECS` to refill are errors here;
//! - a quantity of 0 is a peek here (same reply, nothing written); redis-cell writes the key.
//!
//! Stored as redis-cell stores it: the TAT in Unix nanoseconds as decimal digits, so that a rollback to
//! redis-cell keeps every bucket. Keys expire on RL.TOKEN's grid (max(1 s, 1/16 of a full refill),
//! whole seconds) after the bucket is full again (redis-cell: on the millisecond).

use crate::error::{ParamError, StateError};
use crate::format::{decimal_tat, decimal_tat_bytes, Layout};
use crate::limiter::{Change, Field, Write};
use crate::state::{SmallState, Step};
use crate::time::{ceil_ms, Nanos, NANOS_PER_MS, NANOS_PER_SEC};
use crate::token_bucket::{TokenBucket, REFILL_TOO_LONG};
use crate::verdict::Verdict;

/// How a dialect's call went wrong; each command words it its own way (see `cell_message` and
/// `param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThrottleError {
    /// Not 4 or 5 arguments after the command name.
    Usage,
    /// An argument is not a 64-bit integer; the argument as given.
    NotAnInteger { field: &'static str, given: Vec<u8> },
    /// A negative argument (redis-cell computes with it, wrapping; refused here).
    Negative { field: &'static str },
    /// A count or period of zero, or an interval below a nanosecond.
    ZeroRate,
    /// A full burst would take longer than the horizon to refill.
    TooSlow,
}

/// The error reply as redis-cell words it (without the leading `-`): `Cell error: Store error: ...`.
impl std::fmt::Display for ThrottleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cell error: Store error: ")?;
        match self {
            ThrottleError::Usage => f.write_str(USAGE),
            ThrottleError::NotAnInteger { given, .. } => {
                write!(f, "Couldn't parse as integer: {}", String::from_utf8_lossy(given))
            }
            ThrottleError::Negative { field } => write!(f, "Negative values are not supported: {field}"),
            ThrottleError::ZeroRate => f.write_str("Zero rates are not supported"),
            ThrottleError::TooSlow => f.write_str(concat!(
                "Rates this slow are not supported: a full burst must refill within ",
                crate::limits::max_horizon_secs!(),
                " seconds"
            )),
        }
    }
}

impl std::error::Error for ThrottleError {}

const USAGE: &str = "Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]";

impl ThrottleError {
    /// The error as this module words its own commands' (RL.THROTTLE); None for the arity error.
    pub fn param(&self) -> Option<ParamError> {
        Some(match self {
            ThrottleError::Usage => return None,
            ThrottleError::NotAnInteger { field, .. } | ThrottleError::Negative { field } => {
                ParamError::new(field, "must be a whole number >= 0")
            }
            ThrottleError::ZeroRate => {
                ParamError::new("rate", "count_per_period / period must be > 0 and at most 1e9 per second")
            }
            ThrottleError::TooSlow => REFILL_TOO_LONG,
        })
    }
}

/// A parsed call: the bucket and the quantity to take (0: a peek).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    pub bucket: TokenBucket,
    pub quantity: u64,
}

/// A 64-bit integer as redis-cell parses one (Rust's `i64` syntax: an optional sign, then digits).
fn integer(field: &'static str, given: &[u8]) -> Result<i64, ThrottleError> {
    std::str::from_utf8(given)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| ThrottleError::NotAnInteger { field, given: given.to_vec() })
}

impl Throttle {
    /// The arguments after the key: `max_burst count_per_period period [quantity]`, checked in
    /// redis-cell's order (each number parsed, then a zero rate).
    pub fn parse(args: &[&[u8]]) -> Result<Throttle, ThrottleError> {
        let (burst, count, period, quantity) = match *args {
            [b, c, p] => (b, c, p, None),
            [b, c, p, q] => (b, c, p, Some(q)),
            _ => return Err(ThrottleError::Usage),
        };
        let burst = integer("max_burst", burst)?;
        let count = integer("count_per_period", count)?;
        let period = integer("period", period)?;
        let quantity = quantity.map(|q| integer("quantity", q)).transpose()?.unwrap_or(1);
        for (field, value) in
            [("max_burst", burst), ("count_per_period", count), ("period", period), ("quantity", quantity)]
        {
            if value < 0 {
                return Err(ThrottleError::Negative { field });
            }
        }
        let period_ns = i128::from(period) * i128::from(NANOS_PER_SEC);
        // redis-cell's emission interval, truncated in floating point: zero is its "zero rate".
        if count == 0 || period == 0 || (period_ns as f64 / count as f64) as i64 == 0 {
            return Err(ThrottleError::ZeroRate);
        }
        // burst + 1 <= 2^63: fits.
        let bucket = TokenBucket::per_period(burst as u64 + 1, count as u64, period_ns as u128)
            .map_err(|_| ThrottleError::TooSlow)?;
        Ok(Throttle { bucket, quantity: quantity as u64 })
    }
}

/// Seconds as redis-cell reports a duration: the whole seconds, plus one when the rest is at least a
/// millisecond (so 10.0005 s is 10 and 10.001 s is 11).
pub fn cell_secs(ns: Nanos) -> i64 {
    let ns = ns.max(0);
    ns / NANOS_PER_SEC + i64::from(ns % NANOS_PER_SEC >= NANOS_PER_MS)
}

/// CL.THROTTLE's five integers for a token bucket's verdict.
pub fn reply(verdict: &Verdict) -> super::Reply {
    let retry = match (verdict.allowed, verdict.retry_after_ns) {
        (false, Some(wait)) => cell_secs(wait),
        _ => -1,
    };
    [
        i64::from(!verdict.allowed),
        i64::try_from(verdict.limit).unwrap_or(i64::MAX),
        i64::try_from(verdict.remaining).unwrap_or(i64::MAX),
        retry,
        cell_secs(verdict.reset_after_ns),
    ]
}

impl SmallState for Throttle {
    type State = Nanos;
    const LAYOUT: Layout = Layout::DecimalTat;

    /// redis-cell's decimal TAT; a token bucket's own value (RL.TOKEN's) is read too.
    fn decode(stored: &[u8]) -> Result<Nanos, StateError> {
        decimal_tat(stored).map_or_else(|| <TokenBucket as SmallState>::decode(stored), Ok)
    }

    #[inline]
    fn step(&self, tat: Option<Nanos>, now: Nanos, cost: u64) -> Step<Nanos> {
        self.bucket.step(tat, now, cost)
    }

    fn write(&self, tat: &Nanos, previous: Option<&Nanos>, _now: Nanos) -> Write {
        Write {
            change: Change::Set(decimal_tat_bytes(*tat)),
            expiry: self.bucket.expiry(*tat, previous.copied()),
        }
    }

    fn fields(tat: &Nanos, now: Nanos) -> Vec<Field> {
        vec![("tat_ms", Some(ceil_ms(*tat))), ("backlog_ms", Some(ceil_ms(tat.saturating_sub(now))))]
    }

    fn give_back(&self, tat: Option<Nanos>, now: Nanos, units: u64) -> Option<Nanos> {
        self.bucket.refund_tat(tat, now, units)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Limiter;

    const SEC: Nanos = NANOS_PER_SEC;
    const T0: Nanos = 1_700_000_000 * SEC;

    fn parse(args: &str) -> Result<Throttle, ThrottleError> {
        Throttle::parse(&args.split(' ').map(str::as_bytes).collect::<Vec<_>>())
    }

    fn call(t: &Throttle, stored: &mut Option<Vec<u8>>, now: Nanos) -> super::super::Reply {
        let outcome = t.decide(stored.as_deref(), now, t.quantity).unwrap();
        if let Some(w) = outcome.write {
            let mut v = stored.take().unwrap_or_default();
            crate::limiter::apply(&mut v, &w.change);
            *stored = Some(v);
        }
        reply(&outcome.verdict)
    }

    #[test]
    fn redis_cell_readme_example_and_its_e2e_test() {
        let t = parse("15 30 60").unwrap();
        assert_eq!(call(&t, &mut None, T0), [0, 16, 15, -1, 2]);
        let t = parse("0 1 2").unwrap();
        let mut stored = None;
        assert_eq!(call(&t, &mut stored, T0), [0, 1, 0, -1, 2]);
        assert_eq!(call(&t, &mut stored, T0), [1, 1, 0, 2, 2]);
        assert_eq!(stored.as_deref(), Some(format!("{}", T0 + 2 * SEC).as_bytes()), "redis-cell's format");
    }

    #[test]
    fn a_quantity_above_the_limit_is_limited_with_no_retry() {
        let t = parse("4 1 1 6").unwrap();
        assert_eq!(call(&t, &mut None, T0), [1, 5, 5, -1, 0]);
    }

    #[test]
    fn errors_in_redis_cells_words_and_order() {
        let text = |args: &str| parse(args).unwrap_err().to_string();
        assert_eq!(text("1 2"), format!("Cell error: Store error: {USAGE}"));
        assert_eq!(text("1 2 3 4 5"), format!("Cell error: Store error: {USAGE}"));
        assert_eq!(text("x 1 1"), "Cell error: Store error: Couldn't parse as integer: x");
        assert_eq!(text("1 y z"), "Cell error: Store error: Couldn't parse as integer: y");
        assert_eq!(
            text("1 1 9223372036854775808"),
            "Cell error: Store error: Couldn't parse as integer: 9223372036854775808"
        );
        assert_eq!(text("1 0 60"), "Cell error: Store error: Zero rates are not supported");
        assert_eq!(text("1 1 0"), "Cell error: Store error: Zero rates are not supported");
        assert_eq!(text("1 2000000000 1"), "Cell error: Store error: Zero rates are not supported");
        assert_eq!(text("-1 1 1"), "Cell error: Store error: Negative values are not supported: max_burst");
        assert!(text("1 1 9223372036854775807").contains("Rates this slow"));
        assert!(parse("+5 1 1").is_ok(), "Rust's i64 syntax takes a plus sign");
    }

    #[test]
    fn seconds_round_as_redis_cell_rounds_them() {
        assert_eq!(cell_secs(10 * SEC + 500_000), 10);
        assert_eq!(cell_secs(10 * SEC + NANOS_PER_MS), 11);
        assert_eq!(cell_secs(500_000), 0);
        assert_eq!(cell_secs(0), 0);
    }

    #[test]
    fn reads_redis_cells_values_and_never_refills_faster_than_asked() {
        let t = parse("2 1 1").unwrap();
        let mut stored = Some(format!("{}", T0 + 3 * SEC).into_bytes());
        assert_eq!(call(&t, &mut stored, T0), [1, 3, 0, 1, 3], "a TAT that redis-cell wrote carries on");
    }
}
