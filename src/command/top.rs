//! RL.TOP [count]: the most denied keys right now, from the heavy-hitters summary (see
//! `stats::heavy`), most first. Each entry: `key`, `denied` (count, an overestimate by at most
//! `error`), `error`, `first_denied_ms` (Unix ms: when the summary began tracking the key),
//! `last_denied_ms`, and `denied_for_ms` (from first to last: a client denied for a long time is
//! usually stuck in a retry loop). A map per entry for RESP3 clients, a flat field/value array for RESP2.

use crate::server::{observed, Acl, Arg, Command, Reply, RlError, Spec, Value};
use ratelimit_core::args::whole;
use redis_module::Context;

pub struct Top;

impl Command for Top {
    const SPEC: Spec = Spec::other(c"rl.top", c"readonly", Acl::Read);

    fn run(_ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let count = match args {
            [] => usize::MAX,
            [n] => usize::try_from(whole(n.bytes(), "count", 1, "must be a whole number >= 1")?)
                .unwrap_or(usize::MAX),
            _ => return Err(RlError::WrongArity),
        };
        let top = observed::read(|o| o.denied.top(count)).unwrap_or_default();
        let entries = top
            .into_iter()
            .map(|e| {
                Value::Map(vec![
                    ("key", Value::Bytes(e.key.into_vec())),
                    ("denied", Value::Int(i64::try_from(e.count).unwrap_or(i64::MAX))),
                    ("error", Value::Int(i64::try_from(e.error).unwrap_or(i64::MAX))),
                    ("first_denied_ms", Value::Int(e.first_ms)),
                    ("last_denied_ms", Value::Int(e.last_ms)),
                    ("denied_for_ms", Value::Int(e.last_ms.saturating_sub(e.first_ms))),
                ])
            })
            .collect();
        Ok(Reply::Value(Value::Array(entries)))
    }
}
