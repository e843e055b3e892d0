//! The registry of limiter kinds: the one list every dispatcher reads.
//!
//! Each limiter declares in its own file, once ([`Declare`]): its names (RL.ALL's group, its
//! command), its stored layout (`Limiter::LAYOUT`), its argument grammar (its parameters, parsed
//! from the bytes a command receives; its request's form), its share of a limit, and whether units
//! can be given back. The `kinds!` line below lists the kinds; from it come [`LimiterKind`] (a kind
//! by name, tag or group) and [`AnyLimiter`] / [`AnyLimit`] (a limiter or a request of any kind),
//! through which RL.ALL, RL.INSPECT, RL.REFUND, the client's commands, its admin calls and its local
//! fallback dispatch. A kind missing from this line is missing everywhere, and `tests` says so.

use crate::args::{is_option, ArgError};
use crate::error::{ParamError, StateError};
use crate::fixed_window::FixedWindow;
use crate::format::Layout;
use crate::leases::Leases;
use crate::limiter::{Field, Limiter, Outcome, Peek, Refund, Write};
use crate::sliding_counter::SlidingCounter;
use crate::sliding_log::SlidingLog;
use crate::time::Nanos;
use crate::token_bucket::TokenBucket;
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
}

/// A request's arguments as written, before its kind validates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestArgs<'a> {
    Cost(&'a [u8]),
    Id { id: &'a [u8], dedup: bool },
    Lease { id: &'a [u8], weight: Option<&'a [u8]> },
}

/// Why a client cannot write a request of some form.
pub type RenderError = &'static str;

impl RequestForm {
    /// The option word this form may end with, and how many values follow it.
    const fn option(self) -> Option<(&'static [u8], usize)> {
        match self {
            RequestForm::Cost => None,
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
            _ => 1,
        }
    }

    /// The request at the start of `args` and how many arguments it took (see [`RequestForm::len`]).
    pub fn parse<'a>(self, args: &[&'a [u8]]) -> Result<(RequestArgs<'a>, usize), ArgError> {
        let len = self.len(args);
        let taken = args.get(..len).ok_or(ArgError::WrongArity)?;
        let request = match (self, taken) {
            (RequestForm::Cost, [cost]) => RequestArgs::Cost(cost),
            (RequestForm::Id, [id, ..]) => RequestArgs::Id { id, dedup: len == 2 },
            (RequestForm::Lease, [id]) => RequestArgs::Lease { id, weight: None },
            (RequestForm::Lease, [id, _, weight]) => RequestArgs::Lease { id, weight: Some(weight) },
            _ => return Err(ArgError::WrongArity),
        };
        Ok((request, len))
    }

    /// What a command whose request ends it (not inside RL.ALL) does with arguments left after the
    /// request: one unknown option is a syntax error, more are the wrong number.
    pub fn parse_whole<'a>(self, args: &[&'a [u8]]) -> Result<RequestArgs<'a>, ArgError> {
        let (request, len) = self.parse(args)?;
        match (self.option(), &args[len..]) {
            (_, []) => Ok(request),
            (Some((_, values)), rest) if len == 1 && rest.len() == 1 + values => Err(ArgError::Syntax),
            _ => Err(ArgError::WrongArity),
        }
    }

    /// Writes a request of `cost` in this form: a request id from `fresh_id` (a sliding log, which
    /// counts requests: the cost must be 1), or a lease held by `lease_id` with the weight `cost`.
    pub fn render(
        self,
        cost: u64,
        lease_id: Option<&str>,
        fresh_id: impl FnOnce() -> String,
        mut arg: impl FnMut(&str),
    ) -> Result<(), RenderError> {
        match self {
            RequestForm::Cost => arg(&cost.to_string()),
            RequestForm::Id if cost != 1 => return Err("a sliding log counts requests: the cost must be 1"),
            RequestForm::Id => arg(&fresh_id()),
            RequestForm::Lease => {
                let id = lease_id.ok_or(NO_RELEASE)?;
                if cost == 0 {
                    return Err("a concurrency limit is held with a weight of at least 1");
                }
                arg(id);
                arg("WEIGHT");
                arg(&cost.to_string());
            }
        }
        Ok(())
    }
}

/// The refusal of a lease where nothing would release it.
pub const NO_RELEASE: RenderError =
    "a concurrency limit is taken with Limiter::acquire, which releases it: check has no release";

/// A limiter kind's declaration, in its own file.
pub trait Declare: Limiter + Copy {
    /// Its group in RL.ALL (`TOKEN`) and RL.REFUND, and its own command (`RL.TOKEN`).
    const GROUP: &'static str;
    const COMMAND: &'static str;
    /// How its request is written after its parameters.
    const REQUEST: RequestForm;
    /// Whether units can be given back (RL.REFUND).
    const REFUNDS: bool = false;

    /// Its two parameters after the key, as its command takes them (`capacity rate`, `limit window`,
    /// `limit lease`).
    fn parse(params: [&[u8]; 2]) -> Result<Self, ArgError>;

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
pub fn cost_of(args: RequestArgs<'_>) -> Result<u64, ArgError> {
    match args {
        RequestArgs::Cost(cost) => Ok(crate::args::cost(cost)?),
        _ => Err(ArgError::Syntax),
    }
}

/// The refund of a kind that takes refunds (its `refund_units`).
pub fn refunded<L: Refund>(
    limiter: &L,
    stored: Option<&[u8]>,
    now: Nanos,
    units: u64,
) -> Option<Result<(Option<Write>, Verdict), StateError>> {
    Some(limiter.refund(stored, now, units))
}

macro_rules! kinds {
    ($($kind:ident => $ty:ty),* $(,)?) => {
        /// A limiter kind, by name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum LimiterKind { $($kind),* }

        impl LimiterKind {
            /// Every kind.
            pub const ALL: &'static [LimiterKind] = &[$(LimiterKind::$kind),*];

            /// Its group in RL.ALL and RL.REFUND (`TOKEN`).
            pub const fn group(self) -> &'static str {
                match self { $(LimiterKind::$kind => <$ty as Declare>::GROUP),* }
            }

            /// Its own command (`RL.TOKEN`).
            pub const fn command(self) -> &'static str {
                match self { $(LimiterKind::$kind => <$ty as Declare>::COMMAND),* }
            }

            /// The layout of the values it stores.
            pub const fn layout(self) -> Layout {
                match self { $(LimiterKind::$kind => <$ty as Limiter>::LAYOUT),* }
            }

            /// How its request is written.
            pub const fn request_form(self) -> RequestForm {
                match self { $(LimiterKind::$kind => <$ty as Declare>::REQUEST),* }
            }

            /// Whether its units can be given back.
            pub const fn refunds(self) -> bool {
                match self { $(LimiterKind::$kind => <$ty as Declare>::REFUNDS),* }
            }

            /// The stored state's fields (RL.INSPECT), without parameters.
            pub fn describe(self, stored: &[u8], now: Nanos) -> Result<Vec<Field>, StateError> {
                match self { $(LimiterKind::$kind => <$ty as Limiter>::describe(stored, now)),* }
            }
        }

        /// A limiter of any kind, with validated parameters.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum AnyLimiter { $($kind($ty)),* }

        impl AnyLimiter {
            /// `kind`'s limiter from its two parameters, as its command parses them.
            pub fn parse(kind: LimiterKind, params: [&[u8]; 2]) -> Result<AnyLimiter, ArgError> {
                match kind { $(LimiterKind::$kind => <$ty as Declare>::parse(params).map(AnyLimiter::$kind)),* }
            }

            pub const fn kind(&self) -> LimiterKind {
                match self { $(AnyLimiter::$kind(_) => LimiterKind::$kind),* }
            }

            /// A request of this limiter, validated.
            pub fn request(&self, args: RequestArgs<'_>, ids: IdHash) -> Result<AnyLimit, ArgError> {
                match self { $(AnyLimiter::$kind(l) => Ok(AnyLimit::$kind(*l, l.request(args, ids)?))),* }
            }

            /// A request of `units` as an in-process caller makes it (see [`Declare::request_of`]).
            pub fn request_of(&self, units: u64, holder: Option<&[u8]>) -> Option<AnyLimit> {
                match self { $(AnyLimiter::$kind(l) => Some(AnyLimit::$kind(*l, l.request_of(units, holder)?))),* }
            }

            pub fn limit(&self) -> u64 {
                match self { $(AnyLimiter::$kind(l) => l.limit()),* }
            }

            pub fn period_ns(&self) -> Nanos {
                match self { $(AnyLimiter::$kind(l) => l.period_ns()),* }
            }

            pub fn share(&self, n: u64) -> AnyLimiter {
                match self { $(AnyLimiter::$kind(l) => AnyLimiter::$kind(l.share(n.max(1)))),* }
            }

            pub fn peek(&self, stored: Option<&[u8]>, now: Nanos) -> Result<Peek, StateError> {
                match self { $(AnyLimiter::$kind(l) => l.peek(stored, now)),* }
            }

            /// Gives `units` back; None for a kind that takes no refunds.
            pub fn refund(
                &self,
                stored: Option<&[u8]>,
                now: Nanos,
                units: u64,
            ) -> Option<Result<(Option<Write>, Verdict), StateError>> {
                match self { $(AnyLimiter::$kind(l) => l.refund_units(stored, now, units)),* }
            }
        }

        /// A limiter of any kind with one request of it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum AnyLimit { $($kind($ty, <$ty as Limiter>::Request)),* }

        impl AnyLimit {
            pub fn decide(&self, stored: Option<&[u8]>, now: Nanos) -> Result<Outcome, StateError> {
                match self { $(AnyLimit::$kind(l, request) => l.decide(stored, now, *request)),* }
            }

            pub fn limiter(&self) -> AnyLimiter {
                match self { $(AnyLimit::$kind(l, _) => AnyLimiter::$kind(*l)),* }
            }
        }
    };
}

kinds! {
    TokenBucket => TokenBucket,
    FixedWindow => FixedWindow,
    SlidingCounter => SlidingCounter,
    SlidingLog => SlidingLog,
    Leases => Leases,
}

impl LimiterKind {
    /// The kind whose RL.ALL group is `name` (case-insensitive).
    pub fn from_group(name: &[u8]) -> Option<LimiterKind> {
        LimiterKind::ALL.iter().copied().find(|k| name.eq_ignore_ascii_case(k.group().as_bytes()))
    }

    /// The kind that wrote `bytes` (tagged, or release 0.1's untagged formats); None for anything
    /// else, redis-cell's decimal TAT included (a dialect's layout, not a kind's).
    pub fn of(bytes: &[u8]) -> Option<LimiterKind> {
        let layout = Layout::of(bytes)?;
        LimiterKind::ALL.iter().copied().find(|k| k.layout() == layout)
    }

    /// How many arguments a group of this kind takes after its key and kind name, at the start of
    /// `args` (its two parameters and its request): what RL.ALL's key positions follow.
    pub fn group_len(self, args: &[&[u8]]) -> usize {
        2 + self.request_form().len(args.get(2..).unwrap_or_default())
    }
}

/// Builds a kind's limiter from its two parameters: [`AnyLimiter::parse`], or a cache in front of it.
pub type Build<'b> = &'b dyn Fn(LimiterKind, [&[u8]; 2]) -> Result<AnyLimiter, ArgError>;

impl AnyLimit {
    /// One group of RL.ALL after its key, `KIND p1 p2 request...`: the limit and the arguments it took.
    pub fn parse_group(args: &[&[u8]], ids: IdHash, build: Build<'_>) -> Result<(AnyLimit, usize), ArgError> {
        let [name, p1, p2, request @ ..] = args else { return Err(ArgError::WrongArity) };
        if request.is_empty() {
            return Err(ArgError::WrongArity);
        }
        let kind = LimiterKind::from_group(name).ok_or(ArgError::Syntax)?;
        let limiter = build(kind, [p1, p2])?;
        let (request, len) = kind.request_form().parse(request)?;
        Ok((limiter.request(request, ids)?, 3 + len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_kind_is_named_and_stored_once() {
        let groups: HashSet<_> = LimiterKind::ALL.iter().map(|k| k.group()).collect();
        let commands: HashSet<_> = LimiterKind::ALL.iter().map(|k| k.command()).collect();
        let layouts: Vec<_> = LimiterKind::ALL.iter().map(|k| k.layout()).collect();
        assert_eq!((groups.len(), commands.len()), (LimiterKind::ALL.len(), LimiterKind::ALL.len()));
        // Every tagged layout belongs to exactly one kind, and every kind's layout is tagged.
        for layout in Layout::TAGGED {
            assert_eq!(layouts.iter().filter(|l| **l == layout).count(), 1, "{layout:?}");
        }
        assert_eq!(layouts.len(), Layout::TAGGED.len());
        for kind in LimiterKind::ALL {
            assert_eq!(LimiterKind::from_group(kind.group().to_lowercase().as_bytes()), Some(*kind));
            assert!(kind.command().ends_with(kind.group()) || kind.group() == "ACQUIRE");
        }
        assert_eq!(LimiterKind::from_group(b"THROTTLE"), None);
    }

    #[test]
    fn request_forms_take_their_options() {
        let args = |s: &'static str| s.split(' ').map(str::as_bytes).collect::<Vec<_>>();
        assert_eq!(RequestForm::Cost.parse(&args("3 k")), Ok((RequestArgs::Cost(b"3"), 1)));
        assert_eq!(
            RequestForm::Id.parse(&args("r dedup k")),
            Ok((RequestArgs::Id { id: b"r", dedup: true }, 2))
        );
        assert_eq!(
            RequestForm::Lease.parse(&args("h WEIGHT 2")),
            Ok((RequestArgs::Lease { id: b"h", weight: Some(b"2") }, 3))
        );
        assert_eq!(RequestForm::Lease.parse(&args("h WEIGHT")), Err(ArgError::WrongArity));
        assert_eq!(RequestForm::Id.parse_whole(&args("r other")), Err(ArgError::Syntax));
        assert_eq!(RequestForm::Id.parse_whole(&args("r DEDUP x")), Err(ArgError::WrongArity));
        assert_eq!(RequestForm::Lease.parse_whole(&args("h W 2")), Err(ArgError::Syntax));
        assert_eq!(RequestForm::Cost.parse_whole(&args("1 2")), Err(ArgError::WrongArity));
    }

    #[test]
    fn groups_parse_what_clients_render() {
        let ids: IdHash = |id| id.len() as u64;
        for kind in LimiterKind::ALL {
            let mut args: Vec<String> = vec![kind.group().into(), "10".into(), "1.500".into()];
            kind.request_form().render(1, Some("holder"), || "req".into(), |a| args.push(a.into())).unwrap();
            let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            let (limit, len) = AnyLimit::parse_group(&bytes, ids, &AnyLimiter::parse).unwrap();
            assert_eq!((limit.limiter().kind(), len), (*kind, args.len()), "{args:?}");
            assert_eq!(limit.limiter().limit(), 10);
            assert_eq!(kind.group_len(&bytes[1..]), args.len() - 1);
        }
    }
}
