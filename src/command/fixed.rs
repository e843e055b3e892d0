//! RL.FIXED key limit window [cost]
//!
//! A fixed window (see `ratelimit_core::fixed_window`). State: 16 bytes, the units counted (u64) and
//! the instant the window ends (Unix ns, i64), little-endian; the key expires when the window ends.
//! Counter and expiry are written together, so a counter without a TTL cannot exist.

use super::arg::Arg;
use super::counting::{self, Counting};
use super::error::RlError;
use super::registry::{Command, KeySpec};
use super::reply::Reply;
use super::stats::{self, CommandStats};
use ratelimit_core::fixed_window::{FixedWindow, WindowState};
use ratelimit_core::time::Nanos;
use ratelimit_core::verdict::Verdict;
use redis_module::Context;

pub struct Fixed;

impl Command for Fixed {
    const STATS: Option<&'static CommandStats> = Some(&stats::FIXED);
    const KEYS: KeySpec = KeySpec::FIRST;
    const COUNTED: bool = true;

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        counting::request::<FixedWindow>(ctx, args)
    }
}

impl Counting for FixedWindow {
    type State = WindowState;
    type Encoded = [u8; 16];

    fn new(limit: u64, window_ns: Nanos) -> Option<Self> {
        FixedWindow::new(limit, window_ns)
    }

    fn encode(state: &WindowState) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&state.count.to_le_bytes());
        out[8..].copy_from_slice(&state.ends_at.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<WindowState> {
        let word = |at: usize| bytes.get(at..at + 8).and_then(|b| <[u8; 8]>::try_from(b).ok());
        match (bytes.len(), word(0), word(8)) {
            (16, Some(count), Some(ends_at)) => {
                Some(WindowState { count: u64::from_le_bytes(count), ends_at: i64::from_le_bytes(ends_at) })
            }
            _ => None,
        }
    }

    fn decide(&self, state: Option<WindowState>, now: Nanos, cost: u64) -> (Verdict, Option<WindowState>) {
        let d = FixedWindow::decide(self, state, now, cost);
        (d.verdict, d.new_state)
    }

    fn refund(&self, state: Option<WindowState>, now: Nanos, units: u64) -> Option<WindowState> {
        FixedWindow::refund(self, state, now, units)
    }

    /// The key expires exactly when the window ends.
    fn expires_at(&self, state: &WindowState, _now: Nanos) -> Nanos {
        state.ends_at
    }
}
