//! RL.REFUND TOKEN key capacity rate tokens
//! RL.REFUND FIXED key limit window units
//! RL.REFUND SLIDECOUNT key limit window units
//!
//! Gives back what a request took when it turns out not to count (a failed upstream call, a cheaper
//! request than estimated). Never more than the limit: a bucket is at most full, a count at least 0.
//! Replicated like any write. Replies with the limiter's state after the refund, as a peek would.

use super::args::CountArgs;
use super::{limit, token};
use crate::server::{Acl, Arg, Command, Keys, Reply, RlError};
use crate::stats::{counters, CommandStats};
use ratelimit_core::fixed_window::FixedWindow;
use ratelimit_core::sliding_counter::SlidingCounter;
use redis_module::Context;

pub struct Refund;

impl Command for Refund {
    const NAME: &'static std::ffi::CStr = c"rl.refund";
    const FLAGS: &'static std::ffi::CStr = c"write deny-oom fast";
    const ACL: Acl = Acl::Write;
    const KEYS: Keys = Keys::SECOND;
    const STATS: Option<&'static CommandStats> = Some(&counters::REFUND);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let [kind, rest @ ..] = args else {
            return Err(RlError::WrongArity);
        };
        let kind = kind.bytes();
        if rest.len() != 4
            && [&b"TOKEN"[..], b"FIXED", b"SLIDECOUNT"].iter().any(|k| kind.eq_ignore_ascii_case(k))
        {
            return Err(RlError::WrongArity);
        }
        if kind.eq_ignore_ascii_case(b"TOKEN") {
            let r = token::parse_group(rest)?;
            limit::refund(ctx, r.key, &r.bucket, r.cost)
        } else if kind.eq_ignore_ascii_case(b"FIXED") {
            let a = CountArgs::parse(rest)?;
            limit::refund(ctx, a.key, &FixedWindow::new(a.limit, a.window_ns)?, a.cost)
        } else if kind.eq_ignore_ascii_case(b"SLIDECOUNT") {
            let a = CountArgs::parse(rest)?;
            limit::refund(ctx, a.key, &SlidingCounter::new(a.limit, a.window_ns)?, a.cost)
        } else {
            Err(RlError::Syntax)
        }
    }
}
