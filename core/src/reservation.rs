//! Reservations: a token bucket's decision with a queue in it (`RL.RESERVE`, RL.ALL's `RESERVE`
//! group). A request of `cost` tokens that does not fit now but would within `max_wait` takes them
//! now from the future: the bucket's TAT moves past a full bucket's depth by the wait, and the reply
//! is allowed with that wait in `retry_after`'s place, the time the caller sleeps before using them.
//! The next caller's wait starts after it, so waiters are served in arrival order, one call each.
//!
//! The state is the token bucket's own (`RLT\x01`, `token_bucket`): RL.TOKEN, RL.TAKE, RL.INSPECT and
//! the dialects read the same key. A `max_wait` beyond one full refill counts as one, so a reserved
//! TAT lies at most two full refills ahead; a TAT further ahead is a clock fault, repaired.

use crate::args::{wait_ns, ArgError};
use crate::command_info::TAKEN;
use crate::declare::{refunded, Declare, IdHash, Param, RequestArgs, RequestForm};
use crate::error::{ParamError, StateError};
use crate::format::Layout;
use crate::limiter::{Field, Limiter, Outcome, Peek, Write};
use crate::time::Nanos;
use crate::token_bucket::{Reserve, TokenBucket};
use crate::verdict::Verdict;

/// A wait that is not a number of seconds >= 0 in whole milliseconds.
pub const MAX_WAIT: ParamError =
    ParamError::new("max_wait", "must be a number of seconds >= 0, in whole milliseconds");

/// A token bucket whose requests may wait: its parameters are the bucket's (`capacity rate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation(pub TokenBucket);

impl Limiter for Reservation {
    type Request = Reserve;
    const LAYOUT: Layout = Layout::TokenBucket;

    #[inline]
    fn decide(&self, stored: Option<&[u8]>, now: Nanos, request: Reserve) -> Result<Outcome, StateError> {
        Ok(self.0.reserve(stored, now, request)?.0)
    }

    fn peek(&self, stored: Option<&[u8]>, now: Nanos) -> Result<Peek, StateError> {
        self.0.peek(stored, now)
    }

    fn describe(stored: &[u8], now: Nanos) -> Result<Vec<Field>, StateError> {
        <TokenBucket as Limiter>::describe(stored, now)
    }
}

impl Declare for Reservation {
    const NAME: &'static str = "reservation";
    const PARAMS: [Param; 2] = crate::token_bucket::PARAMS;
    const GROUP: &'static str = "RESERVE";
    const COMMAND: &'static str = "RL.RESERVE";
    const SYNTAX: &'static str = "RL.RESERVE key capacity rate cost max_wait [UPTO max]";
    const FUNCTION: &'static str = "rl_reserve";
    const SIXTH: Option<&'static str> = TAKEN;
    const REQUEST: RequestForm = RequestForm::Reserve;
    const REFUNDS: bool = true;

    /// `capacity rate`, as RL.TOKEN takes them.
    #[inline]
    fn parse(params: [&[u8]; 2]) -> Result<Reservation, ArgError> {
        TokenBucket::parse(params).map(Reservation)
    }

    /// `cost max_wait`.
    fn request(&self, args: RequestArgs<'_>, _: IdHash) -> Result<Reserve, ArgError> {
        match args {
            RequestArgs::Reserve { cost, max_wait } => {
                let cost = crate::args::cost(cost)?;
                Ok(Reserve { cost, upto: cost, max_wait_ns: wait_ns(max_wait, MAX_WAIT)? })
            }
            _ => Err(ArgError::Syntax),
        }
    }

    fn limit(&self) -> u64 {
        self.0.limit()
    }

    fn period_ns(&self) -> Nanos {
        self.0.period_ns()
    }

    /// An in-process caller's request does not wait (the local fallback decides now).
    fn request_of(&self, units: u64, _holder: Option<&[u8]>) -> Option<Reserve> {
        Some(Reserve { cost: units, upto: units, max_wait_ns: 0 })
    }

    fn share(&self, n: u64) -> Reservation {
        Reservation(self.0.share(n))
    }

    fn refund_units(
        &self,
        stored: Option<&[u8]>,
        now: Nanos,
        units: u64,
    ) -> Option<Result<(Option<Write>, Verdict), StateError>> {
        refunded(&self.0, stored, now, units)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decimal::Decimal;
    use crate::limiter::Change;
    use crate::time::NANOS_PER_SEC as SEC;
    use proptest::prelude::*;

    const MS: Nanos = 1_000_000;
    const T0: Nanos = 1_700_000_000 * SEC;

    fn reservation(capacity: u64, rate: &str) -> Reservation {
        Reservation(TokenBucket::new(capacity, Decimal::parse(rate.as_bytes()).unwrap()).unwrap())
    }

    fn stored(outcome: &Outcome) -> Vec<u8> {
        match &outcome.write.as_ref().expect("written").change {
            Change::Set(bytes) => bytes.as_ref().to_vec(),
            other => panic!("a bucket is written whole: {other:?}"),
        }
    }

    fn wait(cost: u64, max_wait_ns: Nanos) -> Reserve {
        Reserve { cost, upto: cost, max_wait_ns }
    }

    #[test]
    fn waiters_are_queued_in_arrival_order_one_call_each() {
        // 5 tokens, 10 per second: the sixth caller waits 100 ms, the seventh 200 ms.
        let r = reservation(5, "10");
        let mut state: Option<Vec<u8>> = None;
        let mut waits = vec![];
        for _ in 0..8 {
            let o = r.decide(state.as_deref(), T0, wait(1, SEC)).unwrap();
            assert!(o.verdict.allowed);
            waits.push(o.verdict.retry_after_ns.unwrap() / MS);
            state = Some(stored(&o));
        }
        assert_eq!(waits, [0, 0, 0, 0, 0, 100, 200, 300]);
        // RL.TOKEN on the same key sees an empty bucket with three tokens owed.
        let token = r.0.decide(state.as_deref(), T0, 1).unwrap();
        assert!(!token.verdict.allowed);
        assert_eq!((token.verdict.remaining, token.verdict.retry_after_ns), (0, Some(400 * MS)));
        assert_eq!(token.write, None, "a denial writes nothing");
    }

    #[test]
    fn beyond_max_wait_it_is_a_denial_with_the_wait_needed() {
        let r = reservation(2, "1");
        let full = r.decide(None, T0, wait(2, 0)).unwrap();
        let state = stored(&full);
        let denied = r.decide(Some(&state), T0, wait(1, 999 * MS)).unwrap();
        assert!(!denied.verdict.allowed);
        assert_eq!((denied.verdict.retry_after_ns, denied.write.clone()), (Some(SEC), None));
        let granted = r.decide(Some(&state), T0, wait(1, SEC)).unwrap();
        assert!(granted.verdict.allowed);
        assert_eq!(granted.verdict.retry_after_ns, Some(SEC));
        // A cost above capacity never fits, however long the wait.
        let never = r.decide(None, T0, wait(3, 10 * SEC)).unwrap();
        assert_eq!((never.verdict.allowed, never.verdict.retry_after_ns), (false, None));
    }

    #[test]
    fn a_wait_counts_at_most_one_full_refill() {
        let r = reservation(2, "1");
        let mut state = stored(&r.decide(None, T0, wait(2, 0)).unwrap());
        // Two more tokens reserved: the queue is one full refill (2 s) deep.
        state = stored(&r.decide(Some(&state), T0, wait(2, 3600 * SEC)).unwrap());
        let next = r.decide(Some(&state), T0, wait(1, 3600 * SEC)).unwrap();
        assert!(!next.verdict.allowed, "a wait of 3 s is beyond one refill");
        assert_eq!(next.verdict.retry_after_ns, Some(3 * SEC));
        // The queue is a legitimate state, not a clock fault.
        assert!(!next.repair);
    }

    #[test]
    fn a_reservation_given_back_returns_its_place() {
        let r = reservation(1, "1");
        let first = stored(&r.decide(None, T0, wait(1, SEC)).unwrap());
        let second = stored(&r.decide(Some(&first), T0, wait(1, SEC)).unwrap());
        let (write, _) = r.refund_units(Some(&second), T0, 1).unwrap().unwrap();
        let Change::Set(back) = write.unwrap().change else { panic!("written whole") };
        assert_eq!(back.as_ref(), first.as_slice());
    }

    #[test]
    fn upto_takes_what_the_bucket_holds_beyond_the_minimum() {
        let b = reservation(10, "5").0;
        let (o, taken) = b.reserve(None, T0, Reserve { cost: 2, upto: 6, max_wait_ns: 0 }).unwrap();
        assert_eq!((o.verdict.allowed, taken, o.verdict.remaining), (true, 6, 4));
        let state = stored(&o);
        let (o, taken) = b.reserve(Some(&state), T0, Reserve { cost: 6, upto: 8, max_wait_ns: SEC }).unwrap();
        assert_eq!((o.verdict.allowed, taken, o.verdict.retry_after_ns), (true, 6, Some(400 * MS)));
    }

    proptest! {
        /// Whatever the mix of reservations and plain requests, the tokens granted by any instant
        /// (counting a reservation at the instant it may be used) never exceed capacity plus the
        /// refill until then, and waiting the reply's `retry_after` is never too early.
        #[test]
        fn reservations_never_grant_beyond_the_bucket(
            capacity in 1u64..20,
            rate_milli in 100u64..20_000,
            steps in proptest::collection::vec((0i64..500_000_000, 0u64..25, 0i64..3_000_000_000), 1..100),
        ) {
            let r = Reservation(TokenBucket::new(capacity, Decimal { mantissa: rate_milli as u128, exponent: -3 }).unwrap());
            let mut state: Option<Vec<u8>> = None;
            let mut now = T0;
            let mut usable: Vec<(Nanos, u64)> = vec![];
            for (gap, cost, max_wait) in steps {
                now += gap;
                let o = r.decide(state.as_deref(), now, wait(cost, max_wait)).unwrap();
                prop_assert!(!o.repair, "a queue is never a clock fault");
                if o.verdict.allowed {
                    let w = o.verdict.retry_after_ns.unwrap();
                    prop_assert!(w <= max_wait.min(r.0.period_ns()));
                    usable.push((now + w, cost));
                    if o.write.is_some() { state = Some(stored(&o)); }
                } else {
                    prop_assert!(o.write.is_none());
                }
            }
            usable.sort();
            let mut granted: u128 = 0;
            for (at, cost) in usable {
                granted += u128::from(cost);
                let elapsed = (at - T0) as u128 + u128::from(capacity);
                let bound = u128::from(capacity) + rate_milli as u128 * elapsed / (1000 * SEC as u128);
                prop_assert!(granted <= bound, "granted {} > bound {} at {}", granted, bound, at - T0);
            }
        }
    }
}
