//! The Lua library (lua/ratelimit.lua) in tests: its source, the variant whose clock is an argument,
//! loading it, its EVALSHA scripts (lua/scripts/), and replies in one comparable form.

use std::collections::BTreeMap;
use std::path::Path;
use testkit::redis::{self, Connection, Value};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The library as shipped.
pub fn source() -> String {
    std::fs::read_to_string(root().join("lua/ratelimit.lua")).expect("lua/ratelimit.lua")
}

/// The library, or one of its EVALSHA scripts, with its one clock replaced (the function `clock`, from
/// its first line to the `end` at the first column): every function takes "now", Unix ns in decimal
/// digits (at least 10 of them), as its first argument, before the command's. It is read as the real
/// clock reads TIME (the seconds and the microseconds as text), plus the nanoseconds below the
/// microsecond, so that the tests hold that path too.
pub fn with_clock_argument(source: &str) -> String {
    const FIRST: &str = "local function clock(args)\n";
    let begin = source.find(FIRST).expect("the library's clock");
    let end = begin + source[begin..].find("\nend\n").expect("the clock's end") + "\nend\n".len();
    format!(
        "{}{FIRST}  -- (tests: now from the first argument)\n  \
         local now = table.remove(args, 1)\n  \
         return now:sub(1, -10), now:sub(-9, -4), now:sub(-3)\nend\n{}",
        &source[..begin],
        &source[end..]
    )
}

/// FUNCTION LOAD REPLACE.
pub fn load(con: &mut Connection, source: &str) {
    let name: String =
        redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(source).query(con).expect("FUNCTION LOAD");
    assert_eq!(name, "ratelimit");
}

/// The EVALSHA scripts as shipped (lua/scripts/<function>.lua), by function name.
pub fn scripts() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(root().join("lua/scripts")).expect("lua/scripts/") {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        out.insert(name, std::fs::read_to_string(&path).unwrap());
    }
    out
}

/// A reply in one comparable form (errors as "CODE detail").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    Nil,
    Status(String),
    Bulk(Vec<u8>),
    Array(Vec<Reply>),
    Error(String),
}

impl Reply {
    pub fn from(v: Value) -> Reply {
        match v {
            Value::Int(n) => Reply::Int(n),
            Value::Nil => Reply::Nil,
            Value::Okay => Reply::Status("OK".into()),
            Value::SimpleString(s) => Reply::Status(s),
            Value::BulkString(b) => Reply::Bulk(b),
            Value::Array(items) => Reply::Array(items.into_iter().map(Reply::from).collect()),
            Value::ServerError(e) => Reply::Error(
                format!("{} {}", e.code(), e.details().unwrap_or_default()).trim_end().to_string(),
            ),
            other => panic!("an unexpected reply: {other:?}"),
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// The integers of a limiter's reply.
    pub fn ints(&self) -> Vec<i64> {
        match self {
            Reply::Array(items) => items
                .iter()
                .map(|i| match i {
                    Reply::Int(n) => *n,
                    other => panic!("not an integer: {other:?}"),
                })
                .collect(),
            other => panic!("not a limiter's reply: {other:?}"),
        }
    }
}

/// The commands a pipeline sends, and their replies in the same form.
pub fn run(con: &mut Connection, pipe: &redis::Pipeline) -> Vec<Reply> {
    let values: Vec<Value> = pipe.query(con).expect("the pipeline failed");
    values.into_iter().map(Reply::from).collect()
}
