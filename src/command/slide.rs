//! RL.SLIDE key limit window id [DEDUP]
//!
//! The exact sliding window (see `ratelimit_core::sliding_log`): a compact log of the allowed requests'
//! times in one string. An ordinary request overwrites one 8-byte slot in place and replicates one
//! SETRANGE; growing or shrinking the log rewrites it (replicated as SET ... PXAT).

use super::limit;
use super::parse::{split, whole_for, window};
use crate::server::{Arg, Command, Keys, Reply, RlError, Spec};
use crate::stats::CommandStats;
use ratelimit_core::sliding_log::{RequestId, SlidingLog, LIMIT, MAX_LIMIT};
use redis_module::Context;
use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;

/// Its counters in INFO ratelimit (`slide_allowed`, `slide_denied`, `slide_errors`).
static STATS: CommandStats = CommandStats::new("slide");

pub struct Slide;

impl Command for Slide {
    // Not "fast": growing or shrinking a log copies it (amortised O(1), worst O(limit)).
    const SPEC: Spec = Spec::limiter(c"rl.slide", c"write deny-oom", Keys::FIRST, &STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let ([key, limit, window_arg, id], rest) = split::<4>(args)?;
        let dedup = match rest {
            [] => false,
            [option] if option.bytes().eq_ignore_ascii_case(b"DEDUP") => true,
            [_] => return Err(RlError::Syntax),
            _ => return Err(RlError::WrongArity),
        };
        let log = parse_log(limit, window_arg)?;
        limit::decide(ctx, key, &log, request_id(id, dedup)?)
    }
}

/// A log from its `limit` and `window` arguments (RL.SLIDE's, and RL.INSPECT's for a log).
pub fn parse_log(limit: &Arg, window_arg: &Arg) -> Result<SlidingLog, RlError> {
    let limit = whole_for(limit.bytes(), LIMIT, 1)?;
    if limit > MAX_LIMIT {
        return Err(LIMIT.into());
    }
    let window_us = (window(window_arg.bytes())? / 1000) as u64;
    Ok(SlidingLog::new(limit, window_us)?)
}

/// A request's id (non-empty), as the log stores it.
pub fn request_id(id: &Arg, dedup: bool) -> Result<RequestId, RlError> {
    if id.bytes().is_empty() {
        return Err(RlError::invalid("id", "must not be empty"));
    }
    Ok(RequestId { hash: id_hash(id.bytes()), dedup })
}

/// Request ids are stored as keyed 64-bit hashes (SipHash with a key chosen at module load), so
/// callers cannot craft ids that collide with other ids. After a restart the key differs: ids recorded
/// before it no longer match, and a retry of one of them counts again (never less).
fn id_hash(id: &[u8]) -> u64 {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    KEYS.get_or_init(RandomState::new).hash_one(id)
}
