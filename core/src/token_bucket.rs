//! The token bucket, computed as GCRA (generic cell rate algorithm).
//!
//! A bucket of `capacity` tokens refilled at `rate` tokens per second is fully described by one
//! number: its theoretical arrival time (TAT), the instant at which it will be full again. With
//! `interval` the time one token takes to refill and `tau = capacity * interval`, a bucket whose TAT
//! lies `backlog = TAT - now` in the future holds `(tau - backlog) / interval` tokens. Taking `cost`
//! tokens moves TAT forward by `cost * interval`, and is allowed while the backlog stays within `tau`.
//! This is exactly a continuously refilled token bucket, with one integer of state instead of two.
//!
//! All times are integer nanoseconds. The refill interval is `ceil(1e9 / rate)` ns, so the effective
//! rate is never above the requested one (relative error below `rate / 1e9`), and capacity is exact.
//!
//! Rounding the interval up makes a full refill of `capacity` tokens last `capacity * interval` ns,
//! a few ns longer than `capacity / rate` seconds (3 tokens at 3/s: 1,000,000,002 ns), which whole
//! milliseconds would report as 1001. That artefact (`slack`: `capacity * interval` minus the exact
//! refill time rounded up, always below one interval and below `capacity` ns) is absorbed: the bucket
//! counts as holding `capacity` tokens once its backlog is within `slack`, so a full refill is reported
//! and granted after exactly `ceil(capacity / rate)` ns, and waiting `retry_after` still succeeds.

//!
//! Reservations (`reserve_tat`) take tokens from the future: the TAT moves past a full bucket's
//! depth by the wait the caller sleeps, so waiters are served in arrival order, one call each.
//!
//! Stored as the TAT (Unix ns, i64 little-endian) behind the tag `RLT\x01` (see `format`); the key
//! expires on a grid of max(1 s, 1/16 of a full refill) after the bucket is full again.

use crate::args::{positive_decimal, whole_for, ArgError};
use crate::command_info::{KeyRule, DECIDING};
use crate::decimal::Decimal;
use crate::declare::{
    cost_of, cost_requests, refunded, Declare, IdHash, Param, ParamType, RequestArgs, RequestForm,
};
use crate::error::{ParamError, StateError};
use crate::format::{word, words, Layout};
use crate::limiter::{Change, Expiry, Field, Outcome, Write};
use crate::limits::{MAX_HORIZON_NS, MAX_RATE_PER_SEC};
use crate::state::{SmallState, Step};
use crate::time::{ceil_ms, Nanos, NANOS_PER_SEC};
use crate::verdict::Verdict;

/// A capacity of zero never admits anything.
pub const CAPACITY: ParamError = ParamError::new("capacity", "must be a whole number >= 1");
/// The rate is zero, negative or not a number.
pub const RATE: ParamError = ParamError::new("rate", "must be a number > 0 (tokens per second)");
/// The rate is above one token per nanosecond, which the integer clock cannot express.
pub const RATE_TOO_LARGE: ParamError = ParamError::new(
    "rate",
    concat!("must be at most ", crate::limits::max_rate_per_sec!(), " tokens per second"),
);
/// Filling the bucket would take longer than the horizon (`limits::MAX_HORIZON_SECS`).
pub const REFILL_TOO_LONG: ParamError = ParamError::new(
    "capacity",
    concat!("capacity / rate must be at most ", crate::limits::max_horizon_secs!(), " seconds"),
);

/// Valid token bucket parameters: a capacity of at least one token and a refill interval of at least
/// one nanosecond, with a full refill that fits in the clock's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    capacity: u64,
    interval_ns: Nanos,
    tau_ns: Nanos,
    /// The rounding artefact of a full refill, absorbed (see the module's documentation).
    slack_ns: Nanos,
}

/// The outcome of one request against a bucket: remaining counts whole tokens, reset_after is the
/// time until the bucket is full again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)] // public for the benches and the fuzz tests
pub struct TokenDecision {
    pub verdict: Verdict,
    /// The state to store, when the request changed it (allowed with cost > 0), or when the stored
    /// state was impossible and is repaired (see `repair`).
    pub new_tat: Option<Nanos>,
    /// The stored TAT lay more than a full refill ahead of `now` (a clock that stepped back, or a
    /// primary whose clock ran ahead before a failover). It counts as an empty bucket *now*, and
    /// `new_tat` stores that, even for a denial: otherwise the client would stay locked out until the
    /// clock caught up with the impossible state, for as long as the clock was off.
    pub repair: bool,
}

impl TokenBucket {
    pub fn new(capacity: u64, rate: Decimal) -> Result<TokenBucket, ParamError> {
        if capacity == 0 {
            return Err(CAPACITY);
        }
        if rate.is_zero() {
            return Err(RATE);
        }
        let ns_per_sec = NANOS_PER_SEC as u128;
        // A rate above 1e9 tokens/s would need a sub-nanosecond interval.
        if rate.mul_ceil(1).is_none_or(|r| r > crate::limits::MAX_RATE_PER_SEC as u128) {
            return Err(RATE_TOO_LARGE);
        }
        let interval = rate.div_ceil_into(ns_per_sec).ok_or(REFILL_TOO_LONG)?;
        // The exact refill time of a full bucket, rounded up.
        let exact = rate.div_ceil_into(u128::from(capacity) * ns_per_sec).ok_or(REFILL_TOO_LONG)?;
        Self::build(capacity, interval, exact)
    }

    /// `capacity` tokens refilled at `count` tokens per `period_ns` (the dialects' "count per
    /// period"): the interval is `ceil(period_ns / count)`, so the bucket never refills faster than
    /// asked.
    pub fn per_period(capacity: u64, count: u64, period_ns: u128) -> Result<TokenBucket, ParamError> {
        if capacity == 0 {
            return Err(CAPACITY);
        }
        if count == 0 || period_ns == 0 {
            return Err(RATE);
        }
        let exact = (u128::from(capacity) * period_ns).div_ceil(u128::from(count));
        Self::build(capacity, period_ns.div_ceil(u128::from(count)), exact)
    }

    /// From the interval and the exact refill time of a full bucket, both in ns and rounded up.
    fn build(capacity: u64, interval: u128, exact: u128) -> Result<TokenBucket, ParamError> {
        let too_long = REFILL_TOO_LONG;
        let tau = interval.checked_mul(u128::from(capacity)).ok_or(too_long)?;
        if tau > MAX_HORIZON_NS as u128 || interval == 0 {
            return Err(too_long);
        }
        // `tau` exceeds the exact refill time by less than `capacity` ns.
        let slack = (tau - exact.min(tau)).min(interval - 1);
        Ok(TokenBucket {
            capacity,
            interval_ns: interval as Nanos,
            tau_ns: tau as Nanos,
            slack_ns: slack as Nanos,
        })
    }

    /// The bucket's capacity.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The backlog a bucket may hold: a full refill plus the absorbed rounding artefact.
    fn depth(&self) -> Nanos {
        self.tau_ns + self.slack_ns
    }

    /// Decides a request of `cost` tokens at `now`, given the stored TAT (None for a new or expired
    /// key, which is a full bucket). A TAT more than two full refills ahead of `now` (written by a
    /// clock that ran ahead, or seen by one that stepped back) counts as an empty bucket, so a clock
    /// fault never grants extra tokens and never locks a client out for longer than one refill
    /// beyond the reservations a bucket may hold (see [`TokenBucket::reserve_tat`]).
    #[doc(hidden)] // public for the benches and the fuzz tests
    #[inline]
    pub fn decide_tat(&self, tat: Option<Nanos>, now: Nanos, cost: u64) -> TokenDecision {
        self.reserve_tat(tat, now, cost, 0)
    }

    /// Like [`decide_tat`](Self::decide_tat), and when `cost` does not fit now but would within
    /// `max_wait_ns` (at most one full refill: a longer wait counts as one), the tokens are taken
    /// now from the future: the TAT moves past the bucket's depth by the wait, and the verdict is
    /// allowed with that wait as its `retry_after` (the time the caller sleeps before using them).
    /// Beyond `max_wait_ns` it is RL.TOKEN's denial, with the wait a reservation would have needed.
    /// A reserved TAT lies at most two full refills ahead: one of tokens, one of waiting.
    #[doc(hidden)] // public for the benches and the fuzz tests
    pub fn reserve_tat(
        &self,
        tat: Option<Nanos>,
        now: Nanos,
        cost: u64,
        max_wait_ns: Nanos,
    ) -> TokenDecision {
        let depth = self.depth();
        let (backlog, repair) = self.backlog(tat, now);
        let verdict = |allowed: bool, backlog: Nanos, retry_after_ns: Option<Nanos>| Verdict {
            allowed,
            limit: self.capacity,
            // slack < interval, so a fresh bucket still holds exactly `capacity`.
            remaining: ((depth - backlog).max(0) / self.interval_ns) as u64,
            retry_after_ns,
            reset_after_ns: (backlog - self.slack_ns).max(0),
        };
        let unchanged = |verdict: Verdict| TokenDecision {
            verdict,
            new_tat: repair.then(|| now.saturating_add(self.tau_ns)),
            repair,
        };
        if cost > self.capacity {
            return unchanged(verdict(false, backlog, None));
        }
        if cost == 0 {
            return unchanged(verdict(true, backlog, Some(0)));
        }
        // cost <= capacity, so cost * interval <= tau, and backlog <= 2 * depth: it fits.
        let after = backlog + cost as Nanos * self.interval_ns;
        let wait = (after - depth).max(0);
        if wait > max_wait_ns.clamp(0, self.period_ns()) {
            return unchanged(verdict(false, backlog, Some(wait)));
        }
        TokenDecision {
            verdict: verdict(true, after, Some(wait)),
            new_tat: Some(now.saturating_add(after)),
            repair: false,
        }
    }

    /// The backlog a stored TAT leaves at `now`, and whether it is impossible (more than two full
    /// refills ahead: a clock fault, counted as an empty bucket).
    #[inline]
    fn backlog(&self, tat: Option<Nanos>, now: Nanos) -> (Nanos, bool) {
        let stored = tat.map_or(0, |t| t.saturating_sub(now)).max(0);
        let depth = self.depth();
        if stored > 2 * depth {
            (depth, true)
        } else {
            (stored, false)
        }
    }

    /// The TAT after giving `tokens` back at `now`: never more tokens than capacity. None when nothing
    /// changes (the bucket is already full, or nothing is refunded).
    #[doc(hidden)] // public for the benches and the fuzz tests
    pub fn refund_tat(&self, tat: Option<Nanos>, now: Nanos, tokens: u64) -> Option<Nanos> {
        let (backlog, _) = self.backlog(tat, now);
        if backlog == 0 || tokens == 0 {
            return None;
        }
        let credit = (tokens.min(self.capacity) as Nanos).saturating_mul(self.interval_ns);
        Some(now.saturating_add((backlog - credit).max(0)))
    }
}

/// The finest expiry grid: one second.
const MIN_EXPIRY_STEP_MS: i64 = 1000;

/// When a bucket's key expires: at the first point of a grid of `step_ms` (Unix ms, multiples of
/// the step) at or after the instant it is full again, so less than one step late. A function of the
/// TAT and the step alone: the key's current expiry follows from the stored TAT, mostly without
/// reading it, and writes whose TAT stays within one step of the grid leave it alone (see
/// [`TokenBucket::expiry_step_ms`], [`Expiry::change`]).
pub fn expiry_ms(tat: Nanos, step_ms: i64) -> i64 {
    // ceil_ms is never negative and the step is positive, so this is a ceiling division.
    let ms = ceil_ms(tat);
    (ms / step_ms + i64::from(ms % step_ms != 0)).saturating_mul(step_ms)
}

impl TokenBucket {
    /// The expiry grid's step: 1/16 of a full refill in whole seconds (rounded down), at least one
    /// second. A key outlives the instant its bucket is full again by less than this, and a key under
    /// steady traffic moves its expiry about once per step instead of once per call. Whole seconds:
    /// every grid point is a whole second, as 0.2's one-second grid was (see `Expiry::Derived`).
    #[inline]
    pub fn expiry_step_ms(&self) -> i64 {
        (self.period_ns() / 16 / NANOS_PER_SEC * 1000).max(MIN_EXPIRY_STEP_MS)
    }

    /// The expiry a stored TAT implies, and what the TAT it replaces says of the expiry in place
    /// (see [`Expiry::Derived`]).
    #[inline]
    pub fn expiry(&self, tat: Nanos, previous: Option<Nanos>) -> Expiry {
        let step = self.expiry_step_ms();
        Expiry::Derived {
            at_ms: expiry_ms(tat, step),
            at_least_ms: ceil_ms(tat),
            previous_ms: previous.map(|p| expiry_ms(p, step)),
            certain_ms: previous.map(|p| expiry_ms(p, MIN_EXPIRY_STEP_MS)),
        }
    }
}

/// A request that may wait (`RL.RESERVE`, and `RL.TAKE`'s partial grant): `cost` tokens, taken now
/// or reserved from the future within `max_wait_ns`; and when the bucket holds more now, as many
/// more as it holds, up to `upto` in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserve {
    pub cost: u64,
    pub upto: u64,
    pub max_wait_ns: Nanos,
}

impl TokenBucket {
    /// Decides a [`Reserve`] request: the outcome, and the number of tokens taken (0 when denied).
    pub fn reserve(
        &self,
        stored: Option<&[u8]>,
        now: Nanos,
        request: Reserve,
    ) -> Result<(Outcome, u64), StateError> {
        let tat = stored.map(<Self as SmallState>::decode).transpose()?;
        let available = self.decide_tat(tat, now, 0).verdict.remaining;
        let taken = available.min(request.upto).max(request.cost);
        let d = self.reserve_tat(tat, now, taken, request.max_wait_ns);
        let write = d.new_tat.map(|next| self.write(&next, tat.as_ref(), now));
        let outcome = Outcome { verdict: d.verdict, write, repair: d.repair };
        Ok((outcome, if d.verdict.allowed { taken } else { 0 }))
    }

    /// A partial grant (`RL.TAKE`): as many whole tokens as the bucket holds at `now`, up to `max`.
    /// Allowed when it took at least one; denied otherwise, with the wait for one token. The second
    /// value is the number taken.
    pub fn take(&self, stored: Option<&[u8]>, now: Nanos, max: u64) -> Result<(Outcome, u64), StateError> {
        self.reserve(stored, now, Reserve { cost: 1, upto: max, max_wait_ns: 0 })
    }
}

impl SmallState for TokenBucket {
    /// The TAT.
    type State = Nanos;
    const LAYOUT: Layout = Layout::TokenBucket;

    #[inline]
    fn decode(stored: &[u8]) -> Result<Nanos, StateError> {
        Layout::TokenBucket.payload(stored).and_then(|p| word(p, 0)).map(|w| w as Nanos).ok_or(StateError)
    }

    #[inline]
    fn step(&self, tat: Option<Nanos>, now: Nanos, cost: u64) -> Step<Nanos> {
        let d = self.decide_tat(tat, now, cost);
        Step { verdict: d.verdict, next: d.new_tat, repair: d.repair }
    }

    /// The expiry follows from the TAT (`TokenBucket::expiry`), so the previous one is known without
    /// reading it.
    #[inline]
    fn write(&self, tat: &Nanos, previous: Option<&Nanos>, _now: Nanos) -> Write {
        Write {
            change: Change::Set(words(Layout::TokenBucket, &[*tat as u64])),
            expiry: self.expiry(*tat, previous.copied()),
        }
    }

    fn fields(tat: &Nanos, now: Nanos) -> Vec<Field> {
        vec![("tat_ms", Some(ceil_ms(*tat))), ("backlog_ms", Some(ceil_ms(tat.saturating_sub(now))))]
    }

    fn give_back(&self, tat: Option<Nanos>, now: Nanos, tokens: u64) -> Option<Nanos> {
        self.refund_tat(tat, now, tokens)
    }

    /// A bucket has no windows.
    fn mark(_tat: &Nanos) -> i64 {
        0
    }

    /// A return refills (never above capacity); an excess is charged as debt, at most one full
    /// refill beyond empty (a backlog of two depths, the most a reservation may leave).
    fn adjust(&self, tat: Option<Nanos>, now: Nanos, _mark: i64, delta: i128) -> Option<Nanos> {
        if delta < 0 {
            return self.refund_tat(tat, now, u64::try_from(-delta).unwrap_or(u64::MAX));
        }
        let (backlog, _) = self.backlog(tat, now);
        let most = 2 * i128::from(self.depth());
        let charged = (i128::from(backlog) + delta.saturating_mul(i128::from(self.interval_ns))).min(most);
        (delta > 0 && charged > i128::from(backlog)).then(|| now.saturating_add(charged as Nanos))
    }
}

/// A token bucket's parameters, as RL.TOKEN takes them.
pub const PARAMS: [Param; 2] = [
    Param {
        name: "capacity",
        form: ParamType::Whole,
        min: 1,
        max: u64::MAX,
        unit: "tokens",
        errors: &[CAPACITY, REFILL_TOO_LONG],
    },
    Param {
        name: "rate",
        form: ParamType::Decimal,
        min: 0,
        max: MAX_RATE_PER_SEC,
        unit: "tokens per second",
        errors: &[RATE, RATE_TOO_LARGE],
    },
];

impl Declare for TokenBucket {
    const NAME: &'static str = "token_bucket";
    const PARAMS: [Param; 2] = PARAMS;
    const GROUP: &'static str = "TOKEN";
    const COMMAND: &'static str = "RL.TOKEN";
    const SYNTAX: &'static str = "RL.TOKEN key capacity rate cost [key capacity rate cost ...]";
    const FUNCTION: &'static str = "rl_token";
    const KEYS: KeyRule = KeyRule::Every(4);
    const SIXTH: Option<&'static str> = DECIDING;
    const REQUEST: RequestForm = RequestForm::Cost;
    const REFUNDS: bool = true;

    /// `capacity rate`.
    #[inline]
    fn parse([capacity, rate]: [&[u8]; 2]) -> Result<TokenBucket, ArgError> {
        Ok(TokenBucket::new(whole_for(capacity, CAPACITY, 1)?, positive_decimal(rate, RATE)?)?)
    }

    cost_requests!();

    fn limit(&self) -> u64 {
        self.capacity
    }

    /// A full refill: `capacity / rate`, rounded up to the nanosecond.
    fn period_ns(&self) -> Nanos {
        self.tau_ns - self.slack_ns
    }

    /// `capacity / n` tokens refilled `n` times slower.
    fn share(&self, n: u64) -> TokenBucket {
        let capacity = (self.capacity / n).max(1);
        let interval = (self.interval_ns as u128).saturating_mul(u128::from(n));
        let exact = interval.saturating_mul(u128::from(capacity));
        TokenBucket::build(capacity, interval, exact).unwrap_or(*self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Nanos = 1_000_000;
    const SEC: Nanos = NANOS_PER_SEC;
    const T0: Nanos = 1_700_000_000 * SEC;

    fn bucket(capacity: u64, rate: &str) -> TokenBucket {
        TokenBucket::new(capacity, Decimal::parse(rate.as_bytes()).unwrap()).unwrap()
    }

    proptest! {
        /// The expiry grid: whole seconds, at most max(1 s, 1/16 of a full refill) apart; the key never
        /// expires before the bucket is full again and less than one step after. A store keeps the
        /// expiry in place only within those bounds, whatever grid wrote it.
        #[test]
        fn the_expiry_is_on_whole_seconds_within_one_step_after_the_bucket_is_full(
            capacity in 1u64..1_000_000, rate in prop::sample::select(vec!["0.001", "0.3", "1", "7", "1000"]),
            tat in T0..T0 + 1_000_000 * SEC, moved in 0..200 * SEC, current in prop::option::of(T0 / MS..T0 / MS + 2_000_000_000),
        ) {
            let b = bucket(capacity, rate);
            let step = b.expiry_step_ms();
            prop_assert!(step % 1000 == 0 && step >= 1000);
            prop_assert!(step == 1000 || step <= b.period_ns() / 16 / MS);
            let at = expiry_ms(tat, step);
            prop_assert!(at >= ceil_ms(tat) && at < ceil_ms(tat) + step && at % step == 0);
            let new = tat + moved;
            let expiry = b.expiry(new, Some(tat));
            let kept = expiry.change(false, || current);
            let Expiry::Derived { at_ms, at_least_ms, .. } = expiry else { unreachable!() };
            // What the key ends up expiring at: the one set, or the one in place, which then covers
            // the state (either the store read it, or it is at least the old state's whole second,
            // which every writer keeps).
            match kept {
                Some(set) => prop_assert_eq!(set, at_ms),
                None => {
                    let in_place = current.filter(|c| *c >= at_least_ms && *c <= at_ms && c % 1000 == 0);
                    let certain = expiry_ms(tat, 1000) >= at_least_ms;
                    prop_assert!(in_place.is_some() || certain, "kept {current:?} for a state ending at {at_least_ms}");
                }
            }
        }
    }

    fn run(b: &TokenBucket, tat: &mut Option<Nanos>, now: Nanos, cost: u64) -> TokenDecision {
        let d = b.decide_tat(*tat, now, cost);
        if let Some(t) = d.new_tat {
            *tat = Some(t);
        }
        d
    }

    #[test]
    fn lab_burst_refill_and_first_denial() {
        let b = bucket(10, "5");
        let mut tat = None;
        for i in 0..10 {
            let d = run(&b, &mut tat, T0, 1);
            assert!(d.verdict.allowed);
            assert_eq!(d.verdict.remaining, 9 - i);
        }
        let denied = run(&b, &mut tat, T0, 1);
        assert_eq!(
            denied,
            TokenDecision {
                verdict: Verdict {
                    allowed: false,
                    limit: 10,
                    remaining: 0,
                    retry_after_ns: Some(200 * MS),
                    reset_after_ns: 2 * SEC
                },
                new_tat: None,
                repair: false
            }
        );
        let allowed_after_a_second =
            (0..8).filter(|_| run(&b, &mut tat, T0 + SEC, 1).verdict.allowed).count();
        assert_eq!(allowed_after_a_second, 5);
    }

    #[test]
    fn table_of_single_requests() {
        // (capacity, rate, previous backlog, cost) -> (allowed, remaining, retry, reset)
        type Case = (u64, &'static str, Nanos, u64, bool, u64, Option<Nanos>, Nanos);
        let cases: &[Case] = &[
            (10, "5", 0, 1, true, 9, Some(0), 200 * MS),
            (10, "5", 0, 10, true, 0, Some(0), 2 * SEC),
            (10, "5", 0, 11, false, 10, None, 0),
            (10, "5", 0, 0, true, 10, Some(0), 0),
            (10, "5", 1900 * MS, 1, false, 0, Some(100 * MS), 1900 * MS),
            (10, "5", 1000 * MS, 5, true, 0, Some(0), 2 * SEC),
            (10, "5", 1000 * MS, 6, false, 5, Some(200 * MS), 1000 * MS),
            (1, "0.5", 0, 1, true, 0, Some(0), 2 * SEC),
            (1, "0.5", SEC, 1, false, 0, Some(SEC), SEC),
            // A full refill takes 3 * 333,333,334 ns; the 2 ns of rounding are absorbed.
            (3, "3", 0, 3, true, 0, Some(0), SEC),
            (3, "3", 3 * 333_333_334, 3, false, 0, Some(SEC), SEC),
            // Taken again 2 ns before the bucket's last nanosecond of refill: those 2 ns still count.
            (3, "3", 2, 3, true, 0, Some(0), SEC + 2),
        ];
        for &(cap, rate, backlog, cost, allowed, remaining, retry, reset) in cases {
            let b = bucket(cap, rate);
            let tat = (backlog > 0).then_some(T0 + backlog);
            let d = b.decide_tat(tat, T0, cost);
            assert_eq!(
                (d.verdict.allowed, d.verdict.remaining, d.verdict.retry_after_ns, d.verdict.reset_after_ns),
                (allowed, remaining, retry, reset),
                "case cap={cap} rate={rate} backlog={backlog} cost={cost}"
            );
        }
    }

    #[test]
    fn peek_and_denial_write_nothing() {
        let b = bucket(2, "1");
        assert_eq!(b.decide_tat(None, T0, 0).new_tat, None);
        assert_eq!(b.decide_tat(Some(T0 + 2 * SEC), T0, 1).new_tat, None);
    }

    #[test]
    fn clock_faults_never_grant_tokens_nor_lock_out_beyond_one_refill() {
        let b = bucket(10, "5");
        // A TAT an hour ahead (clock stepped back an hour): an empty bucket, refilled in 2 s.
        let d = b.decide_tat(Some(T0 + 3600 * SEC), T0, 1);
        assert!(!d.verdict.allowed);
        assert_eq!(d.verdict.remaining, 0);
        assert_eq!(d.verdict.retry_after_ns, Some(200 * MS));
        assert_eq!(d.verdict.reset_after_ns, 2 * SEC);
        // The impossible state is repaired to "empty now", so waiting one token's time is enough.
        assert!(d.repair);
        assert_eq!(d.new_tat, Some(T0 + 2 * SEC));
        assert!(b.decide_tat(d.new_tat, T0 + 200 * MS, 1).verdict.allowed);
        // A state within one refill is never repaired.
        assert!(!b.decide_tat(Some(T0 + 2 * SEC), T0, 1).repair);
    }

    #[test]
    fn take_grants_what_the_bucket_holds_up_to_max() {
        let b = bucket(10, "5");
        let (first, taken) = b.take(None, T0, 4).unwrap();
        assert_eq!((first.verdict.allowed, first.verdict.remaining, taken), (true, 6, 4));
        let stored = match first.write.unwrap().change {
            crate::limiter::Change::Set(bytes) => bytes.as_ref().to_vec(),
            other => panic!("a bucket is written whole: {other:?}"),
        };
        let (rest, taken) = b.take(Some(&stored), T0, 100).unwrap();
        assert_eq!((rest.verdict.allowed, rest.verdict.remaining, taken), (true, 0, 6));
        let Some(crate::limiter::Write { change: crate::limiter::Change::Set(empty), .. }) = rest.write
        else {
            panic!("the rest was taken")
        };
        let (none, taken) = b.take(Some(empty.as_ref()), T0, 3).unwrap();
        assert_eq!((none.verdict.allowed, taken, none.verdict.retry_after_ns), (false, 0, Some(200 * MS)));
        assert_eq!(none.write, None, "a denial writes nothing");
    }

    #[test]
    fn refund_gives_back_up_to_capacity() {
        let b = bucket(10, "5");
        assert_eq!(b.refund_tat(Some(T0 + SEC), T0, 2), Some(T0 + 600 * MS));
        assert_eq!(b.refund_tat(Some(T0 + SEC), T0, 100), Some(T0));
        assert_eq!(b.refund_tat(None, T0, 3), None);
        assert_eq!(b.refund_tat(Some(T0 - SEC), T0, 3), None);
    }

    #[test]
    fn rejects_parameters_it_cannot_compute_exactly() {
        let rate = |s: &str| Decimal::parse(s.as_bytes()).unwrap();
        assert_eq!(TokenBucket::new(0, rate("1")), Err(CAPACITY));
        assert_eq!(TokenBucket::new(1, rate("0")), Err(RATE));
        assert_eq!(TokenBucket::new(1, rate("2e9")), Err(RATE_TOO_LARGE));
        assert_eq!(TokenBucket::new(1, rate("1e-30")), Err(REFILL_TOO_LONG));
        assert_eq!(TokenBucket::new(1, rate("1e-20")), Err(REFILL_TOO_LONG));
        assert_eq!(TokenBucket::new(u64::MAX, rate("1")), Err(REFILL_TOO_LONG));
        assert!(TokenBucket::new(1, rate("1e9")).is_ok());
        assert!(TokenBucket::new(1_000_000_000, rate("1000")).is_ok());
    }

    proptest! {
        /// Over any request stream, admitted tokens never exceed capacity + refill over elapsed time,
        /// remaining never exceeds capacity, and a denial leaves the state untouched.
        #[test]
        fn never_admits_more_than_capacity_plus_refill(
            capacity in 1u64..50,
            rate_milli in 1u64..20_000,
            steps in proptest::collection::vec((0i64..2_000_000_000, 0u64..60), 1..200),
        ) {
            let rate = Decimal { mantissa: rate_milli as u128, exponent: -3 };
            let b = TokenBucket::new(capacity, rate).unwrap();
            let mut tat = None;
            let mut now = T0;
            let mut admitted: u128 = 0;
            for (gap, cost) in steps {
                now += gap;
                let d = b.decide_tat(tat, now, cost);
                prop_assert!(d.verdict.remaining <= capacity);
                if d.verdict.allowed {
                    admitted += cost as u128;
                    if let Some(t) = d.new_tat { tat = Some(t); }
                } else {
                    prop_assert_eq!(d.new_tat, None);
                    prop_assert!(d.verdict.retry_after_ns.is_none_or(|r| r > 0));
                }
                // The absorbed rounding artefact (< capacity ns) lets a token come that much early.
                let elapsed = (now - T0) as u128 + capacity as u128;
                // capacity + rate * elapsed, rate = rate_milli / 1000 tokens per second
                let bound = capacity as u128 + (rate_milli as u128 * elapsed) / (1000 * NANOS_PER_SEC as u128);
                prop_assert!(admitted <= bound, "admitted {} > bound {}", admitted, bound);
            }
        }

        /// Waiting retry_after is always enough, and waiting less is never enough.
        #[test]
        fn a_full_refill_is_reported_and_granted_after_capacity_over_rate(capacity in 1u64..1000, rate_milli in 1u64..10_000_000) {
            let rate = Decimal { mantissa: rate_milli as u128, exponent: -3 };
            let b = TokenBucket::new(capacity, rate).unwrap();
            // ceil(capacity / rate) in ns, unless the interval's rounding is more than an artefact.
            let exact = (capacity as u128 * 1000 * NANOS_PER_SEC as u128).div_ceil(rate_milli as u128) as Nanos;
            let d = b.decide_tat(None, T0, capacity);
            prop_assert!(d.verdict.allowed);
            if b.slack_ns == b.tau_ns - exact {
                prop_assert_eq!(d.verdict.reset_after_ns, exact);
                prop_assert!(b.decide_tat(d.new_tat, T0 + exact, capacity).verdict.allowed);
            }
            prop_assert!(d.verdict.reset_after_ns >= exact);
        }

        /// Waiting retry_after is always enough, and waiting less is never enough.
        #[test]
        fn retry_after_is_exact(capacity in 1u64..50, rate_milli in 1u64..20_000, backlog_frac in 0u64..=1000, cost in 1u64..50) {
            let b = TokenBucket::new(capacity, Decimal { mantissa: rate_milli as u128, exponent: -3 }).unwrap();
            let tat = Some(T0 + (b.depth() as i128 * backlog_frac as i128 / 1000) as Nanos);
            let d = b.decide_tat(tat, T0, cost);
            if let (false, Some(retry)) = (d.verdict.allowed, d.verdict.retry_after_ns) {
                prop_assert!(b.decide_tat(tat, T0 + retry, cost).verdict.allowed);
                prop_assert!(!b.decide_tat(tat, T0 + retry - 1, cost).verdict.allowed);
            }
        }
    }
}
