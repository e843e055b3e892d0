//! The module's errors, and the one place that turns them into reply strings. Every reply string
//! starts with an error code (`ERR`, `WRONGTYPE`), as clients expect.

use ratelimit_core::args::ArgError;
use ratelimit_core::dialect::cell::ThrottleError;
use ratelimit_core::error::{self, ParamError, StateError};
use redis_module::{raw, Context};
use std::ffi::CString;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RlError {
    /// Wrong number of arguments: Redis' standard arity error.
    WrongArity,
    /// The key holds a value of another type.
    WrongType,
    /// An argument is malformed or out of range; `expected` says what it must be.
    InvalidArg { arg: &'static str, expected: &'static str },
    /// The same key is named twice in one call.
    DuplicateKey,
    /// An option or subcommand that the command does not know.
    Syntax,
    /// The key is a string, but not one that this limiter wrote.
    BadState,
    /// A bug: a panic caught at the FFI boundary, or an API missing from the server.
    Internal(&'static str),
    /// A dialect's own error, worded to the letter.
    Dialect(DialectError),
}

/// A dialect's error, in its own words (it starts with its code: `ERR`, or redis-cell's
/// `Cell error:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DialectError {
    /// redis-cell's (CL.THROTTLE).
    Cell(Box<ThrottleError>),
    /// A fixed text (core's GCRA, Dragonfly's answers).
    Text(&'static str),
}

impl From<ParamError> for RlError {
    fn from(e: ParamError) -> RlError {
        RlError::InvalidArg { arg: e.field, expected: e.expected }
    }
}

impl From<ArgError> for RlError {
    fn from(e: ArgError) -> RlError {
        match e {
            ArgError::WrongArity => RlError::WrongArity,
            ArgError::Syntax => RlError::Syntax,
            ArgError::Invalid(p) => p.into(),
        }
    }
}

impl From<StateError> for RlError {
    fn from(_: StateError) -> RlError {
        RlError::BadState
    }
}

/// The reply string, starting with its error code.
impl fmt::Display for RlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RlError::WrongArity => f.write_str(error::WRONG_ARITY),
            RlError::WrongType => f.write_str(error::WRONG_TYPE),
            RlError::InvalidArg { arg, expected } => write!(f, "ERR invalid {arg}: {expected}"),
            RlError::DuplicateKey => f.write_str(error::DUPLICATE_KEY),
            RlError::Syntax => f.write_str(error::SYNTAX),
            RlError::BadState => write!(f, "ERR {StateError}"),
            RlError::Internal(what) => write!(f, "ERR internal error: {what}"),
            RlError::Dialect(DialectError::Cell(e)) => e.fmt(f),
            RlError::Dialect(DialectError::Text(text)) => f.write_str(text),
        }
    }
}

impl std::error::Error for RlError {}

impl RlError {
    /// Sends the error as the command's reply: Redis' own arity message for WrongArity.
    pub fn send(&self, ctx: &Context) {
        // SAFETY: reply functions of the server, called with the command's own context; the message
        // is a NUL-terminated copy that outlives the call.
        unsafe {
            if let (RlError::WrongArity, Some(wrong_arity)) = (self, raw::RedisModule_WrongArity) {
                wrong_arity(ctx.ctx);
                return;
            }
            let text = self.to_string().replace(['\r', '\n', '\0'], " ");
            let message = CString::new(text).unwrap_or_default();
            if let Some(reply_error) = raw::RedisModule_ReplyWithError {
                reply_error(ctx.ctx, message.as_ptr());
            }
        }
    }
}
