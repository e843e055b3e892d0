//! Argument parsing shared by every command: numbers from raw bytes into validated values.

use crate::server::{Arg, RlError};
use ratelimit_core::decimal::{Decimal, DecimalError};
use ratelimit_core::error::ParamError;
use ratelimit_core::fixed_window::{LIMIT, WINDOW};
use ratelimit_core::limiter::WindowLimiter;
use ratelimit_core::limits::MAX_HORIZON_NS;
use ratelimit_core::time::{Nanos, NANOS_PER_MS};

/// A whole number for `param` (which names the field and says what it must be), at least `min`.
pub fn whole_for(bytes: &[u8], param: ParamError, min: u64) -> Result<u64, RlError> {
    whole(bytes, param.field, min, param.expected)
}

/// A whole number `>= min`, written in plain decimal digits.
pub fn whole(bytes: &[u8], arg: &'static str, min: u64, expected: &'static str) -> Result<u64, RlError> {
    let digits = bytes.strip_prefix(b"+").unwrap_or(bytes);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(RlError::invalid(arg, expected));
    }
    let mut value: u64 = 0;
    for &d in digits {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or(RlError::invalid(arg, "too large"))?;
    }
    if value < min {
        return Err(RlError::invalid(arg, expected));
    }
    Ok(value)
}

/// A decimal number `> 0`, parsed exactly.
pub fn positive_decimal(bytes: &[u8], arg: &'static str, expected: &'static str) -> Result<Decimal, RlError> {
    match Decimal::parse(bytes) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) | Err(DecimalError::NotANumber) | Err(DecimalError::Negative) => {
            Err(RlError::invalid(arg, expected))
        }
        Err(DecimalError::OutOfRange) => Err(RlError::invalid(arg, "out of range")),
    }
}

/// A window length in seconds (decimal, whole milliseconds), as nanoseconds.
pub fn window(bytes: &[u8]) -> Result<Nanos, RlError> {
    let seconds = positive_decimal(bytes, WINDOW.field, WINDOW.expected)?;
    let ms = seconds.mul_exact(1000).ok_or(RlError::from(WINDOW))?;
    let ns = ms.checked_mul(NANOS_PER_MS as u128).filter(|ns| *ns <= MAX_HORIZON_NS as u128);
    ns.map(|ns| ns as Nanos).ok_or(RlError::from(WINDOW))
}

/// The first `N` arguments and the rest; the arity error when there are fewer.
pub fn split<const N: usize>(args: &[Arg]) -> Result<(&[Arg; N], &[Arg]), RlError> {
    args.split_first_chunk::<N>().ok_or(RlError::WrongArity)
}

/// A cost or a number of units: a whole number >= 0.
pub fn cost(bytes: &[u8]) -> Result<u64, RlError> {
    whole(bytes, "cost", 0, "must be a whole number >= 0")
}

/// A window limiter from its `limit window` arguments, parsed as the window commands parse them.
pub fn window_limiter<L: WindowLimiter>(limit: &Arg, window_arg: &Arg) -> Result<L, RlError> {
    Ok(L::with_window(whole_for(limit.bytes(), LIMIT, 1)?, window(window_arg.bytes())?)?)
}

/// The arguments of the window-counting limiters: `key limit window [cost]`.
pub struct CountArgs<'a> {
    pub key: &'a Arg,
    pub limit: u64,
    pub window_ns: Nanos,
    pub cost: u64,
}

impl<'a> CountArgs<'a> {
    pub fn parse(args: &'a [Arg]) -> Result<CountArgs<'a>, RlError> {
        let ([key, limit, window_arg], rest) = split::<3>(args)?;
        let cost = match rest {
            [] => 1,
            [units] => cost(units.bytes())?,
            _ => return Err(RlError::WrongArity),
        };
        Ok(CountArgs {
            key,
            limit: whole_for(limit.bytes(), LIMIT, 1)?,
            window_ns: window(window_arg.bytes())?,
            cost,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers() {
        let parse = |s: &str| whole(s.as_bytes(), "cost", 0, "must be a whole number >= 0");
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("+12"), Ok(12));
        assert_eq!(parse("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse("18446744073709551616"), Err(RlError::invalid("cost", "too large")));
        for bad in ["", "-1", "1.5", "1e3", " 1", "abc", "+"] {
            assert_eq!(parse(bad), Err(RlError::invalid("cost", "must be a whole number >= 0")), "{bad:?}");
        }
        assert_eq!(
            whole(b"0", "capacity", 1, "must be a whole number >= 1"),
            Err(RlError::invalid("capacity", "must be a whole number >= 1"))
        );
    }

    #[test]
    fn windows_are_whole_milliseconds() {
        assert_eq!(window(b"1.5"), Ok(1_500_000_000));
        assert_eq!(window(b"0.001"), Ok(1_000_000));
        for bad in [&b"0"[..], b"0.0005", b"-1", b"abc", b"3000000001"] {
            assert!(window(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn positive_decimals() {
        let parse = |s: &str| positive_decimal(s.as_bytes(), "rate", "must be a number > 0");
        assert!(parse("0.5").is_ok());
        assert_eq!(parse("0"), Err(RlError::invalid("rate", "must be a number > 0")));
        assert_eq!(parse("-2"), Err(RlError::invalid("rate", "must be a number > 0")));
        assert_eq!(parse("nan"), Err(RlError::invalid("rate", "must be a number > 0")));
        assert_eq!(parse("1e400"), Err(RlError::invalid("rate", "out of range")));
    }
}
