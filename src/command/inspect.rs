//! RL.INSPECT key [p1 p2 [p3]]: what a limiter key holds, without touching it (flag `readonly`: allowed on
//! replicas and for read-only ACL users; writes and replicates nothing). Null when the key does not
//! exist (a full bucket, an empty window).
//!
//! Always: `limiter` (which command wrote it, from the value's layout), the fields the limiter
//! describes (see each `Limiter::describe`), and `ttl_ms`. Given the limiter's two parameters, as its
//! command takes them (`capacity rate` for a bucket, `limit window` for the windows, `limit lease`
//! for leases; `max_burst count_per_period period` for a CL.THROTTLE key), also what a request would
//! meet now: `remaining` (units available), `retry_after_ms` (until one unit is available; 0 now)
//! and `reset_after_ms`, computed as the commands compute them.

use crate::server::{clock, Acl, Arg, Command, Keys, Reply, RlError, Spec, StateKey, Value};
use ratelimit_core::dialect::cell::Throttle;
use ratelimit_core::format::Layout;
use ratelimit_core::kind::{AnyLimiter, LimiterKind};
use ratelimit_core::limiter::{Field, Limiter, Peek};
use ratelimit_core::time::{ceil_ms, NANOS_PER_MS};
use redis_module::Context;

pub struct Inspect;

impl Command for Inspect {
    // Reporting: read-only (replicas and read-only users may call it), no key writes.
    const SPEC: Spec = Spec::other(c"rl.inspect", c"readonly fast", Acl::Read).with_keys(Keys::FIRST);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        // Two parameters for every limiter; three for a CL.THROTTLE key.
        let (name, params) = match args {
            [name] => (name, None),
            [name, params @ ..] if (2..=3).contains(&params.len()) => (name, Some(params)),
            _ => return Err(RlError::WrongArity),
        };
        let now = clock::now_ns();
        let Some(key) = StateKey::open_read(ctx, name)? else {
            return Ok(Reply::Value(Value::Null));
        };
        let Some(bytes) = key.read()? else {
            return Ok(Reply::Value(Value::Null));
        };
        let ttl_ms = key.expire_at_ms()?.map_or(-1, |at| (at - now / NANOS_PER_MS).max(0));
        let params: Option<Vec<&[u8]>> = params.map(|p| p.iter().map(Arg::bytes).collect());
        let (command, fields, peek): (&'static str, Vec<Field>, Option<Peek>) = match LimiterKind::of(bytes) {
            Some(kind) => {
                let peek = match params.as_deref() {
                    Some(&[p1, p2]) => Some(AnyLimiter::parse(kind, [p1, p2])?.peek(Some(bytes), now)?),
                    Some(_) => return Err(RlError::WrongArity),
                    None => None,
                };
                (kind.command(), kind.describe(bytes, now)?, peek)
            }
            // redis-cell's decimal TAT: `max_burst count_per_period period`, as CL.THROTTLE takes them.
            None if Layout::of(bytes) == Some(Layout::DecimalTat) => {
                let peek = params
                    .map(|p| {
                        let throttle = Throttle::parse(&p)
                            .map_err(|e| e.param().map_or(RlError::WrongArity, RlError::from))?;
                        Ok::<_, RlError>(throttle.peek(Some(bytes), now)?)
                    })
                    .transpose()?;
                ("CL.THROTTLE", Throttle::describe(bytes, now)?, peek)
            }
            None => return Err(RlError::BadState),
        };
        let mut map = vec![("limiter", Value::Status(command))];
        map.extend(fields.into_iter().map(|(name, v)| (name, v.map_or(Value::Null, Value::Int))));
        map.push(("ttl_ms", Value::Int(ttl_ms)));
        if let Some(Peek { now, one }) = peek {
            map.push(("remaining", Value::Int(i64::try_from(now.remaining).unwrap_or(i64::MAX))));
            map.push(("retry_after_ms", Value::Int(one.retry_after_ns.map_or(-1, ceil_ms))));
            map.push(("reset_after_ms", Value::Int(ceil_ms(now.reset_after_ns))));
        }
        Ok(Reply::Value(Value::Map(map)))
    }
}
