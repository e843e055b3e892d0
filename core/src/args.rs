//! The argument grammar the limiters' commands share: numbers from raw bytes into validated values,
//! and their text for a client that writes the commands. The module parses with these; the client
//! renders with `seconds` and has its text parsed back by the same functions, so the two cannot drift.

use crate::decimal::{Decimal, DecimalError};
use crate::error::ParamError;
use crate::limits::MAX_HORIZON_NS;
use crate::time::{Nanos, NANOS_PER_MS};
use std::fmt;

/// Why a command's arguments do not build a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgError {
    /// Too few or too many arguments.
    WrongArity,
    /// An option or kind that the command does not know.
    Syntax,
    /// An argument out of range: names the field.
    Invalid(ParamError),
}

impl From<ParamError> for ArgError {
    fn from(e: ParamError) -> ArgError {
        ArgError::Invalid(e)
    }
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::WrongArity => f.write_str("wrong number of arguments"),
            ArgError::Syntax => f.write_str("syntax error"),
            ArgError::Invalid(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ArgError {}

/// A whole number for `param` (which names the field and says what it must be), at least `min`.
#[inline]
pub fn whole_for(bytes: &[u8], param: ParamError, min: u64) -> Result<u64, ParamError> {
    whole(bytes, param.field, min, param.expected)
}

/// A whole number `>= min`, written in plain decimal digits.
#[inline]
pub fn whole(bytes: &[u8], field: &'static str, min: u64, expected: &'static str) -> Result<u64, ParamError> {
    let digits = bytes.strip_prefix(b"+").unwrap_or(bytes);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(ParamError::new(field, expected));
    }
    let mut value: u64 = 0;
    for &d in digits {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or(ParamError::new(field, TOO_LARGE))?;
    }
    if value < min {
        return Err(ParamError::new(field, expected));
    }
    Ok(value)
}

/// A decimal number `> 0`, parsed exactly.
#[inline]
pub fn positive_decimal(bytes: &[u8], param: ParamError) -> Result<Decimal, ParamError> {
    match Decimal::parse(bytes) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) | Err(DecimalError::NotANumber) | Err(DecimalError::Negative) => Err(param),
        Err(DecimalError::OutOfRange) => Err(ParamError::new(param.field, OUT_OF_RANGE)),
    }
}

/// A length in seconds (decimal, whole milliseconds, within the horizon), as nanoseconds; `param`
/// names it (a window, a lease).
#[inline]
pub fn seconds_ns(bytes: &[u8], param: ParamError) -> Result<Nanos, ParamError> {
    let seconds = positive_decimal(bytes, param)?;
    let ms = seconds.mul_exact(1000).ok_or(param)?;
    let ns = ms.checked_mul(NANOS_PER_MS as u128).filter(|ns| *ns <= MAX_HORIZON_NS as u128);
    ns.map(|ns| ns as Nanos).ok_or(param)
}

/// A wait in seconds that may be zero (decimal, whole milliseconds, within the horizon), as
/// nanoseconds; `param` names it.
#[inline]
pub fn wait_ns(bytes: &[u8], param: ParamError) -> Result<Nanos, ParamError> {
    match Decimal::parse(bytes) {
        Ok(d) if d.is_zero() => Ok(0),
        Ok(_) => seconds_ns(bytes, param),
        Err(_) => Err(param),
    }
}

/// A cost that is not a whole number >= 0.
pub const COST: ParamError = ParamError::new("cost", "must be a whole number >= 0");
/// RL.TAKE's and RL.RESERVE's `max` that is not a whole number >= 1.
pub const MAX: ParamError = ParamError::new("max", "must be a whole number >= 1");
/// A whole number beyond 64 bits (`field` is the parameter's).
pub const TOO_LARGE: &str = "too large";
/// A decimal with more digits than can be computed exactly (`field` is the parameter's).
pub const OUT_OF_RANGE: &str = "out of range";

/// A cost or a number of units: a whole number >= 0.
#[inline]
pub fn cost(bytes: &[u8]) -> Result<u64, ParamError> {
    whole_for(bytes, COST, 0)
}

/// A length as the commands write it: decimal seconds, `1.500` for whole milliseconds; a length
/// with finer digits is written exactly (and refused by [`seconds_ns`]).
pub fn seconds(ns: u128) -> String {
    let (secs, rest) = (ns / 1_000_000_000, ns % 1_000_000_000);
    if rest % 1_000_000 == 0 {
        format!("{secs}.{:03}", rest / 1_000_000)
    } else {
        format!("{secs}.{rest:09}")
    }
}

/// Whether `arg` is the option `name` (options are case-insensitive).
#[inline]
pub fn is_option(arg: Option<&&[u8]>, name: &[u8]) -> bool {
    arg.is_some_and(|a| a.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: ParamError = ParamError::new("window", "must be seconds");

    #[test]
    fn whole_numbers() {
        let parse = |s: &str| whole(s.as_bytes(), "cost", 0, "must be a whole number >= 0");
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("+12"), Ok(12));
        assert_eq!(parse("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse("18446744073709551616"), Err(ParamError::new("cost", "too large")));
        for bad in ["", "-1", "1.5", "1e3", " 1", "abc", "+"] {
            assert_eq!(parse(bad), Err(ParamError::new("cost", "must be a whole number >= 0")), "{bad:?}");
        }
        assert_eq!(
            whole(b"0", "capacity", 1, "must be a whole number >= 1"),
            Err(ParamError::new("capacity", "must be a whole number >= 1"))
        );
    }

    #[test]
    fn lengths_are_whole_milliseconds_and_render_back() {
        let window_ns = |b: &[u8]| seconds_ns(b, WINDOW);
        assert_eq!(window_ns(b"1.5"), Ok(1_500_000_000));
        assert_eq!(window_ns(b"0.001"), Ok(1_000_000));
        for bad in [&b"0"[..], b"0.0005", b"-1", b"abc", b"3000000001"] {
            assert_eq!(window_ns(bad), Err(WINDOW), "{bad:?}");
        }
        assert_eq!(window_ns(b"1e400"), Err(ParamError::new("window", "out of range")));
        assert_eq!(seconds(1_500_000_000), "1.500");
        assert_eq!(seconds(60_000_000_000), "60.000");
        assert_eq!(seconds(1_500_000), "0.001500000");
        for ns in [1_000_000u128, 1_500_000_000, 3_000_000_000_000_000_000, 1_500_000] {
            let back = window_ns(seconds(ns).as_bytes()).ok().map(|n| n as u128);
            assert_eq!(back, (ns % 1_000_000 == 0).then_some(ns), "{ns}");
        }
    }

    #[test]
    fn positive_decimals() {
        let rate = ParamError::new("rate", "must be a number > 0");
        let parse = |s: &str| positive_decimal(s.as_bytes(), rate);
        assert!(parse("0.5").is_ok());
        for bad in ["0", "-2", "nan", "NaN", "inf"] {
            assert_eq!(parse(bad), Err(rate), "{bad}");
        }
        assert_eq!(parse("1e400"), Err(ParamError::new("rate", "out of range")));
    }
}
