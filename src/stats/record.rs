//! The key classes and the heavy hitters, and how one call's outcome is recorded in them. The one
//! instance lives with the server (`server::observed`), which hands it here once per limiter call.

use super::classes::{Classes, Outcome as ClassOutcome};
use super::config;
use super::heavy::HeavyHitters;
use super::Outcome;

#[derive(Default)]
pub struct Observed {
    pub classes: Classes,
    pub denied: HeavyHitters,
}

/// Records one call's outcome, given its keys by position: allowed counts for every key's class, a
/// denial for the class of the key that denied (and in the heavy hitters), an error for the first
/// key's class.
pub fn observe<'a>(
    observed: &mut Option<Observed>,
    outcome: Outcome,
    key: impl Fn(usize) -> Option<&'a [u8]>,
    now_ms: impl FnOnce() -> i64,
) {
    if !config::class_stats() {
        return;
    }
    let (separator, limit) = (config::SEPARATOR.get(), config::class_limit());
    {
        let observed = observed.get_or_insert_with(Observed::default);
        match outcome {
            Outcome::Allowed => {
                let mut position = 0;
                while let Some(k) = key(position) {
                    observed.classes.record(k, separator, limit, ClassOutcome::Allowed);
                    position += 1;
                }
            }
            Outcome::Denied { limiting } => {
                if let Some(k) = key(limiting) {
                    observed.classes.record(k, separator, limit, ClassOutcome::Denied);
                    observed.denied.record(k, now_ms(), config::top_size());
                }
            }
            Outcome::Error => {
                if let Some(k) = key(0) {
                    observed.classes.record(k, separator, limit, ClassOutcome::Error);
                }
            }
            Outcome::Report => {}
        }
    }
}
