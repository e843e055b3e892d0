//! RL.TOKEN key capacity rate cost [key capacity rate cost ...]
//!
//! A token bucket per key (see `ratelimit_core::token_bucket`). With several groups the request is
//! allowed only if every bucket allows, and then takes from all of them.

use super::limit;
use super::memo::Memo;
use crate::server::{Arg, Command, Keys, Reply, RlError, Spec, FAST_WRITE};
use crate::stats::CommandStats;
use ratelimit_core::args::cost;
use ratelimit_core::kind::Declare;
use ratelimit_core::limiter::Limiter;
use ratelimit_core::token_bucket::TokenBucket;
use redis_module::Context;

const GROUP: usize = 4;
const GROUPS: Keys = Keys::Range { first: 1, last: -1, step: GROUP as i32 };

/// Its counters in INFO ratelimit (`token_allowed`, `token_denied`, `token_errors`).
static STATS: CommandStats = CommandStats::new("token");

pub struct Token;

impl Command for Token {
    /// Keys at 1, 5, 9, ...: one per `key capacity rate cost` group.
    const SPEC: Spec = Spec::limiter(c"rl.token", FAST_WRITE, GROUPS, &STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        if args.len() == GROUP {
            // One bucket: the common call, without the vectors of the multi-key path.
            let r = parse_group(args)?;
            return limit::decide(ctx, r.key, &r.bucket, r.cost);
        }
        let requests = parse_requests(args)?;
        let keys: Vec<&Arg> = requests.iter().map(|r| r.key).collect();
        limit::decide_all(ctx, &keys, |i, stored, now| {
            Ok(requests[i].bucket.decide(stored, now, requests[i].cost)?)
        })
    }
}

pub struct Request<'a> {
    pub key: &'a Arg,
    pub bucket: TokenBucket,
    pub cost: u64,
}

/// `key capacity rate cost`.
#[inline]
pub fn parse_group(args: &[Arg]) -> Result<Request<'_>, RlError> {
    let [key, capacity, rate, units] = args else {
        return Err(RlError::WrongArity);
    };
    Ok(Request { key, bucket: parse_bucket(capacity, rate)?, cost: cost(units.bytes())? })
}

/// The last bucket parameters parsed.
static LAST_BUCKET: Memo<TokenBucket> = Memo::new();

/// A bucket from its `capacity` and `rate` arguments.
pub fn parse_bucket(capacity: &Arg, rate: &Arg) -> Result<TokenBucket, RlError> {
    let (capacity, rate) = (capacity.bytes(), rate.bytes());
    LAST_BUCKET.get_or(&[capacity, rate], || Ok(TokenBucket::parse([capacity, rate])?))
}

/// Parses the key groups; every key at most once.
fn parse_requests(args: &[Arg]) -> Result<Vec<Request<'_>>, RlError> {
    if args.is_empty() || !args.len().is_multiple_of(GROUP) {
        return Err(RlError::WrongArity);
    }
    let requests = args.chunks(GROUP).map(parse_group).collect::<Result<Vec<_>, _>>()?;
    for (i, r) in requests.iter().enumerate() {
        if requests[..i].iter().any(|p| p.key.bytes() == r.key.bytes()) {
            return Err(RlError::DuplicateKey);
        }
    }
    Ok(requests)
}
