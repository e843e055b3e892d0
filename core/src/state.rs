//! Limiters whose state is one small fixed-size value (the token bucket, the fixed window, the sliding
//! counter). Each gives its typed decision and its encoding (`SmallState`); the byte-level `Limiter`
//! and `Refund` contracts follow from them here, once.

use crate::error::StateError;
use crate::format::Layout;
use crate::limiter::{Field, Limiter, Outcome, Peek, Refund, Write};
use crate::time::Nanos;
use crate::verdict::Verdict;

/// A limiter over one small typed state.
pub trait SmallState {
    type State: Copy;
    const LAYOUT: Layout;

    /// The state in a stored value (tagged, or release 0.1's untagged form).
    fn decode(stored: &[u8]) -> Result<Self::State, StateError>;
    /// The typed decision of `cost` units at `now`.
    fn step(&self, state: Option<Self::State>, now: Nanos, cost: u64) -> Step<Self::State>;
    /// What to store for `next`, which replaces `previous`.
    fn write(&self, next: &Self::State, previous: Option<&Self::State>, now: Nanos) -> Write;
    /// The state's fields for inspection.
    fn fields(state: &Self::State, now: Nanos) -> Vec<Field>;
    /// The state after giving `units` back, when that changes anything.
    fn give_back(&self, state: Option<Self::State>, now: Nanos, units: u64) -> Option<Self::State>;
    /// The window a state's units count in (see `hold`): a hold settles only there.
    fn mark(_state: &Self::State) -> i64 {
        0
    }
    /// The state after `delta` units (a settle's return, or its excess charged past the limit) in
    /// the window `mark`, while that window still counts; None when nothing changes.
    fn adjust(
        &self,
        _state: Option<Self::State>,
        _now: Nanos,
        _mark: i64,
        _delta: i128,
    ) -> Option<Self::State> {
        None
    }
}

/// A hold's window in the state it left (see [`SmallState::mark`]).
pub(crate) fn mark_of<T: SmallState>(stored: Option<&[u8]>) -> Result<i64, StateError> {
    Ok(read::<T>(stored)?.as_ref().map_or(0, T::mark))
}

/// A settle's write (see [`SmallState::adjust`]).
pub(crate) fn settled<T: SmallState>(
    limiter: &T,
    stored: Option<&[u8]>,
    now: Nanos,
    mark: i64,
    delta: i128,
) -> Result<Option<Write>, StateError> {
    let state = read::<T>(stored)?;
    Ok(limiter.adjust(state, now, mark, delta).map(|next| limiter.write(&next, state.as_ref(), now)))
}

/// `n` moved by `delta`, within 0 and u64::MAX.
pub(crate) fn moved(n: u64, delta: i128) -> u64 {
    (i128::from(n) + delta).clamp(0, i128::from(u64::MAX)) as u64
}

/// A typed decision: the verdict, the state to store, and whether storing it repairs an impossible
/// state (then it is stored even when a combined request is denied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step<S> {
    pub verdict: Verdict,
    pub next: Option<S>,
    pub repair: bool,
}

fn read<T: SmallState>(stored: Option<&[u8]>) -> Result<Option<T::State>, StateError> {
    stored.map(T::decode).transpose()
}

impl<T: SmallState> Limiter for T {
    /// Units to take (0: a peek).
    type Request = u64;
    const LAYOUT: Layout = <T as SmallState>::LAYOUT;

    #[inline]
    fn decide(&self, stored: Option<&[u8]>, now: Nanos, cost: u64) -> Result<Outcome, StateError> {
        let state = read::<T>(stored)?;
        let step = self.step(state, now, cost);
        let write = step.next.map(|next| self.write(&next, state.as_ref(), now));
        Ok(Outcome { verdict: step.verdict, write, repair: step.repair })
    }

    fn peek(&self, stored: Option<&[u8]>, now: Nanos) -> Result<Peek, StateError> {
        let state = read::<T>(stored)?;
        Ok(Peek { now: self.step(state, now, 0).verdict, one: self.step(state, now, 1).verdict })
    }

    fn describe(stored: &[u8], now: Nanos) -> Result<Vec<Field>, StateError> {
        Ok(T::fields(&T::decode(stored)?, now))
    }
}

impl<T: SmallState> Refund for T {
    fn refund(
        &self,
        stored: Option<&[u8]>,
        now: Nanos,
        units: u64,
    ) -> Result<(Option<Write>, Verdict), StateError> {
        let state = read::<T>(stored)?;
        let refunded = self.give_back(state, now, units);
        let verdict = self.step(refunded.or(state), now, 0).verdict;
        Ok((refunded.map(|next| self.write(&next, state.as_ref(), now)), verdict))
    }
}
