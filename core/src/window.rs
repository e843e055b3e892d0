//! What the window limiters share: `limit` units per `window`, validated once. `FixedWindow` and
//! `SlidingCounter` are this one parameter type with different algorithms (`Windowed<Fixed>`,
//! `Windowed<Counter>`).

use crate::error::ParamError;
use crate::limiter::{Limiter, WindowLimiter};
use crate::limits::MAX_HORIZON_NS;
use crate::time::Nanos;
use std::marker::PhantomData;

/// A limit of zero never admits anything.
pub const LIMIT: ParamError = ParamError::new("limit", "must be a whole number >= 1");
/// What every window (and lease) length must be.
pub const WINDOW: ParamError =
    ParamError::new("window", "must be a number of seconds > 0, in whole milliseconds (0.001 to 3000000000)");

/// Valid window parameters for the algorithm `A`: a limit of at least 1 and a positive window within
/// the horizon.
#[derive(Debug, PartialEq, Eq)]
pub struct Windowed<A> {
    pub(crate) limit: u64,
    pub(crate) window_ns: Nanos,
    algorithm: PhantomData<A>,
}

// Not derived: a derive would require `A: Clone` of the marker types.
impl<A> Clone for Windowed<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Windowed<A> {}

impl<A> Windowed<A> {
    pub fn new(limit: u64, window_ns: Nanos) -> Result<Self, ParamError> {
        if limit == 0 {
            return Err(LIMIT);
        }
        check(window_ns)?;
        Ok(Windowed { limit, window_ns, algorithm: PhantomData })
    }
}

/// A window length: positive and within the horizon.
pub(crate) fn check(window_ns: Nanos) -> Result<(), ParamError> {
    if window_ns <= 0 || window_ns > MAX_HORIZON_NS {
        return Err(WINDOW);
    }
    Ok(())
}

impl<A> WindowLimiter for Windowed<A>
where
    Windowed<A>: Limiter<Request = u64>,
{
    fn with_window(limit: u64, window_ns: Nanos) -> Result<Self, ParamError> {
        Self::new(limit, window_ns)
    }
}
