//! `GCRA key max_burst tokens_per_period period [TOKENS n]` as Redis core had it (unstable, last at
//! c3db5254b; compiled out of 8.8): its argument rules, its error texts in its order, and its reply
//! in whole seconds as it computes them. The keys are RL.TOKEN's: the same algorithm, stored the same
//! way, so RL.INSPECT, the INFO classes and RL.TOP read them.
//!
//! The reply: `limited`, `max_burst + 1`, the tokens remaining, `retry_after` (seconds, rounded up;
//! -1 when allowed, and when `n` is above `max_burst + 1`) and `full_burst_after` (seconds, rounded
//! up).
//!
//! Where core and this engine differ (see docs/migrating.md): core rounds the emission
//! interval to the nearest microsecond (at least 1 us); this engine rounds it up to the nanosecond, so
//! it never refills faster than asked. Core accepts bursts that take up to 2^63 us to refill; here a
//! burst must refill within `limits::MAX_HORIZON_SECS`, and a longer one gets core's own overflow error.

use crate::time::NANOS_PER_SEC;
use crate::token_bucket::TokenBucket;
use crate::verdict::Verdict;

/// `max_burst`: core's text for every failure of that argument.
pub const BURST: &str = "ERR value is out of range, must be positive";
/// `tokens_per_period` or `TOKENS n` is not an integer.
pub const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
/// `tokens_per_period` or `TOKENS n` is below 1 (core's text, "must between" included).
pub const BELOW_ONE: &str = "ERR value is out of range, value must between 1 and 9223372036854775807";
pub const NOT_A_FLOAT: &str = "ERR value is not a valid float";
pub const PERIOD: &str = "ERR period must be > 0 and < 1e12";
pub const SYNTAX: &str = crate::error::SYNTAX;
pub const MISSING_TOKENS: &str = "ERR Missing TOKENS value";
pub const TOKENS_OVERFLOW: &str = "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and TOKENS would cause an overflow";
pub const BURST_OVERFLOW: &str = "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and max_burst would cause an overflow";

/// A parsed call: the bucket and the tokens to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    pub bucket: TokenBucket,
    pub tokens: u64,
}

/// What the server's own parsers make of argument `i` (after the key), which the caller supplies:
/// core parses with `string2ll` and `string2d`, and a module can call the very same functions.
pub trait Numbers {
    fn long_long(&self, i: usize) -> Option<i64>;
    fn double(&self, i: usize) -> Option<f64>;
}

/// The first errors, checked before the key is opened; the overflow errors come after the key's type
/// is checked (`Parsed::bucket`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Parsed {
    max_burst: i64,
    tokens_per_period: i64,
    period: f64,
    tokens: i64,
}

impl Parsed {
    /// The arguments after the key, in core's order of checks. Arity is the caller's (4 to 6 after
    /// the name, else `ERR wrong number of arguments for 'gcra' command`).
    pub fn parse(args: &[&[u8]], numbers: &impl Numbers) -> Result<Parsed, &'static str> {
        let [_, _, _, rest @ ..] = args else {
            return Err(SYNTAX);
        };
        let max_burst = numbers.long_long(0).filter(|b| *b >= 0).ok_or(BURST)?;
        let at_least_one = |i: usize| match numbers.long_long(i) {
            None => Err(NOT_AN_INTEGER),
            Some(n) if n < 1 => Err(BELOW_ONE),
            Some(n) => Ok(n),
        };
        let tokens_per_period = at_least_one(1)?;
        let period = numbers.double(2).ok_or(NOT_A_FLOAT)?;
        // NaN is refused by the parser; infinity lands here.
        if period <= 0.0 || period >= 1e12 {
            return Err(PERIOD);
        }
        let tokens = match rest {
            [] => 1,
            [keyword, ..] if !keyword.eq_ignore_ascii_case(b"TOKENS") => return Err(SYNTAX),
            [_] => return Err(MISSING_TOKENS),
            [_, _] => at_least_one(4)?,
            _ => return Err(SYNTAX),
        };
        Ok(Parsed { max_burst, tokens_per_period, period, tokens })
    }

    /// The bucket: core's overflow checks on its microsecond interval, then this engine's bucket.
    pub fn bucket(&self) -> Result<Gcra, &'static str> {
        // Core's interval: period in us over tokens_per_period, rounded half up, at least 1 us.
        let interval_us = ((self.period * 1e6 / self.tokens_per_period as f64 + 0.5) as i64).max(1);
        // Core adds one to the burst unless it is LONG_MAX.
        let limit = if self.max_burst < i64::MAX { self.max_burst + 1 } else { self.max_burst };
        if interval_us > i64::MAX / self.tokens {
            return Err(TOKENS_OVERFLOW);
        }
        if interval_us > i64::MAX / limit {
            return Err(BURST_OVERFLOW);
        }
        // The period in whole ns (a double written in decimal is within an ulp of it).
        let period_ns = (self.period * NANOS_PER_SEC as f64).round() as u128;
        let bucket = TokenBucket::per_period(limit as u64, self.tokens_per_period as u64, period_ns.max(1))
            .map_err(|_| BURST_OVERFLOW)?;
        Ok(Gcra { bucket, tokens: self.tokens as u64 })
    }
}

/// GCRA's five integers for a token bucket's verdict.
pub fn reply(verdict: &Verdict) -> super::Reply {
    let retry = match (verdict.allowed, verdict.retry_after_ns) {
        (false, Some(wait)) => super::ceil_secs(wait),
        _ => -1,
    };
    [
        i64::from(!verdict.allowed),
        i64::try_from(verdict.limit).unwrap_or(i64::MAX),
        i64::try_from(verdict.remaining).unwrap_or(i64::MAX),
        retry,
        super::ceil_secs(verdict.reset_after_ns),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Limiter;
    use crate::time::Nanos;

    const SEC: Nanos = NANOS_PER_SEC;
    const T0: Nanos = 1_700_000_000 * SEC;

    /// string2ll and string2d, near enough for these tests.
    struct Rust<'a>(&'a [&'a str]);
    impl Numbers for Rust<'_> {
        fn long_long(&self, i: usize) -> Option<i64> {
            self.0[i].parse().ok().filter(|_| !self.0[i].starts_with('+'))
        }
        fn double(&self, i: usize) -> Option<f64> {
            self.0[i].parse().ok().filter(|f: &f64| !f.is_nan())
        }
    }

    fn gcra(args: &str) -> Result<Gcra, &'static str> {
        let words: Vec<&str> = args.split(' ').collect();
        let bytes: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        Parsed::parse(&bytes, &Rust(&words))?.bucket()
    }

    fn run(g: &Gcra, calls: usize) -> Vec<super::super::Reply> {
        let mut stored: Option<Vec<u8>> = None;
        (0..calls)
            .map(|_| {
                let o = g.bucket.decide(stored.as_deref(), T0, g.tokens).unwrap();
                if let Some(w) = o.write {
                    let mut v = stored.take().unwrap_or_default();
                    crate::limiter::apply(&mut v, &w.change);
                    stored = Some(v);
                }
                reply(&o.verdict)
            })
            .collect()
    }

    #[test]
    fn cores_worked_examples() {
        let r = run(&gcra("5 1 60").unwrap(), 7);
        assert_eq!(r[0], [0, 6, 5, -1, 60]);
        assert_eq!(r[1], [0, 6, 4, -1, 120]);
        assert_eq!(r[5], [0, 6, 0, -1, 360]);
        assert_eq!(r[6], [1, 6, 0, 60, 360]);
        assert_eq!(run(&gcra("5 1 60 TOKENS 6").unwrap(), 1)[0], [0, 6, 0, -1, 360]);
        assert_eq!(run(&gcra("5 1 60 tokens 7").unwrap(), 1)[0], [1, 6, 6, -1, 0]);
        assert_eq!(run(&gcra("0 1 1").unwrap(), 2), [[0, 1, 0, -1, 1], [1, 1, 0, 1, 1]]);
        assert_eq!(run(&gcra("10 1 0.5").unwrap(), 1)[0], [0, 11, 10, -1, 1]);
    }

    #[test]
    fn errors_in_cores_words_and_order() {
        assert_eq!(gcra("-1 1 1"), Err(BURST));
        assert_eq!(gcra("x 1 1"), Err(BURST));
        assert_eq!(gcra("1 0 1"), Err(BELOW_ONE));
        assert_eq!(gcra("1 x 1"), Err(NOT_AN_INTEGER));
        assert_eq!(gcra("1 1 x"), Err(NOT_A_FLOAT));
        assert_eq!(gcra("1 1 0"), Err(PERIOD));
        assert_eq!(gcra("1 1 1e12"), Err(PERIOD));
        assert_eq!(gcra("1 1 inf"), Err(PERIOD));
        assert_eq!(gcra("1 1 1 TOKENS"), Err(MISSING_TOKENS));
        assert_eq!(gcra("1 1 1 FOO"), Err(SYNTAX));
        assert_eq!(gcra("1 1 1 TOKENS 0"), Err(BELOW_ONE));
        assert_eq!(gcra("1 1 1 TOKENS x"), Err(NOT_AN_INTEGER));
        assert_eq!(gcra("x 0 x FOO"), Err(BURST), "the first argument's error wins");
        assert_eq!(gcra("1 1 86400 TOKENS 200000000"), Err(TOKENS_OVERFLOW));
        assert_eq!(gcra("200000000 1 86400"), Err(BURST_OVERFLOW));
        assert_eq!(gcra("1 1 2147483647 TOKENS 2147483647"), Err(TOKENS_OVERFLOW));
    }
}
