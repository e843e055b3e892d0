//! RL.TOKEN key capacity rate cost [key capacity rate cost ...]
//!
//! A token bucket per key (see `ratelimit_core::token_bucket`), stored as its TAT. With several groups the
//! request is allowed only if every bucket allows, and then takes from all of them.

use super::arg::Arg;
use super::args::{positive_decimal, whole};
use super::clock;
use super::error::RlError;
use super::registry::{Command, KeySpec};
use super::reply::Reply;
use super::stats::{self, CommandStats};
use super::store::StateKey;
use super::try_cell::TryCell;
use ratelimit_core::time::{ceil_ms, Nanos};
use ratelimit_core::token_bucket::{BucketError, TokenBucket, TokenDecision};
use ratelimit_core::verdict::most_restrictive;
use redis_module::Context;

const GROUP: usize = 4;

/// Keys expire on whole seconds (see `expiry_ms`).
const EXPIRY_STEP_MS: i64 = 1000;

pub struct Token;

pub struct Request<'a> {
    pub key: &'a Arg,
    pub bucket: TokenBucket,
    pub cost: u64,
}

pub fn parse_group(args: &[Arg]) -> Result<Request<'_>, RlError> {
    let bucket = parse_bucket(&args[1], &args[2])?;
    let cost = whole(args[3].bytes(), "cost", 0, "must be a whole number >= 0")?;
    Ok(Request { key: &args[0], bucket, cost })
}

/// The last bucket parameters parsed, as their argument bytes: most calls repeat them, and building a
/// bucket costs a decimal parse and two 128-bit divisions.
#[derive(Clone, Copy)]
struct LastBucket {
    args: [u8; 48],
    capacity_len: u8,
    rate_len: u8,
    bucket: TokenBucket,
}

static LAST_BUCKET: TryCell<Option<LastBucket>> = TryCell::new(None);

/// A bucket from its `capacity` and `rate` arguments.
pub fn parse_bucket(capacity: &Arg, rate: &Arg) -> Result<TokenBucket, RlError> {
    let (capacity, rate) = (capacity.bytes(), rate.bytes());
    let same = |last: &LastBucket| {
        let (c, r) = (last.capacity_len as usize, last.rate_len as usize);
        capacity.len() == c
            && rate.len() == r
            && short_eq(&last.args[..c], capacity)
            && short_eq(&last.args[c..c + r], rate)
    };
    if let Some(Some(bucket)) = LAST_BUCKET.with(|last| last.as_ref().filter(|l| same(l)).map(|l| l.bucket)) {
        return Ok(bucket);
    }
    let bucket = build_bucket(capacity, rate)?;
    if capacity.len() + rate.len() <= 48 {
        let mut args = [0u8; 48];
        args[..capacity.len()].copy_from_slice(capacity);
        args[capacity.len()..capacity.len() + rate.len()].copy_from_slice(rate);
        let fresh =
            LastBucket { args, capacity_len: capacity.len() as u8, rate_len: rate.len() as u8, bucket };
        LAST_BUCKET.with(|last| *last = Some(fresh));
    }
    Ok(bucket)
}

/// Equality of two short byte strings of the same length without a call to memcmp (arguments like
/// "10" and "5" are a few bytes).
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    a.iter().zip(b).all(|(x, y)| x == y)
}

fn build_bucket(capacity: &[u8], rate: &[u8]) -> Result<TokenBucket, RlError> {
    let capacity = whole(capacity, "capacity", 1, "must be a whole number >= 1")?;
    let rate = positive_decimal(rate, "rate", "must be a number > 0 (tokens per second)")?;
    TokenBucket::new(capacity, rate).map_err(|e| match e {
        BucketError::CapacityZero => RlError::invalid("capacity", "must be a whole number >= 1"),
        BucketError::RateNotPositive => RlError::invalid("rate", "must be a number > 0 (tokens per second)"),
        BucketError::RateTooLarge => RlError::invalid("rate", "must be at most 1000000000 tokens per second"),
        BucketError::RefillTooLong => {
            RlError::invalid("capacity", "capacity / rate must be at most 3000000000 seconds")
        }
    })
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

/// A bucket's state: its TAT in Unix nanoseconds, as 8 little-endian bytes.
pub fn decode_tat(bytes: &[u8]) -> Result<Nanos, RlError> {
    bytes.try_into().map(Nanos::from_le_bytes).map_err(|_| RlError::BadState)
}

/// When a bucket's key expires: at the first whole second (Unix ms) at or after the instant it is full
/// again, so less than one second late. A function of the TAT alone: the key's current expiry follows
/// from the stored TAT, without reading it, and most writes (those whose TAT stays within the same
/// second) leave it alone. The module owns these keys' TTLs: one changed by hand is corrected when
/// the bucket's TAT next crosses a second.
fn expiry_ms(tat: Nanos) -> i64 {
    // ceil_ms is never negative, so this is a ceiling division.
    let ms = ceil_ms(tat);
    (ms / EXPIRY_STEP_MS + i64::from(ms % EXPIRY_STEP_MS != 0)).saturating_mul(EXPIRY_STEP_MS)
}

/// Stores `tat` over `previous` (the TAT read from the key, None when it did not exist).
pub fn store(key: &mut StateKey, tat: Nanos, previous: Option<Nanos>) -> Result<(), RlError> {
    key.write_expiring(&tat.to_le_bytes(), expiry_ms(tat), previous.map(expiry_ms))
}

impl Command for Token {
    const STATS: Option<&'static CommandStats> = Some(&stats::TOKEN);
    const KEYS: KeySpec = KeySpec::GROUPS_OF_FOUR;
    const COUNTED: bool = true;

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        if args.len() == GROUP {
            return run_one(ctx, parse_group(args)?);
        }
        let requests = parse_requests(args)?;
        let now: Nanos = clock::now_ns();
        let mut decided: Vec<(StateKey, TokenDecision)> = Vec::with_capacity(requests.len());
        let mut stored: Vec<Option<Nanos>> = Vec::with_capacity(requests.len());
        for r in &requests {
            let key = StateKey::open(ctx, r.key)?;
            let tat = key.read()?.map(decode_tat).transpose()?;
            let decision = r.bucket.decide(tat, now, r.cost);
            decided.push((key, decision));
            stored.push(tat);
        }
        let limiting = most_restrictive(decided.iter().map(|(_, d)| d.verdict)).ok_or(RlError::WrongArity)?;
        // All or nothing: a bucket is written only when every bucket allows, except that impossible
        // states (clock faults) are repaired in any case.
        let all_allowed = decided.iter().all(|(_, d)| d.verdict.allowed);
        for ((key, d), previous) in decided.iter_mut().zip(&stored) {
            if let (Some(tat), true) = (d.new_tat, all_allowed || d.repair) {
                store(key, tat, *previous)?;
            }
        }
        Ok(Reply::Limit {
            verdict: decided[limiting].1.verdict,
            limiting: (requests.len() > 1).then_some(limiting),
        })
    }
}

/// One bucket: the common call, without the vectors of the multi-key path.
fn run_one(ctx: &Context, r: Request<'_>) -> Result<Reply, RlError> {
    let now: Nanos = clock::now_ns();
    let mut key = StateKey::open(ctx, r.key)?;
    let tat = key.read()?.map(decode_tat).transpose()?;
    let decision = r.bucket.decide(tat, now, r.cost);
    // Written when allowed (cost > 0) or when an impossible state is repaired; never on a denial.
    if let Some(new_tat) = decision.new_tat {
        store(&mut key, new_tat, tat)?;
    }
    Ok(Reply::Limit { verdict: decision.verdict, limiting: None })
}
