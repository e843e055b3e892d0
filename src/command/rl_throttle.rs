//! RL.THROTTLE key max_burst count_per_period period [quantity]
//!
//! CL.THROTTLE under the name Valkey's request for a built-in limiter proposes: the same arguments,
//! keys and replies (`limited`, seconds: not the RL.* five fields); its errors are worded as the RL.*
//! commands word theirs.

use super::cl_throttle::throttle;
use crate::server::{Arg, Command, Keys, Origin, Reply, RlError, Spec, FAST_WRITE};
use crate::stats::CommandStats;
use redis_module::Context;

/// Its counters in INFO ratelimit (`rl_throttle_allowed`, ...).
static STATS: CommandStats = CommandStats::new("rl_throttle");

pub struct RlThrottle;

impl Command for RlThrottle {
    const SPEC: Spec =
        Spec::limiter(c"rl.throttle", FAST_WRITE, Keys::FIRST, &STATS).with_origin(Origin::Dialect);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        throttle(ctx, args, |e| e.param().map_or(RlError::WrongArity, RlError::from))
    }
}
