//! Connects any `ratelimit_core` limiter to Redis keys: read the stored bytes, let the limiter decide,
//! store what it asks for (in place, with its expiry, replicated by effect), reply with its verdict.
//! Denials write nothing but repairs. Every limiter command goes through here.

use super::parse::CountArgs;
use crate::server::{clock, Arg, Command, Reply, RlError, Spec, StateKey};
use ratelimit_core::combine::all_or_nothing;
use ratelimit_core::kind::{AnyLimiter, Declare};
use ratelimit_core::limiter::{Limiter, Outcome};
use ratelimit_core::time::Nanos;
use ratelimit_core::token_bucket::{Reserve, TokenBucket};
use ratelimit_core::verdict::Verdict;
use redis_module::Context;
use std::marker::PhantomData;

/// A window-counting limiter's command, `key limit window [cost]` (RL.FIXED, RL.SLIDECOUNT): its
/// declaration in its own file, its body here.
pub trait Counting: Declare<Request = u64> {
    const SPEC: Spec;
}

/// The command of a [`Counting`] limiter.
pub struct Count<L>(PhantomData<L>);

impl<L: Counting> Command for Count<L> {
    const SPEC: Spec = L::SPEC;

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let a = CountArgs::<L>::parse(args)?;
        decide(ctx, a.key, &a.limiter, a.cost)
    }
}

/// One request on one key.
pub fn decide<L: Limiter>(
    ctx: &Context,
    key: &Arg,
    limiter: &L,
    request: L::Request,
) -> Result<Reply, RlError> {
    let now = clock::now_ns();
    let mut state = StateKey::open(ctx, key)?;
    let outcome = limiter.decide(state.read()?, now, request)?;
    if let Some(write) = &outcome.write {
        state.apply(write)?;
    }
    Ok(Reply::Limit { verdict: outcome.verdict, limiting: None })
}

/// A limiter's reply in a dialect's five integers (CL.THROTTLE, GCRA).
pub fn dialect(reply: Reply, fields: fn(&Verdict) -> [i64; 5]) -> Reply {
    match reply {
        Reply::Limit { verdict, .. } => Reply::Dialect { fields: fields(&verdict), verdict },
        other => other,
    }
}

/// One request over several keys, all or nothing (see `ratelimit_core::combine`): `decide` gives the
/// outcome of the limit at each position from its stored bytes. The reply names the limiting one.
pub fn decide_all<'a>(
    ctx: &'a Context,
    keys: &[&'a Arg],
    mut decide: impl FnMut(usize, Option<&[u8]>, Nanos) -> Result<Outcome, RlError>,
) -> Result<Reply, RlError> {
    let now = clock::now_ns();
    let mut opened = Vec::with_capacity(keys.len());
    let mut outcomes = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        let state = StateKey::open(ctx, key)?;
        outcomes.push(decide(i, state.read()?, now)?);
        opened.push(state);
    }
    let combined = all_or_nothing(outcomes).ok_or(RlError::WrongArity)?;
    for (state, outcome) in opened.iter_mut().zip(&combined.outcomes) {
        if let Some(write) = &outcome.write {
            state.apply(write)?;
        }
    }
    Ok(Reply::Limit { verdict: combined.verdict, limiting: Some(combined.limiting) })
}

/// A request that may wait or take more than its minimum (RL.RESERVE, RL.TAKE) on one key: replies
/// the five fields, and with `taken` the number taken as a sixth.
pub fn reserve(
    ctx: &Context,
    key: &Arg,
    bucket: &TokenBucket,
    request: Reserve,
    taken: bool,
) -> Result<Reply, RlError> {
    let now = clock::now_ns();
    let mut state = StateKey::open(ctx, key)?;
    let (outcome, n) = bucket.reserve(state.read()?, now, request)?;
    if let Some(write) = &outcome.write {
        state.apply(write)?;
    }
    Ok(match taken {
        true => Reply::Taken { verdict: outcome.verdict, taken: n },
        false => Reply::Limit { verdict: outcome.verdict, limiting: None },
    })
}

/// Gives `units` back on one key; replies with the state after the refund, as a peek would.
pub fn refund(ctx: &Context, key: &Arg, limiter: &AnyLimiter, units: u64) -> Result<Reply, RlError> {
    let now = clock::now_ns();
    let mut state = StateKey::open(ctx, key)?;
    let (write, verdict) = limiter.refund(state.read()?, now, units).ok_or(RlError::Syntax)??;
    if let Some(write) = &write {
        state.apply(write)?;
    }
    Ok(Reply::Limit { verdict, limiting: None })
}
