//! RL.TAKE key capacity rate max
//!
//! A partial grant from a token bucket, for consumers that work in batches ("up to 100 of my quota"):
//! takes as many whole tokens as the bucket holds now, up to `max` (see `TokenBucket::take`). Replies
//! the five fields (`allowed` is 1 when it took at least one; `remaining` after taking) and a sixth,
//! the number taken. The same keys and state as RL.TOKEN. Not an option of RL.TOKEN, whose key
//! positions (every fourth argument) would read an option as a key.

use super::parse::split;
use super::{limit, token};
use crate::server::{Arg, Command, Keys, Reply, RlError, Spec, FAST_WRITE};
use crate::stats::CommandStats;
use ratelimit_core::args::{whole_for, MAX};
use ratelimit_core::token_bucket::Reserve;
use redis_module::Context;

/// Its counters in INFO ratelimit (`take_allowed`, `take_denied`, `take_errors`).
static STATS: CommandStats = CommandStats::new("take");

pub struct Take;

impl Command for Take {
    const SPEC: Spec = Spec::limiter(c"rl.take", FAST_WRITE, Keys::FIRST, &STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let ([key, capacity, rate, max], rest) = split::<4>(args)?;
        if !rest.is_empty() {
            return Err(RlError::WrongArity);
        }
        let bucket = token::parse_bucket(capacity, rate)?;
        let max = whole_for(max.bytes(), MAX, 1)?;
        limit::reserve(ctx, key, &bucket, Reserve { cost: 1, upto: max, max_wait_ns: 0 }, true)
    }
}
