//! Who is limited: outcomes per key class and the most denied keys, recorded after each limiter call
//! (when `ratelimit.class-stats` is on). One lock, taken once per call on the server's main thread
//! (uncontended). Per server process: a restart or RL.RESETSTATS clears it.

use super::arg::Arg;
use super::classes::{Classes, Outcome};
use super::config;
use super::error::RlError;
use super::heavy::HeavyHitters;
use super::reply::Reply;
use std::sync::{Mutex, MutexGuard};

/// Where a command's keys are, for counting: one key, or every `step`-th argument from the first.
#[derive(Clone, Copy)]
pub enum Keys {
    One(usize),
    EveryFromFirst(usize),
}

#[derive(Default)]
pub struct Observed {
    pub classes: Classes,
    pub denied: HeavyHitters,
}

static OBSERVED: Mutex<Option<Observed>> = Mutex::new(None);

pub fn lock() -> MutexGuard<'static, Option<Observed>> {
    OBSERVED.lock().unwrap_or_else(|e| e.into_inner())
}

fn key_at(args: &[Arg], keys: Keys, position: usize) -> Option<&[u8]> {
    let index = match keys {
        Keys::One(i) => (position == 0).then_some(i)?,
        Keys::EveryFromFirst(step) => position * step,
    };
    args.get(index).map(Arg::bytes)
}

/// Records one call's outcome: allowed counts for every key's class, a denial for the class of the
/// key that denied (and in the heavy hitters), an error for the first key's class.
pub fn record(args: &[Arg], keys: Keys, result: &Result<Reply, RlError>, now_ms: impl FnOnce() -> i64) {
    if !config::class_stats() {
        return;
    }
    let (separator, limit) = (config::SEPARATOR.get(), config::class_limit());
    let mut guard = lock();
    let observed = guard.get_or_insert_with(Observed::default);
    match result {
        Ok(Reply::Limit { verdict, .. }) if verdict.allowed => {
            let mut position = 0;
            while let Some(key) = key_at(args, keys, position) {
                observed.classes.record(key, separator, limit, Outcome::Allowed);
                position += 1;
            }
        }
        Ok(Reply::Limit { limiting, .. }) => {
            if let Some(key) = key_at(args, keys, limiting.unwrap_or(0)) {
                observed.classes.record(key, separator, limit, Outcome::Denied);
                observed.denied.record(key, now_ms(), config::top_size());
            }
        }
        Ok(Reply::Value(_)) => {}
        Err(_) => {
            if let Some(key) = key_at(args, keys, 0) {
                observed.classes.record(key, separator, limit, Outcome::Error);
            }
        }
    }
}

/// Clears the classes and the heavy hitters.
pub fn reset() {
    *lock() = None;
}
