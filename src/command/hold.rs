//! RL.HOLD ledger id ttl CHARGE|RETURN key KIND p1 p2 units [key KIND p1 p2 units ...]
//!
//! RL.ALL's decision over its groups, and when allowed the units of each group a hold settles
//! (TOKEN, FIXED, SLIDECOUNT) recorded under `id` in the hold's own key (`<ledger>:<id>`), with the
//! window they were taken from: settled later by RL.SETTLE, exactly once. `ratelimit_core::hold`
//! decides; this file reads the arguments and gives it the keys (`Ledger`).

use super::all::{groups, key_index};
use crate::server::arg::OwnedArg;
use crate::server::{Acl, Arg, Command, Keys, Reply, RlError, Spec, StateKey, Value};
use crate::stats::CommandStats;
use ratelimit_core::hold::{self, Abandon, Group, HoldError, Store};
use ratelimit_core::limiter::Write;
use redis_module::Context;

/// Its counters in INFO ratelimit.
static STATS: CommandStats = CommandStats::new("hold");

/// The arguments before the groups: `ledger id ttl CHARGE|RETURN`.
const HEAD: usize = 4;

pub struct Hold;

impl Command for Hold {
    // Not "fast": the ledger grows with the holds it keeps.
    const SPEC: Spec =
        Spec::other(c"rl.hold", c"write deny-oom", Acl::Write).with_keys(Keys::Function(hold_key)).with_stats(&STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        if args.len() < HEAD + 5 {
            return Err(RlError::WrongArity);
        }
        let id = hold::id(args[1].bytes())?;
        let ttl_ms = hold::ttl_ms(args[2].bytes())?;
        let abandon = Abandon::parse(args[3].bytes())?;
        let mut starts = Vec::new();
        let (keys, limits) = groups(&args[HEAD..], Some(&mut starts))?;
        let params = |at: usize| [args[HEAD + at + 2].bytes(), args[HEAD + at + 3].bytes()];
        let held: Vec<Group> = keys
            .iter()
            .zip(limits)
            .zip(starts)
            .map(|((key, limit), at)| Group { key: key.bytes(), limit, params: params(at) })
            .collect();
        let mut ledger = Ledger { ctx, args };
        let now = crate::server::clock::now_ns();
        let reply = hold::hold(&mut ledger, args[0].bytes(), id, ttl_ms, abandon, &held, now)?;
        Ok(ints(reply))
    }
}

/// The six integers of a hold's or a settle's reply.
pub(super) fn ints(reply: [i64; 6]) -> Reply {
    Reply::Value(Value::Array(reply.iter().map(|&n| Value::Int(n)).collect()))
}

/// The ledger first, then each group's key.
fn hold_key(args: &[Arg], position: usize) -> Option<usize> {
    match position {
        0 => (!args.is_empty()).then_some(0),
        p => key_index(args.get(HEAD..)?, p - 1).map(|i| i + HEAD),
    }
}

/// The keys a hold or a settle touches: its arguments', each hold's own key and the keys a hold
/// names (every one of them in the ledger's slot: the ledger's hash tag, and named with it).
pub(super) struct Ledger<'a> {
    pub ctx: &'a Context,
    pub args: &'a [Arg],
}

impl Ledger<'_> {
    fn with<R>(&self, key: &[u8], f: impl FnOnce(&mut StateKey<'_>) -> Result<R, RlError>) -> Result<R, RlError> {
        match self.args.iter().find(|a| a.bytes() == key) {
            Some(arg) => f(&mut StateKey::open(self.ctx, arg)?),
            None => {
                let owned = OwnedArg::new(self.ctx, key);
                let result = f(&mut StateKey::open(self.ctx, &owned)?);
                result
            }
        }
    }
}

impl Store for Ledger<'_> {
    type Error = RlError;

    fn read(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, RlError> {
        self.with(key, |k| Ok(k.read()?.map(<[u8]>::to_vec)))
    }

    fn apply(&mut self, key: &[u8], write: &Write) -> Result<(), RlError> {
        self.with(key, |k| k.apply(write))
    }
}

impl From<HoldError> for RlError {
    fn from(e: HoldError) -> RlError {
        match e {
            HoldError::Param(p) => p.into(),
            HoldError::State => RlError::BadState,
            HoldError::DuplicateKey => RlError::DuplicateKey,
        }
    }
}
