//! The sliding window counter: the practical middle ground between an exact log and a fixed window, for large limits. Two fixed-window
//! counters (windows aligned to multiples of `window` since the Unix epoch); the previous window's
//! count is weighted by the part of it that still lies inside the sliding window:
//!
//! `estimate = previous * (window - elapsed) / window + current`
//!
//! and a request of `cost` is allowed iff `estimate + cost <= limit`, compared exactly in integers.
//! O(1) memory per key whatever the limit.
//!
//! Worst-case error: each fixed window admits at most `limit` (the estimate is at least the current
//! count), so any window-long interval, which overlaps two fixed windows, sees at most `2 * limit`;
//! the excess over `limit` comes from the previous window's requests being bunched at its end, where the
//! weighting assumes they were spread evenly. With evenly spread traffic it is exact.

//!
//! Stored as three little-endian u64 words (window index, current count, previous count) behind the
//! tag `RLC\x01`; the key expires at the end of the window after the current one.

use crate::error::StateError;
use crate::format::{word, words, Layout};
use crate::limiter::{Change, Expiry, Field, Write};
use crate::state::{SmallState, Step};
use crate::time::{ceil_ms, Nanos};
use crate::verdict::Verdict;
use crate::window::{WindowAlgorithm, Windowed};

/// The sliding counter's algorithm (see `window::Windowed`).
#[derive(Debug, PartialEq, Eq)]
pub enum Counter {}

impl WindowAlgorithm for Counter {
    const NAME: &'static str = "sliding_counter";
    const GROUP: &'static str = "SLIDECOUNT";
    const COMMAND: &'static str = "RL.SLIDECOUNT";
    const SYNTAX: &'static str = "RL.SLIDECOUNT key limit window [cost]";
    const FUNCTION: &'static str = "rl_slidecount";
}

/// Valid sliding counter parameters.
pub type SlidingCounter = Windowed<Counter>;

/// Counts of the window with index `window` (since the epoch) and of the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[doc(hidden)] // public for the benches and the fuzz tests
pub struct CounterState {
    pub window: u64,
    pub current: u64,
    pub previous: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)] // public for the benches and the fuzz tests
pub struct CounterDecision {
    pub verdict: Verdict,
    pub new_state: Option<CounterState>,
    /// When the state stops mattering (the end of the window after the current one).
    pub expires_at: Nanos,
}

impl SlidingCounter {
    #[doc(hidden)] // public for the benches and the fuzz tests
    pub fn decide_counts(&self, state: Option<CounterState>, now: Nanos, cost: u64) -> CounterDecision {
        let w = self.window_ns as u128;
        let index_now = (now.max(0) / self.window_ns) as u64;
        // Roll the stored counts forward to the current window. A state from a later window (a clock
        // that stepped back, a primary whose clock ran ahead) is repaired into the current window with
        // its counts, and stored even on a denial: it never grants extra, and never locks a client out
        // until the clock catches up.
        let repaired =
            state.filter(|s| s.window > index_now).map(|s| CounterState { window: index_now, ..s });
        let s = match repaired.or(state) {
            Some(s) if s.window == index_now => s,
            Some(s) if s.window.checked_add(1) == Some(index_now) => {
                CounterState { window: index_now, current: 0, previous: s.current }
            }
            _ => CounterState { window: index_now, ..Default::default() },
        };
        let elapsed = if s.window == index_now { (now.max(0) % self.window_ns) as u128 } else { 0 };
        let weighted_previous = u128::from(s.previous) * (w - elapsed);
        let capacity = u128::from(self.limit) * w;
        let used = |current: u64| weighted_previous.saturating_add(u128::from(current) * w);
        let remaining = |current: u64| (capacity.saturating_sub(used(current)) / w) as u64;
        let reset = |current: u64| -> Nanos {
            let to_window_end = (w - elapsed) as Nanos;
            if current > 0 {
                to_window_end.saturating_add(self.window_ns)
            } else if s.previous > 0 {
                to_window_end
            } else {
                0
            }
        };
        let expires_at = ((s.window as u128 + 2) * w).min(Nanos::MAX as u128) as Nanos;
        let verdict = |allowed: bool, current: u64, retry: Option<Nanos>| Verdict {
            allowed,
            limit: self.limit,
            remaining: remaining(current),
            retry_after_ns: retry,
            reset_after_ns: reset(current),
        };
        if cost > self.limit {
            return CounterDecision {
                verdict: verdict(false, s.current, None),
                new_state: repaired,
                expires_at,
            };
        }
        let after = s.current.saturating_add(cost);
        if used(after) <= capacity {
            let new_state = (cost > 0).then_some(CounterState { current: after, ..s }).or(repaired);
            return CounterDecision { verdict: verdict(true, after, Some(0)), new_state, expires_at };
        }
        CounterDecision {
            verdict: verdict(false, s.current, Some(self.retry_after(&s, elapsed, cost))),
            new_state: repaired,
            expires_at,
        }
    }

    /// Time until `cost` fits, for a request denied now.
    fn retry_after(&self, s: &CounterState, elapsed: u128, cost: u64) -> Nanos {
        let w = self.window_ns as u128;
        // The smallest elapsed time e in a window with counts (previous, current) at which
        // previous * (w - e) <= room * w, with room = limit - current - cost >= 0.
        let fits_at = |previous: u64, room: u64| -> u128 {
            if previous == 0 {
                return 0;
            }
            w.saturating_sub(u128::from(room) * w / u128::from(previous))
        };
        let wait = match self.limit.checked_sub(s.current).and_then(|r| r.checked_sub(cost)) {
            Some(room) => fits_at(s.previous, room).saturating_sub(elapsed),
            // Only in the next window, where this window's count becomes the previous one.
            None => (w - elapsed) + fits_at(s.current, self.limit - cost),
        };
        wait.min(Nanos::MAX as u128) as Nanos
    }

    /// The state after giving back `units` from the current window (never below zero); None when
    /// nothing changes.
    #[doc(hidden)] // public for the benches and the fuzz tests
    pub fn refund_counts(&self, state: Option<CounterState>, now: Nanos, units: u64) -> Option<CounterState> {
        let index_now = (now.max(0) / self.window_ns) as u64;
        let s = state.filter(|s| s.window >= index_now && s.current > 0 && units > 0)?;
        Some(CounterState { current: s.current.saturating_sub(units), ..s })
    }
}

impl SmallState for SlidingCounter {
    type State = CounterState;
    const LAYOUT: Layout = Layout::SlidingCounter;

    #[inline]
    fn decode(stored: &[u8]) -> Result<CounterState, StateError> {
        let p = Layout::SlidingCounter.payload(stored).ok_or(StateError)?;
        let w = |i| word(p, i).ok_or(StateError);
        Ok(CounterState { window: w(0)?, current: w(1)?, previous: w(2)? })
    }

    #[inline]
    fn step(&self, state: Option<CounterState>, now: Nanos, cost: u64) -> Step<CounterState> {
        let d = self.decide_counts(state, now, cost);
        let repair = d.new_state.is_some() && !(d.verdict.allowed && cost > 0);
        Step { verdict: d.verdict, next: d.new_state, repair }
    }

    /// The key expires when its counts stop mattering: the end of the window after the current one.
    #[inline]
    fn write(&self, state: &CounterState, _previous: Option<&CounterState>, now: Nanos) -> Write {
        let expires_at = self.decide_counts(Some(*state), now, 0).expires_at;
        Write {
            change: Change::Set(words(
                Layout::SlidingCounter,
                &[state.window, state.current, state.previous],
            )),
            expiry: Expiry::Within { at_least_ms: ceil_ms(expires_at), slack_ms: 0 },
        }
    }

    fn fields(s: &CounterState, _now: Nanos) -> Vec<Field> {
        let n = |v: u64| Some(i64::try_from(v).unwrap_or(i64::MAX));
        vec![("window_index", n(s.window)), ("current", n(s.current)), ("previous", n(s.previous))]
    }

    fn give_back(&self, state: Option<CounterState>, now: Nanos, units: u64) -> Option<CounterState> {
        self.refund_counts(state, now, units)
    }

    /// A window is known by its index since the epoch.
    fn mark(state: &CounterState) -> i64 {
        i64::try_from(state.window).unwrap_or(i64::MAX)
    }

    /// In the window `mark` while it is the current or the previous one (whose count still weighs):
    /// never a later one.
    fn adjust(&self, state: Option<CounterState>, now: Nanos, mark: i64, delta: i128) -> Option<CounterState> {
        let index_now = (now.max(0) / self.window_ns) as u64;
        let mark = u64::try_from(mark).ok().filter(|m| m.saturating_add(1) >= index_now)?;
        let s = state.filter(|s| s.window <= index_now)?;
        let next = if s.window == mark {
            CounterState { current: crate::state::moved(s.current, delta), ..s }
        } else if s.window == mark.saturating_add(1) {
            CounterState { previous: crate::state::moved(s.previous, delta), ..s }
        } else {
            return None;
        };
        (next != s).then_some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NANOS_PER_SEC as SEC;
    use proptest::prelude::*;

    const T0: Nanos = 1_700_000_000 * SEC; // a multiple of 10 s

    fn run(c: &SlidingCounter, state: &mut Option<CounterState>, now: Nanos, cost: u64) -> CounterDecision {
        let d = c.decide_counts(*state, now, cost);
        if d.new_state.is_some() {
            *state = d.new_state;
        }
        d
    }

    #[test]
    fn weights_the_previous_window() {
        let c = SlidingCounter::new(10, 10 * SEC).unwrap();
        let mut state = None;
        for _ in 0..10 {
            assert!(run(&c, &mut state, T0 + SEC, 1).verdict.allowed);
        }
        // 2.5 s into the next window, 75% of the previous 10 still count: room for 2 (7.5 + 2 <= 10).
        let now = T0 + 12_500_000_000;
        assert_eq!(c.decide_counts(state, now, 0).verdict.remaining, 2);
        assert!(run(&c, &mut state, now, 2).verdict.allowed);
        let denied = run(&c, &mut state, now, 1);
        assert!(!denied.verdict.allowed);
        // 10 * (10 - e) <= 7 * 10  =>  e >= 3 s: 0.5 s from now.
        assert_eq!(denied.verdict.retry_after_ns, Some(500_000_000));
        assert!(c.decide_counts(state, now + 500_000_000, 1).verdict.allowed);
        assert!(!c.decide_counts(state, now + 499_999_999, 1).verdict.allowed);
    }

    #[test]
    fn a_full_current_window_waits_for_the_next() {
        let c = SlidingCounter::new(4, 10 * SEC).unwrap();
        let mut state = None;
        for _ in 0..4 {
            run(&c, &mut state, T0 + 9 * SEC, 1);
        }
        let d = run(&c, &mut state, T0 + 9 * SEC, 2);
        // Next window: 4 * (10 - e) <= 2 * 10  =>  e >= 5 s; 1 s to the boundary + 5 s.
        assert_eq!(d.verdict.retry_after_ns, Some(6 * SEC));
        assert_eq!(d.verdict.reset_after_ns, 11 * SEC);
        assert_eq!(c.decide_counts(state, T0 + 9 * SEC, 5).verdict.retry_after_ns, None);
    }

    #[test]
    fn a_state_from_a_later_window_is_repaired_into_the_current_one() {
        let c = SlidingCounter::new(4, 10 * SEC).unwrap();
        let future = Some(CounterState { window: (T0 / (10 * SEC)) as u64 + 360, current: 4, previous: 0 });
        let d = c.decide_counts(future, T0 + SEC, 1);
        assert!(!d.verdict.allowed, "what was counted still counts");
        assert_eq!(
            d.new_state,
            Some(CounterState { window: (T0 / (10 * SEC)) as u64, current: 4, previous: 0 })
        );
        assert_eq!(d.verdict.reset_after_ns, 19 * SEC, "no lock-out beyond the next window");
    }

    #[test]
    fn state_roundtrips_tagged_and_reads_the_untagged_format_of_0_1() {
        let c = SlidingCounter::new(10, 10 * SEC).unwrap();
        let written = crate::limiter::Limiter::decide(&c, None, T0, 3).unwrap().write.unwrap();
        let Change::Set(bytes) = written.change else { panic!("a counter is written whole") };
        assert_eq!(&bytes.as_ref()[..4], b"RLC\x01");
        let s = SlidingCounter::decode(bytes.as_ref()).unwrap();
        assert_eq!((s.current, s.previous), (3, 0));
        // 0.1 wrote the three words untagged: window 170000000, current 3, previous 9.
        let mut old = Vec::new();
        for w in [170_000_000u64, 3, 9] {
            old.extend_from_slice(&w.to_le_bytes());
        }
        assert_eq!(
            SlidingCounter::decode(&old),
            Ok(CounterState { window: 170_000_000, current: 3, previous: 9 })
        );
        assert_eq!(SlidingCounter::decode(&[0; 23]), Err(StateError));
        assert_eq!(SlidingCounter::decode(&[0; 16]), Err(StateError), "a fixed window's state");
    }

    proptest! {
        /// Each aligned window admits at most limit, so any window-long interval at most 2 * limit;
        /// waiting retry_after is enough.
        #[test]
        fn bounded_by_limit_per_window_and_twice_per_interval(
            limit in 1u64..20,
            steps in proptest::collection::vec((0i64..1_500_000_000, 0u64..4), 1..300),
        ) {
            let window = 10 * SEC;
            let c = SlidingCounter::new(limit, window).unwrap();
            let mut state = None;
            let mut now = T0;
            let mut admitted: Vec<(Nanos, u64)> = Vec::new();
            for (gap, cost) in steps {
                now += gap;
                let d = run(&c, &mut state, now, cost);
                if d.verdict.allowed && cost > 0 {
                    admitted.push((now, cost));
                }
                if let (false, Some(retry)) = (d.verdict.allowed, d.verdict.retry_after_ns) {
                    prop_assert!(c.decide_counts(state, now + retry, cost).verdict.allowed);
                }
                let in_interval: u64 = admitted.iter().filter(|(t, _)| t + window > now).map(|(_, c)| c).sum();
                let in_aligned: u64 = admitted.iter().filter(|(t, _)| t / window == now / window).map(|(_, c)| c).sum();
                prop_assert!(in_aligned <= limit);
                prop_assert!(in_interval <= 2 * limit);
            }
        }
    }
}
