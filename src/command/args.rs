//! Argument parsing shared by every command: numbers from raw bytes into validated values.

use super::error::RlError;
use crate::algo::decimal::{Decimal, DecimalError};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers() {
        let parse = |s: &str| whole(s.as_bytes(), "cost", 0, "must be a whole number >= 0");
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("+12"), Ok(12));
        assert_eq!(parse("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(
            parse("18446744073709551616"),
            Err(RlError::invalid("cost", "too large"))
        );
        for bad in ["", "-1", "1.5", "1e3", " 1", "abc", "+"] {
            assert_eq!(
                parse(bad),
                Err(RlError::invalid("cost", "must be a whole number >= 0")),
                "{bad:?}"
            );
        }
        assert_eq!(
            whole(b"0", "capacity", 1, "must be a whole number >= 1"),
            Err(RlError::invalid("capacity", "must be a whole number >= 1"))
        );
    }

    #[test]
    fn positive_decimals() {
        let parse = |s: &str| positive_decimal(s.as_bytes(), "rate", "must be a number > 0");
        assert!(parse("0.5").is_ok());
        assert_eq!(parse("0"), Err(RlError::invalid("rate", "must be a number > 0")));
        assert_eq!(parse("-2"), Err(RlError::invalid("rate", "must be a number > 0")));
        assert_eq!(
            parse("nan"),
            Err(RlError::invalid("rate", "must be a number > 0"))
        );
        assert_eq!(parse("1e400"), Err(RlError::invalid("rate", "out of range")));
    }
}
