//! What RL.FIXED and RL.SLIDECOUNT share: the arguments `key limit window [cost]`, one small state per
//! key, and the same flow for a request and for a refund. Each implements `Counting` in its own file.

use super::arg::Arg;
use super::args::CountArgs;
use super::clock;
use super::error::RlError;
use super::reply::Reply;
use super::store::{Expiry, StateKey};
use ratelimit_core::time::{ceil_ms, Nanos};
use ratelimit_core::verdict::Verdict;
use redis_module::Context;

/// A window-counting limiter, as the command layer uses it.
pub trait Counting: Sized {
    type State: Copy;
    /// The stored bytes of a state (a fixed-size array: no allocation per call).
    type Encoded: AsRef<[u8]>;

    fn new(limit: u64, window_ns: Nanos) -> Option<Self>;
    fn encode(state: &Self::State) -> Self::Encoded;
    /// None when the bytes are not this limiter's state.
    fn decode(bytes: &[u8]) -> Option<Self::State>;
    /// The verdict, and the state to store when there is one.
    fn decide(&self, state: Option<Self::State>, now: Nanos, cost: u64) -> (Verdict, Option<Self::State>);
    /// The state after giving `units` back, when that changes anything.
    fn refund(&self, state: Option<Self::State>, now: Nanos, units: u64) -> Option<Self::State>;
    /// When a stored state stops mattering: the key's expiry.
    fn expires_at(&self, state: &Self::State, now: Nanos) -> Nanos;
}

fn open<L: Counting>(args: &CountArgs) -> Result<L, RlError> {
    L::new(args.limit, args.window_ns).ok_or(RlError::invalid("limit", "must be a whole number >= 1"))
}

fn read<L: Counting>(key: &StateKey) -> Result<Option<L::State>, RlError> {
    key.read()?.map(|bytes| L::decode(bytes).ok_or(RlError::BadState)).transpose()
}

fn store<L: Counting>(limiter: &L, key: &mut StateKey, state: &L::State, now: Nanos) -> Result<(), RlError> {
    let expiry = Expiry { at_least_ms: ceil_ms(limiter.expires_at(state, now)), slack_ms: 0 };
    key.write(L::encode(state).as_ref(), expiry)
}

/// `RL.FIXED` / `RL.SLIDECOUNT key limit window [cost]`.
pub fn request<L: Counting>(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
    let args = CountArgs::parse(args)?;
    let limiter: L = open(&args)?;
    let now = clock::now_ns();
    let mut key = StateKey::open(ctx, args.key)?;
    let (verdict, new_state) = limiter.decide(read::<L>(&key)?, now, args.cost);
    if let Some(state) = new_state {
        store(&limiter, &mut key, &state, now)?;
    }
    Ok(Reply::Limit { verdict, limiting: None })
}

/// `RL.REFUND FIXED|SLIDECOUNT key limit window units`: replies with the state after the refund.
pub fn refund<L: Counting>(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
    if args.len() != 4 {
        return Err(RlError::WrongArity);
    }
    let args = CountArgs::parse(args)?;
    let limiter: L = open(&args)?;
    let now = clock::now_ns();
    let mut key = StateKey::open(ctx, args.key)?;
    let mut state = read::<L>(&key)?;
    if let Some(refunded) = limiter.refund(state, now, args.cost) {
        store(&limiter, &mut key, &refunded, now)?;
        state = Some(refunded);
    }
    Ok(Reply::Limit { verdict: limiter.decide(state, now, 0).0, limiting: None })
}
