//! The contract every limiter implements, over the bytes it stores: decide a request at a given time,
//! peek, describe the state, and say what to write and until when it matters. An adapter (the module's
//! commands, the client's local fallback) reads the stored bytes, calls these, applies the [`Write`]
//! and replies with the [`Verdict`]; it knows nothing of any one algorithm.

use crate::error::StateError;
use crate::format::{Bytes, Layout};
use crate::time::Nanos;
use crate::verdict::Verdict;

/// A limiter with validated parameters.
pub trait Limiter {
    /// What one request asks for: a cost in units, or a request id.
    type Request: Copy;
    /// The kind of value it stores (its tag).
    const LAYOUT: Layout;

    /// Decides `request` at `now` against the stored value (None: no key, the initial state).
    fn decide(
        &self,
        stored: Option<&[u8]>,
        now: Nanos,
        request: Self::Request,
    ) -> Result<Outcome, StateError>;

    /// The state as a request would meet it now, without changing it: the verdict of a zero-cost
    /// request and that of a one-unit request (whose `retry_after` says when one unit is available).
    fn peek(&self, stored: Option<&[u8]>, now: Nanos) -> Result<Peek, StateError>;

    /// The stored state's fields, for inspection (`RL.INSPECT`), without parameters.
    fn describe(stored: &[u8], now: Nanos) -> Result<Vec<Field>, StateError>;
}

/// A limiter whose units can be given back.
pub trait Refund: Limiter {
    /// Gives `units` back at `now`, never beyond the limit: the write (None when nothing changes) and
    /// the state after it, as a peek sees it.
    fn refund(
        &self,
        stored: Option<&[u8]>,
        now: Nanos,
        units: u64,
    ) -> Result<(Option<Write>, Verdict), StateError>;
}

/// A limiter of `limit` units per window (the fixed window, the sliding counter): built alike, from
/// a limit and a window in nanoseconds.
pub trait WindowLimiter: Limiter<Request = u64> + Sized {
    fn with_window(limit: u64, window_ns: Nanos) -> Result<Self, crate::error::ParamError>;
}

/// One named field of a described state; None is a null (nothing recorded).
pub type Field = (&'static str, Option<i64>);

/// What a request met and what to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub verdict: Verdict,
    /// The change to store: when the request was allowed and took something, or when the stored state
    /// was impossible (a clock fault) and is repaired.
    pub write: Option<Write>,
    /// The write repairs an impossible state: it is stored even when a combined request is denied.
    pub repair: bool,
}

/// See [`Limiter::peek`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peek {
    pub now: Verdict,
    pub one: Verdict,
}

/// A change to a stored value and the expiry it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub change: Change,
    pub expiry: Expiry,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Replace the whole value.
    Set(Bytes),
    /// Overwrite `bytes` at `offset` of the current value, which keeps its length.
    Range { offset: usize, bytes: Bytes },
    /// Remove the key: nothing is left to remember (the last lease released).
    Delete,
}

/// When the stored state stops mattering, so its key can expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Exactly `at_ms` (Unix ms), a function of the value: `previous_ms` is the expiry the value being
    /// replaced implied (None when there was none), so a store can leave an unmoved expiry alone
    /// without reading it.
    Derived { at_ms: i64, previous_ms: Option<i64> },
    /// No earlier than `at_least_ms` and no later than `slack_ms` after it: a current expiry in that
    /// range is left alone.
    Within { at_least_ms: i64, slack_ms: i64 },
}

impl Expiry {
    /// The latest instant (Unix ms) the state must live to.
    pub fn latest_ms(&self) -> i64 {
        match *self {
            Expiry::Derived { at_ms, .. } => at_ms,
            Expiry::Within { at_least_ms, slack_ms } => at_least_ms.saturating_add(slack_ms),
        }
    }
}

/// Applies `change` to a value held in memory (the client's local fallback; tests).
pub fn apply(value: &mut Vec<u8>, change: &Change) {
    match change {
        Change::Set(bytes) => {
            value.clear();
            value.extend_from_slice(bytes.as_ref());
        }
        Change::Range { offset, bytes } => {
            let bytes = bytes.as_ref();
            if let Some(target) = value.get_mut(*offset..*offset + bytes.len()) {
                target.copy_from_slice(bytes);
            }
        }
        Change::Delete => value.clear(),
    }
}
