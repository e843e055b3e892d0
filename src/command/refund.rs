//! RL.REFUND TOKEN key capacity rate tokens
//! RL.REFUND FIXED key limit window units
//! RL.REFUND SLIDECOUNT key limit window units
//!
//! Gives back what a request took when it turns out not to count (a failed upstream call, a cheaper
//! request than estimated). Never more than the limit: a bucket is at most full, a count at least 0.
//! Replicated like any write. Replies with the limiter's state after the refund, as a peek would.

use super::parse::split;
use super::{limit, token};
use crate::server::{Acl, Arg, Command, Keys, Reply, RlError, Spec, FAST_WRITE};
use crate::stats::CommandStats;
use ratelimit_core::fixed_window::FixedWindow;
use ratelimit_core::sliding_counter::SlidingCounter;
use redis_module::Context;

/// Its counters in INFO ratelimit (`refund_allowed`, `refund_denied`, `refund_errors`).
static STATS: CommandStats = CommandStats::new("refund");

pub struct Refund;

impl Command for Refund {
    const SPEC: Spec =
        Spec::other(c"rl.refund", FAST_WRITE, Acl::Write).with_keys(Keys::SECOND).with_stats(&STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let ([kind], rest) = split::<1>(args)?;
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
            limit::refund_count::<FixedWindow>(ctx, rest)
        } else if kind.eq_ignore_ascii_case(b"SLIDECOUNT") {
            limit::refund_count::<SlidingCounter>(ctx, rest)
        } else {
            Err(RlError::Syntax)
        }
    }
}
