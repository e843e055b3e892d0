//! Other products' rate-limit commands, as their users know them, on the token bucket's engine: each
//! dialect parses its command's arguments with its rules, reports its errors in its words and turns a
//! token bucket's [`Verdict`](crate::verdict::Verdict) into its reply. None is a new algorithm.
//!
//! - [`cell`]: `CL.THROTTLE` (redis-cell 0.5; also Dragonfly's) and `RL.THROTTLE`, Valkey's proposed
//!   name for it; its keys keep redis-cell's stored format, so a rollback to redis-cell keeps them.
//! - [`gcra`]: `GCRA` as Redis core had it (compiled out of 8.8); its keys are RL.TOKEN's.

pub mod cell;
pub mod gcra;

use crate::time::{Nanos, NANOS_PER_SEC};

/// The five integers both dialects reply: `limited` (1 denied), the limit, the units remaining, the
/// seconds until the request would be allowed (-1 when allowed, or never), the seconds until full.
pub type Reply = [i64; 5];

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(ns: Nanos) -> i64 {
    if ns <= 0 {
        return 0;
    }
    ns / NANOS_PER_SEC + i64::from(ns % NANOS_PER_SEC != 0)
}
