//! CL.THROTTLE key max_burst count_per_period period [quantity]
//!
//! redis-cell's command, as it replies and words its errors (see `ratelimit_core::dialect::cell`), on
//! the token bucket. Its keys keep redis-cell's stored format. Where redis-cell would crash the server
//! (a key of another type, a value that is not a TAT), it answers as Dragonfly does: WRONGTYPE, or
//! `ERR value is not an integer or out of range`.

use super::limit;
use super::memo::Memo;
use super::parse::prefix;
use crate::server::{Arg, Command, DialectError, Keys, Origin, Reply, RlError, Spec, FAST_WRITE};
use crate::stats::CommandStats;
use ratelimit_core::dialect::cell::{self, Throttle, ThrottleError};
use redis_module::Context;

/// Its counters in INFO ratelimit (`cl_throttle_allowed`, ...).
static STATS: CommandStats = CommandStats::new("cl_throttle");

pub struct ClThrottle;

impl Command for ClThrottle {
    const SPEC: Spec =
        Spec::limiter(c"cl.throttle", FAST_WRITE, Keys::FIRST, &STATS).with_origin(Origin::Dialect);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        throttle(ctx, args, |e| RlError::Dialect(DialectError::Cell(Box::new(e))))
    }
}

/// The last parameters parsed (either name).
static LAST: Memo<Throttle> = Memo::new();

/// The command's body, for either name: `error` words its errors.
pub fn throttle(
    ctx: &Context,
    args: &[Arg],
    error: impl Fn(ThrottleError) -> RlError,
) -> Result<Reply, RlError> {
    let (key, rest) = match args.split_first() {
        Some((key, rest)) if rest.len() <= 4 => (key, rest),
        _ => return Err(error(ThrottleError::Usage)),
    };
    let (bytes, _) = prefix::<4>(rest);
    let params = &bytes[..rest.len()];
    let throttle = LAST.get_or(params, || Throttle::parse(params)).map_err(error)?;
    let reply = limit::decide(ctx, key, &throttle, throttle.quantity).map_err(|e| match e {
        RlError::BadState => {
            RlError::Dialect(DialectError::Text("ERR value is not an integer or out of range"))
        }
        other => other,
    })?;
    Ok(limit::dialect(reply, cell::reply))
}
