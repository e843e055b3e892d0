//! The registry of limiter kinds: the one list every dispatcher reads.
//!
//! Each limiter declares in its own file, once ([`Declare`], in `declare`): its names (RL.ALL's
//! group, its command), its stored layout (`Limiter::LAYOUT`), its argument grammar (its parameters,
//! parsed from the bytes a command receives; its request's form), its share of a limit, and whether
//! units can be given back. The list of kinds is `limiter_kinds!` in `lib.rs` (a kind's module and
//! type, one line); from it come [`LimiterKind`] (a kind by name, tag or group) and [`AnyLimiter`] /
//! [`AnyLimit`] (a limiter or a request of any kind), through which RL.ALL, RL.INSPECT, RL.REFUND, the
//! client's commands, its admin calls and its local fallback dispatch. A kind missing from that list is
//! missing everywhere, and `tests` says so.

use crate::args::ArgError;
use crate::command_info::CommandInfo;
pub use crate::declare::{Declare, IdHash, Param, ParamType, RequestArgs, RequestForm, Word};
use crate::error::StateError;
use crate::format::Layout;
use crate::limiter::{Field, Limiter, Outcome, Peek, Write};
use crate::time::Nanos;
use crate::verdict::Verdict;

macro_rules! kinds {
    ($($kind:ident => $ty:ty, $module:expr);* $(;)?) => {
        /// A limiter kind, by name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum LimiterKind { $($kind),* }

        impl LimiterKind {
            /// Every kind.
            pub const ALL: &'static [LimiterKind] = &[$(LimiterKind::$kind),*];

            /// Its name in the clients (`token_bucket`).
            pub const fn name(self) -> &'static str {
                match self { $(LimiterKind::$kind => <$ty as Declare>::NAME),* }
            }

            /// Its two parameters' grammar.
            pub const fn params(self) -> [Param; 2] {
                match self { $(LimiterKind::$kind => <$ty as Declare>::PARAMS),* }
            }

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

            /// Its own command, as a client knows it (its row of `commands::COMMANDS`).
            pub const fn command_info(self) -> CommandInfo {
                match self {
                    $(LimiterKind::$kind => CommandInfo::of_kind(
                        <$ty as Declare>::COMMAND,
                        <$ty as Declare>::SYNTAX,
                        <$ty as Declare>::KEYS,
                        <$ty as Declare>::FUNCTION,
                        <$ty as Declare>::SIXTH,
                    )),*
                }
            }

            /// Its module in core (`token_bucket`), and so its part of the Lua library
            /// (`lua/src/token_bucket.lua`).
            pub const fn module(self) -> &'static str {
                match self { $(LimiterKind::$kind => $module),* }
            }

            /// How its request is written.
            pub const fn request_form(self) -> RequestForm {
                match self { $(LimiterKind::$kind => <$ty as Declare>::REQUEST),* }
            }

            /// Whether its units can be given back.
            pub const fn refunds(self) -> bool {
                match self { $(LimiterKind::$kind => <$ty as Declare>::REFUNDS),* }
            }

            /// Checks what of a request comes before the parameters (see [`Declare::precheck`]).
            pub fn precheck(self, request: RequestArgs<'_>) -> Result<(), ArgError> {
                match self { $(LimiterKind::$kind => <$ty as Declare>::precheck(request)),* }
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

            /// The window a hold's units were taken in (see `hold`); None for a kind a hold does not
            /// settle.
            pub fn hold_mark(&self, stored: Option<&[u8]>) -> Option<Result<i64, StateError>> {
                match self { $(AnyLimiter::$kind(l) => l.hold_mark(stored)),* }
            }

            /// A settle's `delta` units in the window `mark`; None for a kind a hold does not settle.
            pub fn settle(
                &self,
                stored: Option<&[u8]>,
                now: Nanos,
                mark: i64,
                delta: i128,
            ) -> Option<Result<Option<Write>, StateError>> {
                match self { $(AnyLimiter::$kind(l) => l.settle_units(stored, now, mark, delta)),* }
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

            /// The units this request holds in RL.HOLD; None for a kind a hold does not settle.
            pub fn held_units(&self) -> Option<u64> {
                match self { $(AnyLimit::$kind(_, request) => <$ty as Declare>::held(request)),* }
            }

            pub fn limiter(&self) -> AnyLimiter {
                match self { $(AnyLimit::$kind(l, _) => AnyLimiter::$kind(*l)),* }
            }
        }
    };
}

every_kind!();

impl LimiterKind {
    /// The kind whose RL.ALL group is `name` (case-insensitive).
    pub fn from_group(name: &[u8]) -> Option<LimiterKind> {
        LimiterKind::ALL.iter().copied().find(|k| name.eq_ignore_ascii_case(k.group().as_bytes()))
    }

    /// The kind that owns the layout of `bytes` (tagged, or release 0.1's untagged formats); None
    /// for anything else, redis-cell's decimal TAT included (a dialect's layout, not a kind's).
    pub fn of(bytes: &[u8]) -> Option<LimiterKind> {
        Layout::of(bytes).and_then(LimiterKind::owning)
    }

    /// The kind that owns `layout`: the first listed that stores it (a kind listed after it decides
    /// on the same state: a reservation, on a token bucket's). None for a dialect's layout.
    pub fn owning(layout: Layout) -> Option<LimiterKind> {
        LimiterKind::ALL.iter().copied().find(|k| k.layout() == layout)
    }

    /// The kind whose state this kind decides on: itself, or the owner of its layout.
    pub fn owner(self) -> LimiterKind {
        LimiterKind::owning(self.layout()).unwrap_or(self)
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
        let (request, len) = kind.request_form().parse(request)?;
        kind.precheck(request)?;
        let limiter = build(kind, [p1, p2])?;
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
        // Every tagged layout is owned by exactly one kind, and every kind's layout is tagged; a kind
        // sharing a layout decides on its owner's state (a reservation on a token bucket's).
        let owners: Vec<_> =
            LimiterKind::ALL.iter().filter(|k| k.owner() == **k).map(|k| k.layout()).collect();
        for layout in Layout::TAGGED {
            assert_eq!(owners.iter().filter(|l| **l == layout).count(), 1, "{layout:?}");
            assert!(layouts.contains(&layout));
        }
        assert_eq!(owners.len(), Layout::TAGGED.len());
        assert_eq!(LimiterKind::Reservation.owner(), LimiterKind::TokenBucket);
        for kind in LimiterKind::ALL {
            assert_eq!(LimiterKind::from_group(kind.group().to_lowercase().as_bytes()), Some(*kind));
            assert!(kind.command().ends_with(kind.group()) || kind.group() == "ACQUIRE");
        }
        assert_eq!(LimiterKind::from_group(b"THROTTLE"), None);
    }

    #[test]
    fn a_lease_weight_is_checked_before_the_parameters_as_rl_acquire_checks_it() {
        let args: Vec<&[u8]> = vec![b"ACQUIRE", b"0", b"1", b"id", b"WEIGHT", b"0"];
        let refused = AnyLimit::parse_group(&args, |_| 0, &AnyLimiter::parse).unwrap_err();
        assert_eq!(refused, ArgError::Invalid(crate::leases::WEIGHT));
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
            kind.request_form()
                .render(
                    1,
                    Some("holder"),
                    || "req".into(),
                    "0.250",
                    |a| match a {
                        Word::Text(t) => args.push(t.into()),
                        Word::Number(n) => args.push(n.to_string()),
                    },
                )
                .unwrap();
            let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            let (limit, len) = AnyLimit::parse_group(&bytes, ids, &AnyLimiter::parse).unwrap();
            assert_eq!((limit.limiter().kind(), len), (*kind, args.len()), "{args:?}");
            assert_eq!(limit.limiter().limit(), 10);
            assert_eq!(kind.group_len(&bytes[1..]), args.len() - 1);
        }
    }
}
