//! The key classes and the heavy hitters, behind one lock taken once per limiter call on the server's
//! main thread (never contended). Should it ever be contended (a second thread), the statistic is
//! skipped rather than waited for; a poisoned lock (a panic while recording) is taken over.

use super::classes::{Classes, Outcome as ClassOutcome};
use super::config;
use super::heavy::HeavyHitters;
use super::Outcome;
use std::sync::{Mutex, TryLockError};

#[derive(Default)]
pub struct Observed {
    pub classes: Classes,
    pub denied: HeavyHitters,
}

static OBSERVED: Mutex<Option<Observed>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Option<Observed>) -> R) -> Option<R> {
    match OBSERVED.try_lock() {
        Ok(mut guard) => Some(f(&mut guard)),
        Err(TryLockError::Poisoned(poisoned)) => Some(f(&mut poisoned.into_inner())),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Runs `f` on what was observed (None when nothing was yet).
pub fn read<R>(f: impl FnOnce(&Observed) -> R) -> Option<R> {
    with(|o| o.as_ref().map(f)).flatten()
}

/// Records one call's outcome, given its keys by position: allowed counts for every key's class, a
/// denial for the class of the key that denied (and in the heavy hitters), an error for the first
/// key's class.
pub fn observe<'a>(outcome: Outcome, key: impl Fn(usize) -> Option<&'a [u8]>, now_ms: impl FnOnce() -> i64) {
    if !config::class_stats() {
        return;
    }
    let (separator, limit) = (config::SEPARATOR.get(), config::class_limit());
    with(|o| {
        let observed = o.get_or_insert_with(Observed::default);
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
    });
}

/// Clears the classes and the heavy hitters.
pub(super) fn reset() {
    with(|o| *o = None);
}
