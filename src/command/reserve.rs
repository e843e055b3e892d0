//! RL.RESERVE key capacity rate cost max_wait [UPTO max]
//!
//! A token bucket's decision with a queue in it (see `ratelimit_core::reservation`): `cost` tokens,
//! taken now when they fit, or taken now from the future when they fit within `max_wait` seconds,
//! and then the reply is allowed with the wait to sleep before using them in `retry_after_ms`'s
//! place. Beyond `max_wait`, a denial that writes nothing, with the wait it would have needed. With
//! `UPTO max`, as many tokens as the bucket holds now beyond `cost`, up to `max` in all, and a sixth
//! field, the number taken (a worker's batch: at least `cost`, up to `max`, in one reservation). The
//! same keys and state as RL.TOKEN.

use super::parse::split;
use super::{limit, token};
use crate::server::{Arg, Command, Keys, Reply, RlError, Spec, FAST_WRITE};
use crate::stats::CommandStats;
use ratelimit_core::args::{cost, is_option, wait_ns, whole_for, MAX};
use ratelimit_core::reservation::MAX_WAIT;
use ratelimit_core::token_bucket::Reserve;
use redis_module::Context;

/// Its counters in INFO ratelimit (`reserve_allowed`, `reserve_denied`, `reserve_errors`).
static STATS: CommandStats = CommandStats::new("reserve");

pub struct ReserveTokens;

impl Command for ReserveTokens {
    const SPEC: Spec = Spec::limiter(c"rl.reserve", FAST_WRITE, Keys::FIRST, &STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let ([key, capacity, rate, units, max_wait], rest) = split::<5>(args)?;
        let upto = match rest {
            [] => None,
            [option, max] if is_option(Some(&option.bytes()), b"UPTO") => {
                Some(whole_for(max.bytes(), MAX, 1)?)
            }
            [_, _] => return Err(RlError::Syntax),
            _ => return Err(RlError::WrongArity),
        };
        let bucket = token::parse_bucket(capacity, rate)?;
        let cost = cost(units.bytes())?;
        let max_wait_ns = wait_ns(max_wait.bytes(), MAX_WAIT)?;
        let request = Reserve { cost, upto: upto.unwrap_or(cost).max(cost), max_wait_ns };
        limit::reserve(ctx, key, &bucket, request, upto.is_some())
    }
}
