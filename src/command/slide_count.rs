//! RL.SLIDECOUNT key limit window [cost]
//!
//! The sliding window counter (see `ratelimit_core::sliding_counter`): O(1) memory for large limits,
//! within 2 x limit in the worst case.

use super::args::CountArgs;
use super::limit;
use crate::server::{Acl, Arg, Command, Keys, Reply, RlError};
use crate::stats::{counters, CommandStats};
use ratelimit_core::sliding_counter::SlidingCounter;
use redis_module::Context;

pub struct SlideCount;

impl Command for SlideCount {
    const NAME: &'static std::ffi::CStr = c"rl.slidecount";
    const FLAGS: &'static std::ffi::CStr = c"write deny-oom fast";
    const ACL: Acl = Acl::Write;
    const KEYS: Keys = Keys::FIRST;
    const STATS: Option<&'static CommandStats> = Some(&counters::SLIDECOUNT);
    const COUNTED: bool = true;

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let args = CountArgs::parse(args)?;
        limit::decide(ctx, args.key, &SlidingCounter::new(args.limit, args.window_ns)?, args.cost)
    }
}
