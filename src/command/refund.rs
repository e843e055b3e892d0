//! RL.REFUND KIND key p1 p2 units, for the kinds that take refunds (`TOKEN key capacity rate tokens`,
//! `FIXED key limit window units`, `SLIDECOUNT key limit window units`).
//!
//! Gives back what a request took when it turns out not to count (a failed upstream call, a cheaper
//! request than estimated). Never more than the limit: a bucket is at most full, a count at least 0.
//! Replicated like any write. Replies with the limiter's state after the refund, as a peek would.

use super::limit;
use super::parse::split;
use crate::server::{Acl, Arg, Command, Keys, Reply, RlError, Spec, FAST_WRITE};
use crate::stats::CommandStats;
use ratelimit_core::args::cost;
use ratelimit_core::kind::{AnyLimiter, LimiterKind};
use redis_module::Context;

/// Its counters in INFO ratelimit (`refund_allowed`, `refund_denied`, `refund_errors`).
static STATS: CommandStats = CommandStats::new("refund");

pub struct Refund;

impl Command for Refund {
    const SPEC: Spec =
        Spec::other(c"rl.refund", FAST_WRITE, Acl::Write).with_keys(Keys::SECOND).with_stats(&STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let ([kind], rest) = split::<1>(args)?;
        let kind = LimiterKind::from_group(kind.bytes()).filter(|k| k.refunds()).ok_or(RlError::Syntax)?;
        let [key, p1, p2, units] = rest else { return Err(RlError::WrongArity) };
        let limiter = AnyLimiter::parse(kind, [p1.bytes(), p2.bytes()])?;
        limit::refund(ctx, key, &limiter, cost(units.bytes())?)
    }
}
