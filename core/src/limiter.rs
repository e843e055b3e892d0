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
    /// `at_ms` (Unix ms, a whole second: a point of the value's grid), a function of the value and
    /// its parameters; the state ends at `at_least_ms`. So that a store can leave an unmoved expiry
    /// alone, mostly without reading it (see [`Expiry::change`]): `previous_ms` is the grid
    /// point the value being replaced implied under these parameters (None when there was none), and
    /// `certain_ms` what the expiry in place is at least, whatever parameters wrote it: the whole
    /// second at or after the replaced value's end (every writer keeps its key's expiry on a whole
    /// second at or after the state's end).
    Derived { at_ms: i64, at_least_ms: i64, previous_ms: Option<i64>, certain_ms: Option<i64> },
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

    /// The expiry a store sets for this write, None to keep the one in place. `current` reads the
    /// key's expiry in place (None: none), before the write.
    ///
    /// A derived expiry: set when the value is new or `replaced` by one of another length (which
    /// drops its expiry) or the grid point moved; kept without reading when `certain_ms` already
    /// covers the new state; otherwise (the grid point did not move, but the state now ends after
    /// the whole second the old one ended by: the key's parameters changed, or another version wrote
    /// it, so its expiry may be on another grid) read, and kept only when it is a whole second within
    /// `[at_least_ms, at_ms]`. So an expiry never comes before the state's end, and stays on whole
    /// seconds. A `Within` expiry: kept when it lies in its range (`replaced` plays no part: a store
    /// puts a kept expiry back after replacing the value).
    pub fn change(&self, replaced: bool, current: impl FnOnce() -> Option<i64>) -> Option<i64> {
        match *self {
            Expiry::Derived { at_ms, at_least_ms, previous_ms, certain_ms } => {
                if replaced || previous_ms != Some(at_ms) {
                    return Some(at_ms);
                }
                if certain_ms.is_some_and(|c| c >= at_least_ms) {
                    return None;
                }
                match current() {
                    Some(at) if at % 1000 == 0 && (at_least_ms..=at_ms).contains(&at) => None,
                    _ => Some(at_ms),
                }
            }
            Expiry::Within { at_least_ms, .. } => match current() {
                Some(at) if (at_least_ms..=self.latest_ms()).contains(&at) => None,
                _ => Some(self.latest_ms()),
            },
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
