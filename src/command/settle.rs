//! RL.SETTLE ledger id FINAL|PARTIAL key units [key units ...]
//!
//! Settles a hold (see `hold`): each named key's units, the usage so far (PARTIAL) or the actual
//! (FINAL, once). Replies six integers, or nil when the ledger holds no hold of `id`.

use super::hold::{ints, Ledger};
use crate::server::{Acl, Arg, Command, Keys, Reply, RlError, Spec, Value};
use crate::stats::CommandStats;
use ratelimit_core::args::cost;
use ratelimit_core::hold::{self, Mode};
use redis_module::Context;

/// Its counters in INFO ratelimit.
static STATS: CommandStats = CommandStats::new("settle");

/// The arguments before the pairs: `ledger id FINAL|PARTIAL`.
const HEAD: usize = 3;

pub struct Settle;

impl Command for Settle {
    const SPEC: Spec = Spec::other(c"rl.settle", c"write deny-oom", Acl::Write)
        .with_keys(Keys::Function(settle_key))
        .with_stats(&STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        if args.len() < HEAD + 2 || !(args.len() - HEAD).is_multiple_of(2) {
            return Err(RlError::WrongArity);
        }
        let id = hold::id(args[1].bytes())?;
        let mode = Mode::parse(args[2].bytes())?;
        let mut named = Vec::with_capacity((args.len() - HEAD) / 2);
        for pair in args[HEAD..].chunks(2) {
            named.push((pair[0].bytes(), cost(pair[1].bytes())?));
        }
        let mut ledger = Ledger { ctx, args };
        let now = crate::server::clock::now_ns();
        Ok(match hold::settle(&mut ledger, args[0].bytes(), id, mode, &named, now)? {
            Some(reply) => ints(reply),
            None => Reply::Value(Value::Null),
        })
    }
}

/// The ledger first, then each pair's key.
fn settle_key(args: &[Arg], position: usize) -> Option<usize> {
    match position {
        0 => (!args.is_empty()).then_some(0),
        p => Some(HEAD + 2 * (p - 1)).filter(|&i| i < args.len()),
    }
}
