//! RL.FIXED key limit window [cost]
//!
//! A fixed window (see `ratelimit_core::fixed_window`): counter and expiry written together, so a
//! counter without a TTL cannot exist. The body is the window limiters' (`limit::Count`).

use super::limit::{Count, Counting};
use crate::server::{Keys, Spec, FAST_WRITE};
use crate::stats::CommandStats;
use ratelimit_core::fixed_window::FixedWindow;

/// Its counters in INFO ratelimit (`fixed_allowed`, `fixed_denied`, `fixed_errors`).
static STATS: CommandStats = CommandStats::new("fixed");

pub type Fixed = Count<FixedWindow>;

impl Counting for FixedWindow {
    const SPEC: Spec = Spec::limiter(c"rl.fixed", FAST_WRITE, Keys::FIRST, &STATS);
}
