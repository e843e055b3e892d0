//! RL.TOKEN key capacity rate cost [key capacity rate cost ...]
//!
//! A token bucket per key (see `algo::token_bucket`), stored as its TAT in nanoseconds. With several
//! groups the request is allowed only if every bucket allows, and then takes from all of them.

use super::args::{positive_decimal, whole};
use super::error::RlError;
use super::reply::limit_reply;
use super::{clock, store};
use crate::algo::time::{ceil_ms, Nanos};
use crate::algo::token_bucket::{BucketError, TokenBucket};
use crate::algo::verdict::most_restrictive;
use redis_module::{Context, RedisString, RedisValue};

const GROUP: usize = 4;

struct Request<'a> {
    key: &'a RedisString,
    bucket: TokenBucket,
    cost: u64,
}

fn parse_group(args: &[RedisString]) -> Result<Request<'_>, RlError> {
    let capacity = whole(&args[1], "capacity", 1, "must be a whole number >= 1")?;
    let rate = positive_decimal(&args[2], "rate", "must be a number > 0 (tokens per second)")?;
    let cost = whole(&args[3], "cost", 0, "must be a whole number >= 0")?;
    let bucket = TokenBucket::new(capacity, rate).map_err(|e| match e {
        BucketError::CapacityZero => RlError::invalid("capacity", "must be a whole number >= 1"),
        BucketError::RateNotPositive => RlError::invalid("rate", "must be a number > 0 (tokens per second)"),
        BucketError::RateTooLarge => RlError::invalid("rate", "must be at most 1000000000 tokens per second"),
        BucketError::RefillTooLong => {
            RlError::invalid("capacity", "capacity / rate must be at most 3000000000 seconds")
        }
    })?;
    Ok(Request {
        key: &args[0],
        bucket,
        cost,
    })
}

/// Parses the key groups; every key at most once.
fn parse_requests(args: &[RedisString]) -> Result<Vec<Request<'_>>, RlError> {
    if args.is_empty() || !args.len().is_multiple_of(GROUP) {
        return Err(RlError::WrongArity);
    }
    let requests = args
        .chunks(GROUP)
        .map(parse_group)
        .collect::<Result<Vec<_>, _>>()?;
    for (i, r) in requests.iter().enumerate() {
        if requests[..i].iter().any(|p| p.key.as_slice() == r.key.as_slice()) {
            return Err(RlError::DuplicateKey);
        }
    }
    Ok(requests)
}

pub fn token(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, RlError> {
    let requests = parse_requests(args)?;
    let now: Nanos = clock::now_ns();
    let mut decisions = Vec::with_capacity(requests.len());
    for r in &requests {
        let tat = store::read_int(ctx, r.key)?;
        decisions.push(r.bucket.decide(tat, now, r.cost));
    }
    let verdicts: Vec<_> = decisions.iter().map(|d| d.verdict).collect();
    let limiting = most_restrictive(&verdicts).ok_or(RlError::WrongArity)?;
    if verdicts.iter().all(|v| v.allowed) {
        for (r, d) in requests.iter().zip(&decisions) {
            if let Some(tat) = d.new_tat {
                // The key lives until the bucket is full again, rounded up to the millisecond.
                store::write_int(ctx, r.key, tat, ceil_ms(tat))?;
            }
        }
    }
    let index = (requests.len() > 1).then_some(limiting);
    Ok(limit_reply(&verdicts[limiting], index))
}
