//! RL.FIXED key limit window [cost]
//!
//! A fixed window (see `ratelimit_core::fixed_window`): counter and expiry written together, so a
//! counter without a TTL cannot exist.

use super::args::CountArgs;
use super::limit;
use crate::server::{Acl, Arg, Command, Keys, Reply, RlError};
use crate::stats::{counters, CommandStats};
use ratelimit_core::fixed_window::FixedWindow;
use redis_module::Context;

pub struct Fixed;

impl Command for Fixed {
    const NAME: &'static std::ffi::CStr = c"rl.fixed";
    const FLAGS: &'static std::ffi::CStr = c"write deny-oom fast";
    const ACL: Acl = Acl::Write;
    const KEYS: Keys = Keys::FIRST;
    const STATS: Option<&'static CommandStats> = Some(&counters::FIXED);
    const COUNTED: bool = true;

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let args = CountArgs::parse(args)?;
        limit::decide(ctx, args.key, &FixedWindow::new(args.limit, args.window_ns)?, args.cost)
    }
}
