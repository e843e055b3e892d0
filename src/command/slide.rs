//! RL.SLIDE key limit window id [DEDUP]
//!
//! The exact sliding window (see `ratelimit_core::sliding_log`): a compact log of the allowed requests'
//! times in one string. An ordinary request overwrites one 8-byte slot in place and replicates one
//! SETRANGE; growing or shrinking the log rewrites it (replicated as SET ... PXAT).

use super::limit;
use super::parse::{bytes, split};
use crate::server::{Arg, Command, Keys, Reply, RlError, Spec};
use crate::stats::CommandStats;
use ratelimit_core::kind::Declare;
use ratelimit_core::sliding_log::SlidingLog;
use redis_module::Context;

/// Its counters in INFO ratelimit (`slide_allowed`, `slide_denied`, `slide_errors`).
static STATS: CommandStats = CommandStats::new("slide");

pub struct Slide;

impl Command for Slide {
    // Not "fast": growing or shrinking a log copies it (amortised O(1), worst O(limit)).
    const SPEC: Spec = Spec::limiter(c"rl.slide", c"write deny-oom", Keys::FIRST, &STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let ([key, limit, window], rest) = split::<3>(args)?;
        let (request, n) = bytes::<3>(rest).ok_or(RlError::WrongArity)?;
        let request = <SlidingLog as Declare>::REQUEST.parse_whole(&request[..n])?;
        let log = SlidingLog::parse([limit.bytes(), window.bytes()])?;
        limit::decide(ctx, key, &log, log.request(request, id_hash)?)
    }
}

/// Request ids are stored as the first 8 bytes of their SHA-1 (`sliding_log::id_hash`): the same on
/// every server and after a restart, and in the Lua library.
pub use ratelimit_core::sliding_log::id_hash;
