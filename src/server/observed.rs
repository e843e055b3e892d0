//! The one instance of the key classes and heavy hitters (`stats::Observed`), in a `TryCell` taken
//! once per limiter call on the server's main thread (never contended).

use super::cell::TryCell;
use crate::stats::{self, Observed, Outcome};

static OBSERVED: TryCell<Option<Observed>> = TryCell::new(None);

/// Runs `f` on what was observed (None when nothing was yet).
pub fn read<R>(f: impl FnOnce(&Observed) -> R) -> Option<R> {
    OBSERVED.with(|o| o.as_ref().map(f)).flatten()
}

/// Records one call (see `stats::observe`).
pub fn record<'a>(outcome: Outcome, key: impl Fn(usize) -> Option<&'a [u8]>, now_ms: impl FnOnce() -> i64) {
    OBSERVED.with(|o| stats::observe(o, outcome, key, now_ms));
}

/// Zeroes the counters and forgets the classes and the heavy hitters (RL.RESETSTATS).
pub fn reset() {
    super::command::registered_stats().for_each(|counters| counters.reset());
    OBSERVED.with(|o| *o = None);
}
