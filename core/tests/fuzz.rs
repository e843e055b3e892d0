//! Fuzzing the pure algorithms with arbitrary inputs, extreme values included: nothing panics (the
//! crate is built with overflow checks, so an overflow would), and every verdict is well-formed.
//! Bounded: PROPTEST_CASES (default 2000 here) cases per property.

use proptest::prelude::*;
use ratelimit_core::decimal::Decimal;
use ratelimit_core::fixed_window::{FixedWindow, WindowState};
use ratelimit_core::limiter::apply;
use ratelimit_core::sliding_counter::{CounterState, SlidingCounter};
use ratelimit_core::sliding_log::{Log, RequestId, SlidingLog};
use ratelimit_core::token_bucket::TokenBucket;
use ratelimit_core::verdict::Verdict;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(2000);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

fn any_time() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        Just(i64::MAX),
        Just(i64::MIN),
        Just(-1i64),
        1_600_000_000_000_000_000i64..2_000_000_000_000_000_000,
        any::<i64>()
    ]
}

fn any_u64() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(1u64), Just(u64::MAX), Just(u64::MAX - 1), 0u64..1000, any::<u64>()]
}

fn well_formed(v: &Verdict) -> Result<(), TestCaseError> {
    well_formed_waiting(v, 0)
}

/// Well formed, for a request that may be granted after a wait of up to `max_wait` (a reservation).
fn well_formed_waiting(v: &Verdict, max_wait: i64) -> Result<(), TestCaseError> {
    prop_assert!(v.remaining <= v.limit);
    prop_assert!(v.reset_after_ns >= 0);
    match v.retry_after_ns {
        Some(r) if v.allowed => prop_assert!((0..=max_wait).contains(&r)),
        Some(r) => prop_assert!(r > 0),
        None => prop_assert!(!v.allowed),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn decimal_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), text in "[-+0-9.eE]{0,40}") {
        let _ = Decimal::parse(&bytes);
        if let Ok(d) = Decimal::parse(text.as_bytes()) {
            let _ = (d.div_ceil_into(1_000_000_000), d.mul_ceil(1000), d.mul_exact(1000));
        }
    }

    #[test]
    fn token_bucket_with_any_inputs(
        capacity in any_u64(), mantissa in any::<u128>(), exponent in -100i32..100,
        tat in proptest::option::of(any_time()), now in any_time(), cost in any_u64(),
    ) {
        if let Ok(bucket) = TokenBucket::new(capacity, Decimal { mantissa, exponent }) {
            let d = bucket.decide_tat(tat, now, cost);
            well_formed(&d.verdict)?;
            let _ = bucket.refund_tat(tat, now, cost);
        }
    }

    #[test]
    fn fixed_window_with_any_inputs(
        limit in any_u64(), window in any_time(), count in any_u64(), ends_at in any_time(),
        some in any::<bool>(), now in any_time(), cost in any_u64(),
    ) {
        if let Ok(w) = FixedWindow::new(limit, window) {
            let state = some.then_some(WindowState { count, ends_at });
            well_formed(&w.decide_window(state, now, cost).verdict)?;
            let _ = w.refund_window(state, now, cost);
        }
    }

    #[test]
    fn sliding_counter_with_any_inputs(
        limit in any_u64(), window in any_time(), index in any_u64(), current in any_u64(), previous in any_u64(),
        some in any::<bool>(), now in any_time(), cost in any_u64(),
    ) {
        if let Ok(c) = SlidingCounter::new(limit, window) {
            let state = some.then_some(CounterState { window: index, current, previous });
            well_formed(&c.decide_counts(state, now, cost).verdict)?;
            let _ = c.refund_counts(state, now, cost);
        }
    }

    #[test]
    fn sliding_log_with_any_stored_bytes(
        slots in proptest::collection::vec(any_u64(), 1..40), width16 in any::<bool>(),
        garbage in proptest::collection::vec(any::<u8>(), 0..80),
        limit in 1u64..50, window in any_u64(), now in any_u64(), hash in any::<u64>(), dedup in any::<bool>(),
    ) {
        // A header that parses, followed by arbitrary (unordered, extreme) timestamps.
        let mut value = b"RLS\x01".to_vec();
        value.extend_from_slice(&[if width16 { 16 } else { 8 }, 0, 0, 0]);
        for s in &slots {
            value.extend_from_slice(&s.to_le_bytes());
            if width16 {
                value.extend_from_slice(&s.rotate_left(7).to_le_bytes());
            }
        }
        let _ = Log::parse(&garbage);
        if let Ok(log) = SlidingLog::new(limit, window) {
            let parsed = Log::parse(&value).expect("a well-formed header");
            let d = log.decide_log(Some(parsed), now, RequestId { hash, dedup });
            well_formed(&d.verdict)?;
            if let Some(w) = &d.write {
                apply(&mut value, w);
                prop_assert!(Log::parse(&value).is_ok());
            }
        }
    }

    /// Every limiter kind of the registry, through the contract the adapters use, on any stored
    /// bytes: an error or a well-formed verdict, never a panic; a write it asks for is applied and
    /// read back as that kind's.
    #[test]
    fn every_limiter_on_any_stored_bytes(
        stored in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
        tagged in any::<bool>(), index in any::<prop::sample::Index>(), now in any_time(), cost in 0u64..20,
    ) {
        use ratelimit_core::kind::{AnyLimiter, LimiterKind, RequestArgs};
        use ratelimit_core::limiter::Change;
        let kind = LimiterKind::ALL[index.index(LimiterKind::ALL.len())];
        let mut value = stored.map(|mut v| {
            if tagged && v.len() >= 4 {
                v[..4].copy_from_slice(&kind.layout().tag().unwrap_or_default());
            }
            v
        });
        let limiter = AnyLimiter::parse(kind, [b"10", b"1"]).unwrap();
        let cost_text = cost.to_string();
        let id = cost.to_le_bytes();
        let weight = cost.max(1).to_string();
        let request = match kind.request_form() {
            ratelimit_core::kind::RequestForm::Cost => RequestArgs::Cost(cost_text.as_bytes()),
            ratelimit_core::kind::RequestForm::Id => RequestArgs::Id { id: &id, dedup: cost % 2 == 0 },
            ratelimit_core::kind::RequestForm::Lease => RequestArgs::Lease { id: &id, weight: Some(weight.as_bytes()) },
            ratelimit_core::kind::RequestForm::Reserve => RequestArgs::Reserve { cost: cost_text.as_bytes(), max_wait: b"0.500" },
        };
        let limit = limiter.request(request, |id| id.iter().map(|b| u64::from(*b)).sum()).unwrap();
        if let Ok(o) = limit.decide(value.as_deref(), now) {
            well_formed_waiting(&o.verdict, if kind == LimiterKind::Reservation { 500_000_000 } else { 0 })?;
            if let Some(w) = o.write {
                let v = value.get_or_insert_with(Vec::new);
                apply(v, &w.change);
                if w.change != Change::Delete {
                    prop_assert_eq!(LimiterKind::of(v), Some(kind.owner()));
                }
            }
        }
    }
}
