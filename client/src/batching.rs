//! The batch option of a policy (docs/high-volume.md, the contract's `batching`): its bounds, texts
//! and constants, and where a kind's held units end. The rules that spend batches are in `batch.rs`.

use ratelimit_core::kind::LimiterKind;
use std::time::Duration;

/// A key's first batch (a quiet key costs one call per check, as without batching).
pub const START: u64 = 1;
/// A hot key's batch grows by this factor per call, a cool key's shrinks by it.
pub const GROW: u64 = 2;
/// One call takes at most `remaining / SHARE` (of Redis' last answer): half of what was left.
pub const SHARE: u64 = 2;
/// A batch is taken ahead when a local decision leaves fewer than `size / AHEAD` units held.
pub const AHEAD: u64 = 4;
/// Held window units end this long before their window does; expired ones are given back only
/// while that much of the window is left.
pub const REFUND_MARGIN: Duration = Duration::from_millis(100);
/// How often a check gives back the expired units of other keys.
pub const SWEEP: Duration = Duration::from_secs(1);
/// States kept per limiter at most; past that a new key is decided without batching.
pub const MAX_KEYS: usize = 65_536;
/// A batch's lease when the policy names none.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(1);
/// A batch's size out of bounds (field `batch`).
pub const BATCH_SIZE: &str = "must be a whole number from 1 to the policy's limit";
/// A batch's lease out of bounds (field `lease`).
pub const BATCH_LEASE: &str = "must be at least 1 ms, in whole milliseconds";
/// A kind that cannot batch (field `batch`), `{kind}` its name.
pub const BATCH_KIND: &str = "a {kind} cannot batch: it takes no refunds";

/// Where held units of a kind stop being usable: a window's units belong to their window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowEnd {
    /// A token bucket's tokens, once taken, are taken: the lease alone ends them.
    None,
    /// A fixed window ends `reset_after` after the answer.
    Reset,
    /// A sliding counter's current window ends one window before its `reset_after`.
    ResetMinusWindow,
}

/// How `kind`'s held units end; None for the kinds that cannot batch (they take no refunds).
pub fn window_end(kind: LimiterKind) -> Option<WindowEnd> {
    match kind {
        LimiterKind::TokenBucket => Some(WindowEnd::None),
        LimiterKind::FixedWindow => Some(WindowEnd::Reset),
        LimiterKind::SlidingCounter => Some(WindowEnd::ResetMinusWindow),
        _ => None,
    }
}

/// A policy's batch: the most units one call takes, and how long they may be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    pub max: u64,
    pub lease: Duration,
}
