//! RL.REFUND TOKEN key capacity rate tokens
//! RL.REFUND FIXED key limit window units
//! RL.REFUND SLIDECOUNT key limit window units
//!
//! Gives back what a request took when it turns out not to count (a failed upstream call, a cheaper
//! request than estimated). Never more than the limit: a bucket is at most full, a count at least 0.
//! Replicated like any write. Replies with the limiter's state after the refund, as a peek would.

use super::arg::Arg;
use super::error::RlError;
use super::registry::{Command, KeySpec};
use super::reply::Reply;
use super::stats::{self, CommandStats};
use super::store::StateKey;
use super::{clock, counting, token};
use ratelimit_core::fixed_window::FixedWindow;
use ratelimit_core::sliding_counter::SlidingCounter;
use redis_module::Context;

pub struct Refund;

impl Command for Refund {
    const KEYS: KeySpec = KeySpec::SECOND;

    const STATS: Option<&'static CommandStats> = Some(&stats::REFUND);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let [kind, rest @ ..] = args else {
            return Err(RlError::WrongArity);
        };
        let kind = kind.bytes();
        if kind.eq_ignore_ascii_case(b"TOKEN") {
            refund_token(ctx, rest)
        } else if kind.eq_ignore_ascii_case(b"FIXED") {
            counting::refund::<FixedWindow>(ctx, rest)
        } else if kind.eq_ignore_ascii_case(b"SLIDECOUNT") {
            counting::refund::<SlidingCounter>(ctx, rest)
        } else {
            Err(RlError::Syntax)
        }
    }
}

fn refund_token(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
    if args.len() != 4 {
        return Err(RlError::WrongArity);
    }
    let request = token::parse_group(args)?;
    let now = clock::now_ns();
    let mut key = StateKey::open(ctx, request.key)?;
    let mut tat = key.read()?.map(token::decode_tat).transpose()?;
    if let Some(new_tat) = request.bucket.refund(tat, now, request.cost) {
        token::store(&mut key, new_tat, tat)?;
        tat = Some(new_tat);
    }
    Ok(Reply::Limit { verdict: request.bucket.decide(tat, now, 0).verdict, limiting: None })
}
