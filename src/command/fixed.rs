//! RL.FIXED key limit window [cost]
//!
//! A fixed window (see `ratelimit_core::fixed_window`). State: 16 bytes, the units counted (u64) and the instant
//! the window ends (Unix ns, i64), little-endian; the key expires when the window ends. Counter and
//! expiry are written together, so a counter without a TTL cannot exist.

use super::arg::Arg;
use super::args::CountArgs;
use super::clock;
use super::error::RlError;
use super::registry::Command;
use super::reply::Reply;
use super::store::{Expiry, StateKey};
use ratelimit_core::fixed_window::{FixedWindow, WindowState};
use ratelimit_core::time::ceil_ms;
use redis_module::Context;

pub struct Fixed;

pub fn encode(state: &WindowState) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&state.count.to_le_bytes());
    out[8..].copy_from_slice(&state.ends_at.to_le_bytes());
    out
}

pub fn decode(bytes: &[u8]) -> Result<WindowState, RlError> {
    let word = |range: std::ops::Range<usize>| bytes.get(range).and_then(|b| <[u8; 8]>::try_from(b).ok());
    match (bytes.len(), word(0..8), word(8..16)) {
        (16, Some(count), Some(ends_at)) => {
            Ok(WindowState { count: u64::from_le_bytes(count), ends_at: i64::from_le_bytes(ends_at) })
        }
        _ => Err(RlError::BadState),
    }
}

/// Stores a window's state; the key expires exactly when the window ends.
pub fn store(key: &mut StateKey, state: &WindowState) -> Result<(), RlError> {
    key.write(&encode(state), Expiry { at_least_ms: ceil_ms(state.ends_at), slack_ms: 0 })
}

pub fn limiter(args: &CountArgs) -> Result<FixedWindow, RlError> {
    FixedWindow::new(args.limit, args.window_ns)
        .ok_or(RlError::invalid("limit", "must be a whole number >= 1"))
}

impl Command for Fixed {
    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let args = CountArgs::parse(args)?;
        let window = limiter(&args)?;
        let now = clock::now_ns();
        let mut key = StateKey::open(ctx, args.key)?;
        let state = key.read()?.map(decode).transpose()?;
        let decision = window.decide(state, now, args.cost);
        if let Some(new_state) = decision.new_state {
            store(&mut key, &new_state)?;
        }
        Ok(Reply::Limit { verdict: decision.verdict, limiting: None })
    }
}
