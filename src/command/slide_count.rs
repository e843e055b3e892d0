//! RL.SLIDECOUNT key limit window [cost]
//!
//! The sliding window counter (see `ratelimit_core::sliding_counter`): O(1) memory for large limits, within
//! 2 x limit in the worst case. State: 24 bytes (window index, current count, previous count); the key
//! expires at the end of the window after the current one, when its counts stop mattering.

use super::arg::Arg;
use super::args::CountArgs;
use super::clock;
use super::error::RlError;
use super::registry::Command;
use super::reply::Reply;
use super::store::{Expiry, StateKey};
use ratelimit_core::sliding_counter::{CounterState, SlidingCounter};
use ratelimit_core::time::ceil_ms;
use redis_module::Context;

pub struct SlideCount;

pub fn decode(bytes: &[u8]) -> Result<CounterState, RlError> {
    CounterState::decode(bytes).ok_or(RlError::BadState)
}

pub fn store(key: &mut StateKey, state: &CounterState, expires_at: i64) -> Result<(), RlError> {
    key.write(&state.encode(), Expiry { at_least_ms: ceil_ms(expires_at), slack_ms: 0 })
}

pub fn limiter(args: &CountArgs) -> Result<SlidingCounter, RlError> {
    SlidingCounter::new(args.limit, args.window_ns)
        .ok_or(RlError::invalid("limit", "must be a whole number >= 1"))
}

impl Command for SlideCount {
    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let args = CountArgs::parse(args)?;
        let counter = limiter(&args)?;
        let now = clock::now_ns();
        let mut key = StateKey::open(ctx, args.key)?;
        let state = key.read()?.map(decode).transpose()?;
        let decision = counter.decide(state, now, args.cost);
        if let Some(new_state) = decision.new_state {
            store(&mut key, &new_state, decision.expires_at)?;
        }
        Ok(Reply::Limit { verdict: decision.verdict, limiting: None })
    }
}
