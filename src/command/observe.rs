//! Who is limited: outcomes per key class and the most denied keys, recorded after each limiter call
//! (when `ratelimit.class-stats` is on), in one `TryCell` taken once per call on the server's main
//! thread (never contended). Per server process: a restart or RL.RESETSTATS clears it.

use super::arg::Arg;
use super::classes::{Classes, Outcome};
use super::config;
use super::error::RlError;
use super::heavy::HeavyHitters;
use super::registry::KeySpec;
use super::reply::Reply;
use super::try_cell::TryCell;

#[derive(Default)]
pub struct Observed {
    pub classes: Classes,
    pub denied: HeavyHitters,
}

static OBSERVED: TryCell<Option<Observed>> = TryCell::new(None);

/// Runs `f` on what was observed (None when nothing was yet, or in the impossible case of a second
/// thread holding it).
pub fn read<R>(f: impl FnOnce(&Observed) -> R) -> Option<R> {
    OBSERVED.with(|o| o.as_ref().map(f)).flatten()
}

fn key_at<'a>(args: &'a [Arg], keys: &KeySpec, position: usize) -> Option<&'a [u8]> {
    keys.key(args, position).map(Arg::bytes)
}

/// Records one call's outcome: allowed counts for every key's class, a denial for the class of the
/// key that denied (and in the heavy hitters), an error for the first key's class.
pub fn record(args: &[Arg], keys: &KeySpec, result: &Result<Reply, RlError>, now_ms: impl FnOnce() -> i64) {
    if !config::class_stats() {
        return;
    }
    let (separator, limit) = (config::SEPARATOR.get(), config::class_limit());
    OBSERVED.with(|o| {
        record_in(o.get_or_insert_with(Observed::default), args, keys, result, separator, limit, now_ms)
    });
}

fn record_in(
    observed: &mut Observed,
    args: &[Arg],
    keys: &KeySpec,
    result: &Result<Reply, RlError>,
    separator: u8,
    limit: usize,
    now_ms: impl FnOnce() -> i64,
) {
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
    OBSERVED.with(|o| *o = None);
}
