//! The module's errors, and the one place that turns them into reply strings. Every reply string
//! starts with an error code (`ERR`, `WRONGTYPE`), as clients expect.

use ratelimit_core::error::{ParamError, StateError};
use redis_module::{raw, Context};
use std::ffi::CString;

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
    /// A dialect's own error text, to the letter (it starts with its code: `ERR`, or redis-cell's
    /// `Cell error:`).
    Dialect(String),
}

impl RlError {
    pub fn invalid(arg: &'static str, expected: &'static str) -> RlError {
        RlError::InvalidArg { arg, expected }
    }
}

impl From<ParamError> for RlError {
    fn from(e: ParamError) -> RlError {
        RlError::InvalidArg { arg: e.field, expected: e.expected }
    }
}

impl From<StateError> for RlError {
    fn from(_: StateError) -> RlError {
        RlError::BadState
    }
}

impl RlError {
    /// The reply string, starting with its error code.
    pub fn message(&self) -> String {
        match self {
            RlError::WrongArity => "ERR wrong number of arguments".to_string(),
            RlError::WrongType => {
                "WRONGTYPE Operation against a key holding the wrong kind of value".to_string()
            }
            RlError::InvalidArg { arg, expected } => format!("ERR invalid {arg}: {expected}"),
            RlError::DuplicateKey => "ERR the same key appears more than once".to_string(),
            RlError::Syntax => "ERR syntax error".to_string(),
            RlError::BadState => "ERR the key holds a value that is not this limiter's state".to_string(),
            RlError::Internal(what) => format!("ERR internal error: {what}"),
            RlError::Dialect(text) => text.clone(),
        }
    }

    /// Sends the error as the command's reply: Redis' own arity message for WrongArity.
    pub fn send(&self, ctx: &Context) {
        // SAFETY: reply functions of the server, called with the command's own context; the message
        // is a NUL-terminated copy that outlives the call.
        unsafe {
            if let (RlError::WrongArity, Some(wrong_arity)) = (self, raw::RedisModule_WrongArity) {
                wrong_arity(ctx.ctx);
                return;
            }
            let text = self.message().replace(['\r', '\n', '\0'], " ");
            let message = CString::new(text).unwrap_or_default();
            if let Some(reply_error) = raw::RedisModule_ReplyWithError {
                reply_error(ctx.ctx, message.as_ptr());
            }
        }
    }
}
