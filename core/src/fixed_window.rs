//! The fixed window: up to `limit` units per window; a window starts at its first allowed request and
//! lasts `window`. The usual INCR + EXPIRE, with the counter and its end decided together.
//!
//! State: the units counted in the current window and the instant the window ends (the key's expiry),
//! stored as two little-endian words (u64 count, i64 Unix ns) behind the tag `RLF\x01`.

use crate::error::StateError;
use crate::format::{word, words, Layout};
use crate::limiter::{Change, Expiry, Field, Write};
use crate::state::{SmallState, Step};
use crate::time::{ceil_ms, Nanos};
use crate::verdict::Verdict;
use crate::window::{WindowAlgorithm, Windowed};

pub use crate::window::{LIMIT, WINDOW};

/// The fixed window's algorithm (see `window::Windowed`).
#[derive(Debug, PartialEq, Eq)]
pub enum Fixed {}

impl WindowAlgorithm for Fixed {
    const NAME: &'static str = "fixed_window";
    const GROUP: &'static str = "FIXED";
    const COMMAND: &'static str = "RL.FIXED";
    const SYNTAX: &'static str = "RL.FIXED key limit window [cost]";
    const FUNCTION: &'static str = "rl_fixed";
}

/// Valid fixed window parameters.
pub type FixedWindow = Windowed<Fixed>;

/// A window in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)] // public for the benches and the fuzz tests
pub struct WindowState {
    pub count: u64,
    pub ends_at: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)] // public for the benches and the fuzz tests
pub struct FixedDecision {
    pub verdict: Verdict,
    /// The state to store: when the request counted, or when an impossible state was repaired.
    pub new_state: Option<WindowState>,
    /// Whether `new_state` starts a new window (and so a new expiry).
    pub new_window: bool,
}

impl FixedWindow {
    /// Decides `cost` units at `now`. A window that has ended counts as none: a new one starts now.
    /// A window that ends further ahead than one window (a clock that stepped back, a primary whose
    /// clock ran ahead) is repaired: its count is kept and it ends one window from now, so a clock
    /// fault neither forgets what was counted nor locks a client out for longer than one window.
    #[doc(hidden)] // public for the benches and the fuzz tests
    pub fn decide_window(&self, state: Option<WindowState>, now: Nanos, cost: u64) -> FixedDecision {
        let latest_end = now.saturating_add(self.window_ns);
        let stored = state.filter(|s| s.ends_at > now);
        let repaired =
            stored.filter(|s| s.ends_at > latest_end).map(|s| WindowState { ends_at: latest_end, ..s });
        let current = repaired.or(stored);
        let (count, ends_at) = current.map_or((0, latest_end), |s| (s.count, s.ends_at));
        let open_for = if current.is_some() { ends_at.saturating_sub(now) } else { 0 };
        let verdict = |allowed: bool, count: u64, retry: Option<Nanos>, reset: Nanos| Verdict {
            allowed,
            limit: self.limit,
            remaining: self.limit.saturating_sub(count),
            retry_after_ns: retry,
            reset_after_ns: reset,
        };
        let unchanged = |verdict: Verdict| FixedDecision { verdict, new_state: repaired, new_window: false };
        if cost > self.limit {
            return unchanged(verdict(false, count, None, open_for));
        }
        match count.checked_add(cost).filter(|&total| total <= self.limit) {
            Some(total) if cost > 0 => FixedDecision {
                verdict: verdict(true, total, Some(0), ends_at.saturating_sub(now)),
                new_state: Some(WindowState { count: total, ends_at }),
                new_window: current.is_none(),
            },
            Some(_) => unchanged(verdict(true, count, Some(0), open_for)),
            None => unchanged(verdict(false, count, Some(open_for), open_for)),
        }
    }

    /// The state after giving back `units` at `now`: None when nothing changes (no window open, or
    /// nothing counted). The count never goes below zero.
    #[doc(hidden)] // public for the benches and the fuzz tests
    pub fn refund_window(&self, state: Option<WindowState>, now: Nanos, units: u64) -> Option<WindowState> {
        let s = state.filter(|s| s.ends_at > now && s.count > 0 && units > 0)?;
        Some(WindowState { count: s.count.saturating_sub(units), ends_at: s.ends_at })
    }
}

impl SmallState for FixedWindow {
    type State = WindowState;
    const LAYOUT: Layout = Layout::FixedWindow;

    #[inline]
    fn decode(stored: &[u8]) -> Result<WindowState, StateError> {
        let p = Layout::FixedWindow.payload(stored).ok_or(StateError)?;
        let count = word(p, 0).ok_or(StateError)?;
        Ok(WindowState { count, ends_at: word(p, 1).ok_or(StateError)? as Nanos })
    }

    #[inline]
    fn step(&self, state: Option<WindowState>, now: Nanos, cost: u64) -> Step<WindowState> {
        let d = self.decide_window(state, now, cost);
        let repair = d.new_state.is_some() && !(d.verdict.allowed && cost > 0);
        Step { verdict: d.verdict, next: d.new_state, repair }
    }

    /// The key expires exactly when the window ends.
    #[inline]
    fn write(&self, state: &WindowState, _previous: Option<&WindowState>, _now: Nanos) -> Write {
        Write {
            change: Change::Set(words(Layout::FixedWindow, &[state.count, state.ends_at as u64])),
            expiry: Expiry::Within { at_least_ms: ceil_ms(state.ends_at), slack_ms: 0 },
        }
    }

    fn fields(s: &WindowState, _now: Nanos) -> Vec<Field> {
        let count = i64::try_from(s.count).unwrap_or(i64::MAX);
        vec![("count", Some(count)), ("window_ends_at_ms", Some(ceil_ms(s.ends_at)))]
    }

    fn give_back(&self, state: Option<WindowState>, now: Nanos, units: u64) -> Option<WindowState> {
        self.refund_window(state, now, units)
    }

    /// A window is known by its end, in ms.
    fn mark(state: &WindowState) -> i64 {
        ceil_ms(state.ends_at)
    }

    /// Only while the window `mark` is open: never a later one.
    fn adjust(&self, state: Option<WindowState>, now: Nanos, mark: i64, delta: i128) -> Option<WindowState> {
        let s = state.filter(|s| s.ends_at > now && ceil_ms(s.ends_at) == mark)?;
        let count = crate::state::moved(s.count, delta);
        (count != s.count).then_some(WindowState { count, ..s })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NANOS_PER_SEC as SEC;
    use proptest::prelude::*;

    const T0: Nanos = 1_700_000_000 * SEC;

    fn apply(w: &FixedWindow, state: &mut Option<WindowState>, now: Nanos, cost: u64) -> FixedDecision {
        let d = w.decide_window(*state, now, cost);
        if d.new_state.is_some() {
            *state = d.new_state;
        }
        d
    }

    #[test]
    fn counts_up_to_the_limit_then_denies_until_the_window_ends() {
        let w = FixedWindow::new(3, 60 * SEC).unwrap();
        let mut state = None;
        let first = apply(&w, &mut state, T0, 1);
        assert!(first.new_window);
        assert_eq!(state, Some(WindowState { count: 1, ends_at: T0 + 60 * SEC }));
        assert!(apply(&w, &mut state, T0 + SEC, 2).verdict.allowed);
        let denied = apply(&w, &mut state, T0 + 10 * SEC, 1);
        assert_eq!(
            denied.verdict,
            Verdict {
                allowed: false,
                limit: 3,
                remaining: 0,
                retry_after_ns: Some(50 * SEC),
                reset_after_ns: 50 * SEC
            }
        );
        assert_eq!(denied.new_state, None, "denied requests are not counted");
        let next = apply(&w, &mut state, T0 + 60 * SEC, 1);
        assert!(next.verdict.allowed && next.new_window);
        assert_eq!(state, Some(WindowState { count: 1, ends_at: T0 + 120 * SEC }));
    }

    #[test]
    fn costs_peeks_and_impossible_requests() {
        let w = FixedWindow::new(5, SEC).unwrap();
        let peek = w.decide_window(None, T0, 0);
        assert_eq!((peek.verdict.allowed, peek.verdict.remaining, peek.new_state), (true, 5, None));
        assert_eq!(w.decide_window(None, T0, 6).verdict.retry_after_ns, None);
        let state = Some(WindowState { count: 4, ends_at: T0 + SEC / 2 });
        assert!(!w.decide_window(state, T0, 2).verdict.allowed);
        assert!(w.decide_window(state, T0, 1).verdict.allowed);
    }

    #[test]
    fn a_window_from_a_clock_that_stepped_back_keeps_its_count_and_ends_within_a_window() {
        let w = FixedWindow::new(5, SEC).unwrap();
        let far = Some(WindowState { count: 5, ends_at: T0 + 3600 * SEC });
        let d = w.decide_window(far, T0, 1);
        assert!(!d.verdict.allowed, "what was counted still counts");
        assert_eq!(d.verdict.retry_after_ns, Some(SEC));
        assert_eq!(
            d.new_state,
            Some(WindowState { count: 5, ends_at: T0 + SEC }),
            "repaired, even on a denial"
        );
        let partly = Some(WindowState { count: 2, ends_at: T0 + 3600 * SEC });
        let d = w.decide_window(partly, T0, 1);
        assert!(d.verdict.allowed && !d.new_window);
        assert_eq!(d.new_state, Some(WindowState { count: 3, ends_at: T0 + SEC }));
    }

    #[test]
    fn refunds_never_go_below_zero() {
        let w = FixedWindow::new(5, SEC).unwrap();
        let s = Some(WindowState { count: 2, ends_at: T0 + SEC });
        assert_eq!(w.refund_window(s, T0, 1), Some(WindowState { count: 1, ends_at: T0 + SEC }));
        assert_eq!(w.refund_window(s, T0, 9), Some(WindowState { count: 0, ends_at: T0 + SEC }));
        assert_eq!(w.refund_window(s, T0 + SEC, 1), None);
        assert_eq!(w.refund_window(None, T0, 1), None);
    }

    proptest! {
        /// Within one window never more than limit units are admitted.
        #[test]
        fn never_more_than_limit_per_window(limit in 1u64..30, steps in proptest::collection::vec((0i64..300_000_000, 0u64..8), 1..200)) {
            let w = FixedWindow::new(limit, SEC).unwrap();
            let mut state = None;
            let mut now = T0;
            let mut in_window = 0u64;
            for (gap, cost) in steps {
                now += gap;
                let d = apply(&w, &mut state, now, cost);
                if d.new_window { in_window = 0; }
                if d.verdict.allowed { in_window += cost; }
                prop_assert!(in_window <= limit);
                prop_assert!(d.verdict.remaining <= limit);
            }
        }
    }
}
