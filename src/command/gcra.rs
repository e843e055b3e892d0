//! GCRA key max_burst tokens_per_period period [TOKENS n]
//!
//! Redis core's command (compiled out of 8.8), with its argument rules and error texts in its order
//! and its replies in whole seconds (see `ratelimit_core::dialect::gcra`), on the token bucket: its
//! keys are RL.TOKEN's. Numbers are parsed by the server's own parsers, as core's are. Skipped at load
//! on a server that has core's GCRA (see `server::dialects`).

use super::limit;
use super::memo::Memo;
use super::parse::prefix;
use crate::server::{Arg, Command, DialectError, Keys, Origin, Reply, RlError, Spec, StateKey, FAST_WRITE};
use crate::stats::CommandStats;
use ratelimit_core::dialect::gcra::{self, Numbers, Parsed};
use ratelimit_core::kind::LimiterKind;
use redis_module::Context;

/// Its counters in INFO ratelimit (`gcra_allowed`, ...).
static STATS: CommandStats = CommandStats::new("gcra");

pub struct Gcra;

/// The last parameters parsed.
static LAST: Memo<gcra::Gcra> = Memo::new();

impl Command for Gcra {
    const SPEC: Spec =
        Spec::limiter(c"gcra", FAST_WRITE, Keys::FIRST, &STATS).with_origin(Origin::DialectUnlessBuiltIn);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let (key, rest) = match args.split_first() {
            Some((key, rest)) if (3..=5).contains(&rest.len()) => (key, rest),
            _ => return Err(RlError::WrongArity),
        };
        let (bytes, _) = prefix::<5>(rest);
        let text = |t: &'static str| RlError::Dialect(DialectError::Text(t));
        let params = &bytes[..rest.len()];
        let request = LAST.get_or(params, || {
            let parsed = Parsed::parse(params, &ServerNumbers(rest)).map_err(text)?;
            // Core checks the key's type before its overflow errors.
            parsed.bucket().map_err(|overflow| wrong_type(ctx, key).unwrap_or_else(|| text(overflow)))
        })?;
        let reply = limit::decide(ctx, key, &request.bucket, request.tokens).map_err(|e| match e {
            // A string that is not a bucket is "another type" to core's GCRA.
            RlError::BadState => RlError::WrongType,
            other => other,
        })?;
        Ok(limit::dialect(reply, gcra::reply))
    }
}

/// WRONGTYPE when `key` holds anything but a token bucket (a string that is not one is another type to
/// core's GCRA).
fn wrong_type(ctx: &Context, key: &Arg) -> Option<RlError> {
    let state = match StateKey::open(ctx, key) {
        Ok(state) => state,
        Err(e) => return Some(e),
    };
    match state.read() {
        Ok(Some(bytes)) if LimiterKind::of(bytes) != Some(LimiterKind::TokenBucket) => {
            Some(RlError::WrongType)
        }
        _ => None,
    }
}

/// The server's parsers over the arguments after the key.
struct ServerNumbers<'a>(&'a [Arg]);

impl Numbers for ServerNumbers<'_> {
    fn long_long(&self, i: usize) -> Option<i64> {
        self.0.get(i)?.long_long()
    }

    fn double(&self, i: usize) -> Option<f64> {
        self.0.get(i)?.double()
    }
}
