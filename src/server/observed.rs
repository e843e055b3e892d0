//! The one instance of the key classes and heavy hitters (`stats::Observed`), in a `TryCell` taken
//! once per limiter call on the server's main thread (never contended).

use super::spec::Spec;
use super::try_cell::TryCell;
use crate::stats::CommandStats;
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
    registered_stats().for_each(|counters| counters.reset());
    OBSERVED.with(|o| *o = None);
}

/// The commands this module registered, in order (set once at load): INFO and RL.RESETSTATS go
/// through their counters.
static REGISTERED: std::sync::OnceLock<Vec<&'static Spec>> = std::sync::OnceLock::new();

pub fn set_registered(specs: Vec<&'static Spec>) {
    let _ = REGISTERED.set(specs);
}

/// The per-command counters of the registered commands, in order.
pub fn registered_stats() -> impl Iterator<Item = &'static CommandStats> {
    REGISTERED.get().map_or(&[][..], Vec::as_slice).iter().filter_map(|spec| spec.stats)
}
