//! Exact parsing of the decimal numbers that commands take (`5`, `0.5`, `2.5e-1`).
//!
//! Rates and windows are parsed into an integer mantissa and a power of ten, never into a float, so
//! that `0.1` means exactly one tenth and every later computation is integer arithmetic.

/// A non-negative decimal number `mantissa * 10^exponent`, parsed exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decimal {
    pub mantissa: u128,
    pub exponent: i32,
}

/// Why a byte string is not a usable decimal number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecimalError {
    /// Not of the form `[+]digits[.digits][e[+-]digits]` (NaN, inf, empty, letters, a minus sign on a
    /// non-zero value, ...).
    NotANumber,
    /// Negative, which no parameter accepts.
    Negative,
    /// More significant digits or a larger exponent than can be computed exactly.
    OutOfRange,
}

impl std::fmt::Display for DecimalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DecimalError::NotANumber => "not a decimal number",
            DecimalError::Negative => "negative",
            DecimalError::OutOfRange => "out of range",
        })
    }
}

impl std::error::Error for DecimalError {}

/// Significant digits kept exactly; u128 holds 38.
pub const MAX_DIGITS: usize = 36;
/// Exponents beyond this are out of range for every parameter (rates, windows).
pub const MAX_EXPONENT: i32 = 60;

impl Decimal {
    pub fn parse(bytes: &[u8]) -> Result<Decimal, DecimalError> {
        let (negative, rest) = match bytes.first() {
            Some(b'-') => (true, &bytes[1..]),
            Some(b'+') => (false, &bytes[1..]),
            _ => (false, bytes),
        };
        let (number, exp_part) = match rest.iter().position(|&b| b == b'e' || b == b'E') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (int_part, frac_part) = match number.iter().position(|&b| b == b'.') {
            Some(i) => (&number[..i], &number[i + 1..]),
            None => (number, &number[number.len()..]),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DecimalError::NotANumber);
        }
        if !int_part.iter().chain(frac_part).all(u8::is_ascii_digit) {
            return Err(DecimalError::NotANumber);
        }
        let mut exponent = match exp_part {
            Some(e) => parse_exponent(e)?,
            None => 0,
        };
        // Leading zeros carry nothing; trailing zeros of the fraction neither.
        let frac_trimmed = trim_end_zeros(frac_part);
        let mut mantissa: u128 = 0;
        let mut digits = 0usize;
        for &d in int_part.iter().chain(frac_trimmed) {
            if mantissa == 0 && d == b'0' {
                continue;
            }
            digits += 1;
            if digits > MAX_DIGITS {
                return Err(DecimalError::OutOfRange);
            }
            mantissa = mantissa * 10 + u128::from(d - b'0');
        }
        exponent = exponent.checked_sub(frac_trimmed.len() as i32).ok_or(DecimalError::OutOfRange)?;
        if mantissa == 0 {
            return Ok(Decimal { mantissa: 0, exponent: 0 });
        }
        if negative {
            return Err(DecimalError::Negative);
        }
        if exponent.abs() > MAX_EXPONENT + MAX_DIGITS as i32 {
            return Err(DecimalError::OutOfRange);
        }
        Ok(Decimal { mantissa, exponent })
    }

    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// `ceil(numerator / self)`, or None when it does not fit in an u128 (or self is zero).
    ///
    /// When scaling the numerator to the divisor's precision would overflow (a divisor with 30 or more
    /// decimal places, such as `0.083333333333333328707404064062` for 5/60 as Java or Python print
    /// it), the divisor's last digits are dropped, rounding it down, until it fits: the quotient is
    /// then at least the exact one and off by far less than one unit of the result.
    pub fn div_ceil_into(&self, numerator: u128) -> Option<u128> {
        let (mut mantissa, mut exponent) = (self.mantissa, self.exponent);
        loop {
            if mantissa == 0 {
                return None;
            }
            // numerator / (mantissa * 10^exponent)
            let scaled = if exponent >= 0 {
                return Some(numerator.div_ceil(mantissa.checked_mul(pow10(exponent as u32)?)?));
            } else {
                pow10((-exponent) as u32).and_then(|p| numerator.checked_mul(p))
            };
            match scaled {
                Some(num) => return Some(num.div_ceil(mantissa)),
                None => {
                    mantissa /= 10;
                    exponent += 1;
                }
            }
        }
    }

    /// `ceil(self * factor)`, or None on overflow.
    pub fn mul_ceil(&self, factor: u128) -> Option<u128> {
        let scaled = self.mantissa.checked_mul(factor)?;
        if self.exponent >= 0 {
            scaled.checked_mul(pow10(self.exponent as u32)?)
        } else {
            // A divisor larger than any u128 rounds every non-zero value up to 1.
            match pow10((-self.exponent) as u32) {
                Some(den) => Some(scaled.div_ceil(den)),
                None => Some(u128::from(scaled > 0)),
            }
        }
    }

    /// `self * factor` when it is a whole number, None when it has a fraction or overflows.
    pub fn mul_exact(&self, factor: u128) -> Option<u128> {
        let scaled = self.mantissa.checked_mul(factor)?;
        if self.exponent >= 0 {
            return scaled.checked_mul(pow10(self.exponent as u32)?);
        }
        let den = pow10((-self.exponent) as u32)?;
        (scaled % den == 0).then_some(scaled / den)
    }
}

fn pow10(exp: u32) -> Option<u128> {
    10u128.checked_pow(exp)
}

fn trim_end_zeros(digits: &[u8]) -> &[u8] {
    let end = digits.iter().rposition(|&d| d != b'0').map_or(0, |i| i + 1);
    &digits[..end]
}

fn parse_exponent(bytes: &[u8]) -> Result<i32, DecimalError> {
    let (negative, digits) = match bytes.first() {
        Some(b'-') => (true, &bytes[1..]),
        Some(b'+') => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(DecimalError::NotANumber);
    }
    let mut value: i32 = 0;
    for &d in digits {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(i32::from(d - b'0')))
            .filter(|v| *v <= 10_000)
            .ok_or(DecimalError::OutOfRange)?;
    }
    Ok(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Result<Decimal, DecimalError> {
        Decimal::parse(s.as_bytes())
    }

    #[test]
    fn parses_plain_and_scientific_forms() {
        let cases = [
            ("5", 5, 0),
            ("0.5", 5, -1),
            ("+2.50", 25, -1),
            (".25", 25, -2),
            ("3.", 3, 0),
            ("1e3", 1, 3),
            ("1.5E-2", 15, -3),
            ("007", 7, 0),
            ("0.000", 0, 0),
        ];
        for (input, mantissa, exponent) in cases {
            assert_eq!(dec(input), Ok(Decimal { mantissa, exponent }), "{input}");
        }
    }

    #[test]
    fn rejects_what_is_not_a_finite_decimal() {
        for input in
            ["", ".", "-", "nan", "NaN", "inf", "-inf", "1e", "e5", "1.2.3", "1,5", " 1", "0x10", "1e+"]
        {
            assert_eq!(dec(input), Err(DecimalError::NotANumber), "{input:?}");
        }
        assert_eq!(dec("-1"), Err(DecimalError::Negative));
        assert_eq!(dec("-0"), Ok(Decimal { mantissa: 0, exponent: 0 }));
        assert_eq!(dec("1e400"), Err(DecimalError::OutOfRange));
        assert_eq!(dec("1e-400"), Err(DecimalError::OutOfRange));
        assert_eq!(dec("1e99999999999"), Err(DecimalError::OutOfRange));
        assert_eq!(dec(&"9".repeat(40)), Err(DecimalError::OutOfRange));
    }

    #[test]
    fn arithmetic_is_exact() {
        let third = dec("3").unwrap();
        assert_eq!(third.div_ceil_into(1_000_000_000), Some(333_333_334));
        assert_eq!(dec("0.5").unwrap().div_ceil_into(1_000_000_000), Some(2_000_000_000));
        assert_eq!(dec("1.5").unwrap().mul_ceil(1000), Some(1500));
        assert_eq!(dec("0.0015").unwrap().mul_ceil(1000), Some(2));
        assert_eq!(dec("0.0015").unwrap().mul_exact(1000), None);
        assert_eq!(dec("2.5").unwrap().mul_exact(1000), Some(2500));
        assert_eq!(dec("1e-70").unwrap().mul_ceil(1000), Some(1));
        assert_eq!(dec("1e70").unwrap().mul_ceil(1000), None);
    }

    #[test]
    fn long_divisors_round_down_instead_of_overflowing() {
        // 5/60 as BigDecimal prints it: 1e9 * 10^30 overflows an u128.
        let five_per_minute = dec("0.083333333333333328707404064062").unwrap();
        assert_eq!(five_per_minute.div_ceil_into(1_000_000_000), Some(12_000_000_001));
        assert_eq!(dec("0.0833333333333333").unwrap().div_ceil_into(1_000_000_000), Some(12_000_000_001));
        let third = dec(&format!("0.{}", "3".repeat(35))).unwrap();
        assert_eq!(third.div_ceil_into(1_000_000_000), Some(3_000_000_001));
        // Too small to fit after all: still None.
        assert_eq!(dec("1e-35").unwrap().div_ceil_into(1_000_000_000), None);
    }
}
