//! RL.SLIDECOUNT key limit window [cost]
//!
//! The sliding window counter (see `ratelimit_core::sliding_counter`): O(1) memory for large limits,
//! within 2 x limit in the worst case. State: 24 bytes (window index, current count, previous count);
//! the key expires at the end of the window after the current one, when its counts stop mattering.

use super::arg::Arg;
use super::counting::{self, Counting};
use super::error::RlError;
use super::registry::{Command, KeySpec};
use super::reply::Reply;
use super::stats::{self, CommandStats};
use ratelimit_core::sliding_counter::{CounterState, SlidingCounter};
use ratelimit_core::time::Nanos;
use ratelimit_core::verdict::Verdict;
use redis_module::Context;

pub struct SlideCount;

impl Command for SlideCount {
    const STATS: Option<&'static CommandStats> = Some(&stats::SLIDECOUNT);
    const KEYS: KeySpec = KeySpec::FIRST;
    const COUNTED: bool = true;

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        counting::request::<SlidingCounter>(ctx, args)
    }
}

impl Counting for SlidingCounter {
    type State = CounterState;
    type Encoded = [u8; 24];

    fn new(limit: u64, window_ns: Nanos) -> Option<Self> {
        SlidingCounter::new(limit, window_ns)
    }

    fn encode(state: &CounterState) -> [u8; 24] {
        state.encode()
    }

    fn decode(bytes: &[u8]) -> Option<CounterState> {
        CounterState::decode(bytes)
    }

    fn decide(&self, state: Option<CounterState>, now: Nanos, cost: u64) -> (Verdict, Option<CounterState>) {
        let d = SlidingCounter::decide(self, state, now, cost);
        (d.verdict, d.new_state)
    }

    fn refund(&self, state: Option<CounterState>, now: Nanos, units: u64) -> Option<CounterState> {
        SlidingCounter::refund(self, state, now, units)
    }

    fn expires_at(&self, state: &CounterState, now: Nanos) -> Nanos {
        SlidingCounter::decide(self, Some(*state), now, 0).expires_at
    }
}
