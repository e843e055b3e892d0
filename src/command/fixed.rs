//! RL.FIXED key limit window [cost]
//!
//! A fixed window (see `ratelimit_core::fixed_window`): counter and expiry written together, so a
//! counter without a TTL cannot exist. The body is the window limiters' (`limit::Count`).

use super::limit::{Count, Counting};
use crate::server::{Keys, Spec, FAST_WRITE};
use crate::stats::counters;
use ratelimit_core::fixed_window::FixedWindow;

pub type Fixed = Count<FixedWindow>;

impl Counting for FixedWindow {
    const SPEC: Spec = Spec::limiter(c"rl.fixed", FAST_WRITE, Keys::FIRST, &counters::FIXED);
}
