//! What commands reply. Every RL.* limiter replies `[allowed, limit, remaining, retry_after_ms,
//! reset_after_ms]`, plus, for a call over several limiters, the 1-based position of the one the reply
//! describes. Reporting commands (RL.TOP, RL.INSPECT) reply with maps: RESP3 maps for clients that
//! speak RESP3, flat field/value arrays for RESP2 (the server converts).

use ratelimit_core::time::ceil_ms;
use ratelimit_core::verdict::Verdict;
use redis_module::{raw, Context};
use std::os::raw::{c_char, c_long};

pub enum Reply {
    Limit {
        verdict: Verdict,
        limiting: Option<usize>,
    },
    /// RL.TAKE: the five fields and the number of units taken.
    Taken {
        verdict: Verdict,
        taken: u64,
    },
    /// A dialect's five integers (CL.THROTTLE, GCRA), and the verdict they came from (statistics).
    Dialect {
        verdict: Verdict,
        fields: [i64; 5],
    },
    Value(Value),
}

/// A reply value of the reporting commands.
pub enum Value {
    Int(i64),
    Bytes(Vec<u8>),
    Status(&'static str),
    Null,
    Array(Vec<Value>),
    Map(Vec<(&'static str, Value)>),
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The five fields, and a sixth when there is one.
fn send_limit(ctx: &Context, verdict: &Verdict, sixth: Option<i64>) {
    Value::array_header(ctx, if sixth.is_some() { 6 } else { 5 });
    Value::int(ctx, i64::from(verdict.allowed));
    Value::int(ctx, clamp(verdict.limit));
    Value::int(ctx, clamp(verdict.remaining));
    Value::int(ctx, verdict.retry_after_ns.map_or(-1, ceil_ms));
    Value::int(ctx, ceil_ms(verdict.reset_after_ns));
    if let Some(n) = sixth {
        Value::int(ctx, n);
    }
}

impl Reply {
    pub fn send(self, ctx: &Context) {
        match self {
            // Straight to the server, no intermediate values: this is every limiter call's reply.
            Reply::Limit { verdict, limiting } => {
                send_limit(ctx, &verdict, limiting.map(|index| clamp(index as u64 + 1)))
            }
            Reply::Taken { verdict, taken } => send_limit(ctx, &verdict, Some(clamp(taken))),
            Reply::Dialect { fields, .. } => {
                Value::array_header(ctx, fields.len());
                fields.iter().for_each(|&n| Value::int(ctx, n));
            }
            Reply::Value(value) => value.send(ctx),
        }
    }
}

impl Value {
    fn int(ctx: &Context, n: i64) {
        // SAFETY: a reply function of the server, called with the command's own context.
        unsafe {
            if let Some(int) = raw::RedisModule_ReplyWithLongLong {
                int(ctx.ctx, n);
            }
        }
    }

    fn array_header(ctx: &Context, len: usize) {
        // SAFETY: as above.
        unsafe {
            if let Some(array) = raw::RedisModule_ReplyWithArray {
                array(ctx.ctx, len as c_long);
            }
        }
    }

    fn send(&self, ctx: &Context) {
        // SAFETY: reply functions of the server, called with the command's own context; buffers are
        // copied by the server during each call.
        unsafe {
            let c = ctx.ctx;
            match self {
                Value::Int(n) => Value::int(ctx, *n),
                Value::Bytes(b) => {
                    if let Some(buffer) = raw::RedisModule_ReplyWithStringBuffer {
                        buffer(c, b.as_ptr().cast::<c_char>(), b.len());
                    }
                }
                Value::Status(s) => {
                    if let (Some(simple), Ok(text)) =
                        (raw::RedisModule_ReplyWithSimpleString, std::ffi::CString::new(*s))
                    {
                        simple(c, text.as_ptr());
                    }
                }
                Value::Null => {
                    if let Some(null) = raw::RedisModule_ReplyWithNull {
                        null(c);
                    }
                }
                Value::Array(items) => {
                    Value::array_header(ctx, items.len());
                    items.iter().for_each(|v| v.send(ctx));
                }
                Value::Map(pairs) => {
                    // RedisModule_ReplyWithMap replies a flat array to RESP2 clients by itself.
                    let (with_map, with_array) =
                        (raw::RedisModule_ReplyWithMap, raw::RedisModule_ReplyWithArray);
                    match (with_map, with_array) {
                        (Some(map), _) => map(c, pairs.len() as c_long),
                        (None, Some(array)) => array(c, (pairs.len() * 2) as c_long),
                        (None, None) => return,
                    };
                    for (name, value) in pairs {
                        Value::Status(name).send(ctx);
                        value.send(ctx);
                    }
                }
            }
        }
    }
}
