//! RL.SLIDECOUNT key limit window [cost]
//!
//! The sliding window counter (see `ratelimit_core::sliding_counter`): O(1) memory for large limits,
//! within 2 x limit in the worst case. The body is the window limiters' (`limit::Count`).

use super::limit::{Count, Counting};
use crate::server::{Keys, Spec, FAST_WRITE};
use crate::stats::CommandStats;
use ratelimit_core::sliding_counter::SlidingCounter;

/// Its counters in INFO ratelimit (`slidecount_allowed`, `slidecount_denied`, `slidecount_errors`).
static STATS: CommandStats = CommandStats::new("slidecount");

pub type SlideCount = Count<SlidingCounter>;

impl Counting for SlidingCounter {
    const SPEC: Spec = Spec::limiter(c"rl.slidecount", FAST_WRITE, Keys::FIRST, &STATS);
}
