//! What the window limiters share: `limit` units per `window`, validated once. `FixedWindow` and
//! `SlidingCounter` are this one parameter type with different algorithms (`Windowed<Fixed>`,
//! `Windowed<Counter>`).

use crate::args::{seconds_ns, whole_for, ArgError};
use crate::declare::{
    cost_of, cost_requests, refunded, Declare, IdHash, Param, ParamType, RequestArgs, RequestForm,
};
use crate::error::{ParamError, StateError};
use crate::limiter::{Limiter, WindowLimiter, Write};
use crate::limits::MAX_HORIZON_NS;
use crate::time::Nanos;
use crate::verdict::Verdict;
use std::marker::PhantomData;

/// A limit of zero never admits anything.
pub const LIMIT: ParamError = ParamError::new("limit", "must be a whole number >= 1");
/// What every window (and lease) length must be.
pub const WINDOW: ParamError = ParamError::new("window", crate::limits::SECONDS_EXPECTED);

/// The window parameter (also a lease's length, with its own name and error).
pub const WINDOW_PARAM: Param = Param {
    name: "window",
    form: ParamType::Seconds,
    min: 0,
    max: crate::limits::MAX_HORIZON_SECS,
    unit: "seconds",
    errors: &[WINDOW],
};

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

/// A window length as the commands write it: seconds, decimal, in whole milliseconds.
#[inline]
pub fn window_ns(bytes: &[u8]) -> Result<Nanos, ParamError> {
    seconds_ns(bytes, WINDOW)
}

/// A window length: positive and within the horizon.
pub(crate) fn check(window_ns: Nanos) -> Result<(), ParamError> {
    if window_ns <= 0 || window_ns > MAX_HORIZON_NS {
        return Err(WINDOW);
    }
    Ok(())
}

/// A window algorithm's names and its command's syntax and library function (its marker type declares
/// them in its own file).
pub trait WindowAlgorithm {
    const NAME: &'static str;
    const GROUP: &'static str;
    const COMMAND: &'static str;
    const SYNTAX: &'static str;
    const FUNCTION: &'static str;
}

impl<A: WindowAlgorithm> Declare for Windowed<A>
where
    Windowed<A>: crate::state::SmallState,
{
    const NAME: &'static str = A::NAME;
    const PARAMS: [Param; 2] = [
        Param {
            name: "limit",
            form: ParamType::Whole,
            min: 1,
            max: u64::MAX,
            unit: "units",
            errors: &[LIMIT],
        },
        WINDOW_PARAM,
    ];
    const GROUP: &'static str = A::GROUP;
    const COMMAND: &'static str = A::COMMAND;
    const SYNTAX: &'static str = A::SYNTAX;
    const FUNCTION: &'static str = A::FUNCTION;
    const REQUEST: RequestForm = RequestForm::Cost;
    const REFUNDS: bool = true;

    /// `limit window`.
    #[inline]
    fn parse([limit, window]: [&[u8]; 2]) -> Result<Self, ArgError> {
        Ok(Self::new(whole_for(limit, LIMIT, 1)?, window_ns(window)?)?)
    }

    cost_requests!();

    fn limit(&self) -> u64 {
        self.limit
    }

    fn period_ns(&self) -> Nanos {
        self.window_ns
    }

    fn share(&self, n: u64) -> Self {
        Windowed { limit: (self.limit / n).max(1), ..*self }
    }
}

impl<A> WindowLimiter for Windowed<A>
where
    Windowed<A>: Limiter<Request = u64>,
{
    fn with_window(limit: u64, window_ns: Nanos) -> Result<Self, ParamError> {
        Self::new(limit, window_ns)
    }
}
