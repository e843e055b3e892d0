//! What a limiter kind declares, in its own file: its names, its argument grammar (two parameters,
//! then a request of one of three forms), its share of a limit, and whether it takes refunds. The
//! registry (`kind`) lists the kinds that declare it.

use crate::args::{is_option, ArgError};
use crate::command_info::KeyRule;
use crate::error::{ParamError, StateError};
use crate::limiter::{Limiter, Refund, Write};
use crate::time::Nanos;
use crate::verdict::Verdict;

/// How a request's id is stored as a 64-bit hash (the sliding log's ids): the adapter's choice.
pub type IdHash = fn(&[u8]) -> u64;

/// An empty request or lease id.
pub const EMPTY_ID: ParamError = ParamError::new("id", "must not be empty");

/// How a request is written after a limiter's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestForm {
    /// `cost`: units, 0 to peek.
    Cost,
    /// `id [DEDUP]`: one request, named.
    Id,
    /// `id [WEIGHT w]`: a lease held by `id`.
    Lease,
    /// `cost max_wait`: units, taken now or reserved from the future within `max_wait` seconds.
    Reserve,
}

/// A request's arguments as written, before its kind validates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestArgs<'a> {
    Cost(&'a [u8]),
    Id { id: &'a [u8], dedup: bool },
    Lease { id: &'a [u8], weight: Option<&'a [u8]> },
    Reserve { cost: &'a [u8], max_wait: &'a [u8] },
}

/// Why a client cannot write a request of some form.
pub type RenderError = &'static str;

impl RequestForm {
    /// The option word this form may end with, and how many values follow it.
    pub const fn option(self) -> Option<(&'static [u8], usize)> {
        match self {
            RequestForm::Cost | RequestForm::Reserve => None,
            RequestForm::Id => Some((b"DEDUP", 0)),
            RequestForm::Lease => Some((b"WEIGHT", 1)),
        }
    }

    /// How many arguments at the start of `args` the request takes: its value, and its option when
    /// the next argument names it (inside RL.ALL, a key right after a group cannot be the option's
    /// name).
    #[inline]
    pub fn len(self, args: &[&[u8]]) -> usize {
        match self.option() {
            Some((name, values)) if is_option(args.get(1), name) => 2 + values,
            _ if self == RequestForm::Reserve => 2,
            _ => 1,
        }
    }

    /// The request at the start of `args` and how many arguments it took (see [`RequestForm::len`]).
    #[inline]
    pub fn parse<'a>(self, args: &[&'a [u8]]) -> Result<(RequestArgs<'a>, usize), ArgError> {
        let len = self.len(args);
        let taken = args.get(..len).ok_or(ArgError::WrongArity)?;
        let request = match (self, taken) {
            (RequestForm::Cost, [cost]) => RequestArgs::Cost(cost),
            (RequestForm::Reserve, [cost, max_wait]) => RequestArgs::Reserve { cost, max_wait },
            (RequestForm::Id, [id, ..]) => RequestArgs::Id { id, dedup: len == 2 },
            (RequestForm::Lease, [id]) => RequestArgs::Lease { id, weight: None },
            (RequestForm::Lease, [id, _, weight]) => RequestArgs::Lease { id, weight: Some(weight) },
            _ => return Err(ArgError::WrongArity),
        };
        Ok((request, len))
    }

    /// What a command whose request ends it (not inside RL.ALL) does with arguments left after the
    /// request: one unknown option is a syntax error, more are the wrong number.
    #[inline]
    pub fn parse_whole<'a>(self, args: &[&'a [u8]]) -> Result<RequestArgs<'a>, ArgError> {
        let (request, len) = self.parse(args)?;
        match (self.option(), args.len() - len) {
            (_, 0) => Ok(request),
            (Some((_, values)), left) if len == 1 && left == 1 + values => Err(ArgError::Syntax),
            _ => Err(ArgError::WrongArity),
        }
    }

    /// Writes a request of `cost` in this form: a request id from `fresh_id` (a sliding log, which
    /// counts requests: the cost must be 1), a lease held by `lease_id` with the weight `cost`, or a
    /// reservation of `cost` waiting up to `max_wait` (seconds, as `args::seconds` writes them).
    pub fn render(
        self,
        cost: u64,
        lease_id: Option<&str>,
        fresh_id: impl FnOnce() -> String,
        max_wait: &str,
        mut arg: impl FnMut(Word<'_>),
    ) -> Result<(), RenderError> {
        match self {
            RequestForm::Cost => arg(Word::Number(cost)),
            RequestForm::Reserve => {
                arg(Word::Number(cost));
                arg(Word::Text(max_wait));
            }
            RequestForm::Id if cost != 1 => return Err(LOG_COST),
            RequestForm::Id => arg(Word::Text(&fresh_id())),
            RequestForm::Lease => {
                let id = lease_id.ok_or(NO_RELEASE)?;
                if cost == 0 {
                    return Err(LEASE_WEIGHT);
                }
                arg(Word::Text(id));
                arg(Word::Text("WEIGHT"));
                arg(Word::Number(cost));
            }
        }
        Ok(())
    }
}

/// One argument a client writes: text, or a whole number (which the client writes without an
/// intermediate string).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Word<'a> {
    Text(&'a str),
    Number(u64),
}

/// A sliding log's request of another cost than 1.
pub const LOG_COST: RenderError = "a sliding log counts requests: the cost must be 1";
/// A lease of weight 0.
pub const LEASE_WEIGHT: RenderError = "a concurrency limit is held with a weight of at least 1";

/// The refusal of a lease where nothing would release it.
pub(crate) const NO_RELEASE: RenderError =
    "a concurrency limit is taken with Limiter::acquire, which releases it: check has no release";

/// What a parameter is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// Plain decimal digits, from `min` to `max`.
    Whole,
    /// An exact decimal > 0, at most `max` (at most 36 significant digits).
    Decimal,
    /// Seconds as an exact decimal in whole milliseconds, above 0 and at most `max` seconds.
    Seconds,
}

/// One of a kind's two parameters: its name, how it is written, its bounds, its unit and every error
/// it can be refused with, in the order they are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    pub name: &'static str,
    pub form: ParamType,
    pub min: u64,
    pub max: u64,
    pub unit: &'static str,
    pub errors: &'static [ParamError],
}

/// A limiter kind's declaration, in its own file.
pub trait Declare: Limiter + Copy {
    /// Its name in the clients (`token_bucket`).
    const NAME: &'static str;
    /// Its group in RL.ALL (`TOKEN`) and RL.REFUND, and its own command (`RL.TOKEN`).
    const GROUP: &'static str;
    const COMMAND: &'static str;
    /// Its command as a client knows it (`commands::COMMANDS` lists it from these): its syntax, the
    /// Lua library's function for it, where its keys are and what a verdict's sixth field says (None:
    /// a verdict of five).
    const SYNTAX: &'static str;
    const FUNCTION: &'static str;
    const KEYS: KeyRule = KeyRule::At(0);
    const SIXTH: Option<&'static str> = None;
    /// Its two parameters after the key.
    const PARAMS: [Param; 2];
    /// How its request is written after its parameters.
    const REQUEST: RequestForm;
    /// Whether units can be given back (RL.REFUND).
    const REFUNDS: bool = false;

    /// Its two parameters after the key, as its command takes them (`capacity rate`, `limit window`,
    /// `limit lease`).
    fn parse(params: [&[u8]; 2]) -> Result<Self, ArgError>;

    /// What of its request is checked before its parameters (the order its errors come in); nothing
    /// by default.
    fn precheck(_request: RequestArgs<'_>) -> Result<(), ArgError> {
        Ok(())
    }

    /// Its request, validated.
    fn request(&self, args: RequestArgs<'_>, ids: IdHash) -> Result<Self::Request, ArgError>;

    /// The limit it enforces (a capacity, a number per window, a weight in flight).
    fn limit(&self) -> u64;

    /// The time the limit is measured over: a window, a full refill, a lease.
    fn period_ns(&self) -> Nanos;

    /// A request of `units` as an in-process caller makes it (a lease: held by `holder`, of weight
    /// `units`); None where the kind needs what is not given (a named request, a lease's holder).
    fn request_of(&self, units: u64, holder: Option<&[u8]>) -> Option<Self::Request>;

    /// Its share of the limit when `n` instances each decide alone: the limit (and rate) divided by
    /// `n`, at least 1.
    fn share(&self, n: u64) -> Self;

    /// The units a request holds (RL.HOLD): its cost, for the kinds a hold settles; None for others.
    fn held(_request: &Self::Request) -> Option<u64> {
        None
    }

    /// The window a hold's units were taken in, from the state the hold left (see `hold`).
    fn hold_mark(&self, _stored: Option<&[u8]>) -> Option<Result<i64, StateError>> {
        None
    }

    /// A settle's `delta` units in the window `mark` (see `hold`): the write, None when nothing
    /// changes.
    fn settle_units(
        &self,
        _stored: Option<&[u8]>,
        _now: Nanos,
        _mark: i64,
        _delta: i128,
    ) -> Option<Result<Option<Write>, StateError>> {
        None
    }

    /// Gives `units` back (see [`Refund`]); None for a kind that takes no refunds.
    fn refund_units(
        &self,
        _stored: Option<&[u8]>,
        _now: Nanos,
        _units: u64,
    ) -> Option<Result<(Option<Write>, Verdict), StateError>> {
        None
    }
}

/// A request of units (`RequestForm::Cost`).
#[inline]
pub(crate) fn cost_of(args: RequestArgs<'_>) -> Result<u64, ArgError> {
    match args {
        RequestArgs::Cost(cost) => Ok(crate::args::cost(cost)?),
        _ => Err(ArgError::Syntax),
    }
}

/// The request methods of a kind whose requests are costs (`RequestForm::Cost`) and which takes
/// refunds (its `Refund`), written once for the kinds that share them.
macro_rules! cost_requests {
    () => {
        fn request(&self, args: RequestArgs<'_>, _: IdHash) -> Result<u64, ArgError> {
            cost_of(args)
        }

        fn request_of(&self, units: u64, _holder: Option<&[u8]>) -> Option<u64> {
            Some(units)
        }

        fn refund_units(
            &self,
            stored: Option<&[u8]>,
            now: Nanos,
            units: u64,
        ) -> Option<Result<(Option<Write>, Verdict), StateError>> {
            refunded(self, stored, now, units)
        }

        fn held(request: &u64) -> Option<u64> {
            Some(*request)
        }

        fn hold_mark(&self, stored: Option<&[u8]>) -> Option<Result<i64, StateError>> {
            Some(crate::state::mark_of::<Self>(stored))
        }

        fn settle_units(
            &self,
            stored: Option<&[u8]>,
            now: Nanos,
            mark: i64,
            delta: i128,
        ) -> Option<Result<Option<Write>, StateError>> {
            Some(crate::state::settled(self, stored, now, mark, delta))
        }
    };
}
pub(crate) use cost_requests;

/// The refund of a kind that takes refunds (its `refund_units`).
pub(crate) fn refunded<L: Refund>(
    limiter: &L,
    stored: Option<&[u8]>,
    now: Nanos,
    units: u64,
) -> Option<Result<(Option<Write>, Verdict), StateError>> {
    Some(limiter.refund(stored, now, units))
}
