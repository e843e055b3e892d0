//! Why a limiter cannot be built or a stored value cannot be read. Both name what is wrong, implement
//! `Display` and `std::error::Error`, and map one to one onto the module's error replies and the
//! client's policy errors.

use std::fmt;

/// A limiter parameter that is out of range: `field` names it, `expected` says what it must be.
/// Displays as `invalid <field>: <expected>`, the text of the module's error reply after `ERR `.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamError {
    pub field: &'static str,
    pub expected: &'static str,
}

impl ParamError {
    pub const fn new(field: &'static str, expected: &'static str) -> ParamError {
        ParamError { field, expected }
    }
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.field, self.expected)
    }
}

impl std::error::Error for ParamError {}

/// The stored bytes are not a state this limiter wrote (another limiter's, or foreign data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateError;

/// The module's error replies that are not a parameter's, each written once: the module
/// (`src/server/error.rs`) sends them and the contract's generator reads them.
pub const WRONG_ARITY: &str = "ERR wrong number of arguments";
/// A key that holds another Redis type (Redis' own text).
pub const WRONG_TYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
/// A key given twice in one call.
pub const DUPLICATE_KEY: &str = "ERR the same key appears more than once";
/// An unknown option or kind.
pub const SYNTAX: &str = "ERR syntax error";

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the key holds a value that is not this limiter's state")
    }
}

impl std::error::Error for StateError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field_and_are_std_errors() {
        let e: Box<dyn std::error::Error> = Box::new(ParamError::new("rate", "must be a number > 0"));
        assert_eq!(e.to_string(), "invalid rate: must be a number > 0");
        let s: Box<dyn std::error::Error> = Box::new(StateError);
        assert!(s.to_string().contains("not this limiter's state"));
    }
}
