//! The command layer: parse, read state, decide with the pure algorithms, write and replicate the
//! effect, reply. One file per command; lib.rs registers the handlers below.

mod args;
mod clock;
mod error;
mod reply;
mod store;
mod token;

use error::RlError;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs a command body, turning its error into the reply and any panic into an error reply: a panic
/// that crossed the FFI boundary would kill the server.
fn guarded(
    ctx: &Context,
    args: Vec<RedisString>,
    body: fn(&Context, &[RedisString]) -> Result<RedisValue, RlError>,
) -> RedisResult {
    // args[0] is the command name.
    let args = args.get(1..).unwrap_or(&[]);
    match catch_unwind(AssertUnwindSafe(|| body(ctx, args))) {
        Ok(result) => result.map_err(RedisError::from),
        Err(_) => Err(RlError::Internal("the command panicked; please report it").into()),
    }
}

pub fn rl_token(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, args, token::token)
}
