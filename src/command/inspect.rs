//! RL.INSPECT key [p1 p2 [p3]]: what a limiter key holds, without touching it (flag `readonly`: allowed on
//! replicas and for read-only ACL users; writes and replicates nothing). Null when the key does not
//! exist (a full bucket, an empty window).
//!
//! Always: `limiter` (which command wrote it, from the value's tag), the fields the limiter describes
//! (see each `Limiter::describe`), and `ttl_ms`. Given the limiter's parameters (`capacity rate` for a
//! bucket, `limit window` for the windows, `max_burst count_per_period period` for a CL.THROTTLE key), also what a request would meet now: `remaining` (units
//! available), `retry_after_ms` (until one unit is available; 0 now) and `reset_after_ms`, computed as
//! the commands compute them.

use super::parse::{whole, window_limiter};
use super::{acquire, slide, token};
use crate::server::{clock, Acl, Arg, Command, Keys, Reply, RlError, Spec, StateKey, Value};
use ratelimit_core::dialect::cell::Throttle;
use ratelimit_core::fixed_window::FixedWindow;
use ratelimit_core::format::Kind;
use ratelimit_core::leases::{Leases, LIMIT as LEASE_LIMIT};
use ratelimit_core::limiter::{Limiter, Peek};
use ratelimit_core::sliding_counter::SlidingCounter;
use ratelimit_core::sliding_log::SlidingLog;
use ratelimit_core::time::{ceil_ms, Nanos, NANOS_PER_MS};
use ratelimit_core::token_bucket::TokenBucket;
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
        let kind = Kind::of(bytes).ok_or(RlError::BadState)?;
        // The limiter's parameters (`p1 p2` after the key), parsed as its command parses them.
        let (fields, peek) = match kind {
            Kind::TokenBucket => inspect::<TokenBucket>(bytes, now, params, two(token::parse_bucket))?,
            Kind::FixedWindow => inspect::<FixedWindow>(bytes, now, params, two(window_limiter))?,
            Kind::SlidingCounter => inspect::<SlidingCounter>(bytes, now, params, two(window_limiter))?,
            Kind::SlidingLog => inspect::<SlidingLog>(bytes, now, params, two(slide::parse_log))?,
            Kind::Leases => inspect::<Leases>(
                bytes,
                now,
                params,
                two(|limit, lease| {
                    let limit = whole(limit.bytes(), LEASE_LIMIT.field, 1, LEASE_LIMIT.expected)?;
                    Ok(Leases::new(limit, acquire::lease_ns(lease)?)?)
                }),
            )?,
            // `max_burst count_per_period period`, as CL.THROTTLE takes them.
            Kind::Throttle => inspect::<Throttle>(bytes, now, params, |params| {
                let [burst, count, period] = params else { return Err(RlError::WrongArity) };
                let (burst, count, period) = (burst.bytes(), count.bytes(), period.bytes());
                Throttle::parse(&[burst, count, period])
                    .map_err(|e| e.param().map_or(RlError::WrongArity, RlError::from))
            })?,
        };
        let mut map = vec![("limiter", Value::Status(kind.command()))];
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

type Described = (Vec<ratelimit_core::limiter::Field>, Option<Peek>);

/// The state's fields, and, given parameters, the peek of the limiter they build.
fn inspect<L: Limiter>(
    bytes: &[u8],
    now: Nanos,
    params: Option<&[Arg]>,
    build: impl FnOnce(&[Arg]) -> Result<L, RlError>,
) -> Result<Described, RlError> {
    let fields = L::describe(bytes, now)?;
    let peek = params.map(|p| build(p)?.peek(Some(bytes), now).map_err(RlError::from)).transpose()?;
    Ok((fields, peek))
}

/// A limiter built from two parameters.
fn two<L>(build: impl FnOnce(&Arg, &Arg) -> Result<L, RlError>) -> impl FnOnce(&[Arg]) -> Result<L, RlError> {
    move |params| match params {
        [p1, p2] => build(p1, p2),
        _ => Err(RlError::WrongArity),
    }
}
