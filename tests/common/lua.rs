//! The Lua library (lua/ratelimit.lua) in tests: its source, the variant whose clock is an argument,
//! loading it, its EVALSHA scripts (made by scripts/lua-scripts.sh), and replies in one comparable form.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use testkit::redis::{self, Connection, Value};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The library as shipped.
pub fn source() -> String {
    std::fs::read_to_string(root().join("lua/ratelimit.lua")).expect("lua/ratelimit.lua")
}

/// The library with its one clock replaced (the block between `-- CLOCK BEGIN` and `-- CLOCK END`):
/// every function takes "now", Unix ns in decimal digits (at least 10 of them), as its first argument,
/// before the command's. It is read as the real clock reads TIME (the seconds and the microseconds as
/// text), plus the nanoseconds below the microsecond, so that the tests hold that path too.
pub fn with_clock_argument(source: &str) -> String {
    let begin = source.find("-- CLOCK BEGIN").expect("the library marks its clock");
    let end = source.find("-- CLOCK END").expect("the library marks its clock's end");
    format!(
        "{}-- CLOCK BEGIN (tests: now from the first argument)\nlocal function clock(args)\n  \
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

/// The EVALSHA scripts scripts/lua-scripts.sh makes, by function name.
pub fn scripts() -> BTreeMap<String, String> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "rl-lua-scripts-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let status = std::process::Command::new(root().join("scripts/lua-scripts.sh"))
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("scripts/lua-scripts.sh");
    assert!(status.success(), "scripts/lua-scripts.sh failed");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        out.insert(name, std::fs::read_to_string(&path).unwrap());
    }
    let _ = std::fs::remove_dir_all(&dir);
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
