//! The command layer's errors, and the one place that turns them into reply strings. Every reply
//! string starts with an error code (`ERR`, `WRONGTYPE`), as clients expect.

use redis_module::RedisError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RlError {
    /// Wrong number of arguments: Redis' standard arity error.
    WrongArity,
    /// The key holds a value of another type.
    WrongType,
    /// An argument is malformed or out of range; `expected` says what it must be.
    InvalidArg {
        arg: &'static str,
        expected: &'static str,
    },
    /// The same key is named twice in one call.
    DuplicateKey,
    /// An option name that the command does not know.
    Syntax,
    /// The key is a string, but not one that this limiter wrote.
    BadState,
    /// An error reply from the server to an internal call, passed on as it came.
    Server(String),
    /// A bug: a panic caught at the FFI boundary, or an API missing from the server.
    Internal(&'static str),
}

impl RlError {
    pub fn invalid(arg: &'static str, expected: &'static str) -> RlError {
        RlError::InvalidArg { arg, expected }
    }
}

impl From<RlError> for RedisError {
    fn from(err: RlError) -> RedisError {
        match err {
            RlError::WrongArity => RedisError::WrongArity,
            RlError::WrongType => RedisError::WrongType,
            RlError::InvalidArg { arg, expected } => {
                RedisError::String(format!("ERR invalid {arg}: {expected}"))
            }
            RlError::DuplicateKey => RedisError::Str("ERR the same key appears more than once"),
            RlError::Syntax => RedisError::Str("ERR syntax error"),
            RlError::BadState => {
                RedisError::Str("ERR the key holds a value that is not this limiter's state")
            }
            RlError::Server(message) => RedisError::String(message),
            RlError::Internal(what) => RedisError::String(format!("ERR internal error: {what}")),
        }
    }
}
