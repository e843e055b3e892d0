//! RL.INSPECT key [p1 p2]: what a limiter key holds, without touching it (flag `readonly`: allowed on
//! replicas and for read-only ACL users; writes and replicates nothing). Null when the key does not
//! exist (a full bucket, an empty window).
//!
//! Always: `limiter` (which command wrote it), `ttl_ms`, and the decoded state:
//! - token bucket: `tat_ms` (Unix ms at which it is full again) and `backlog_ms`;
//! - fixed window: `count`, `window_ends_at_ms`;
//! - sliding counter: `window_index`, `current`, `previous`;
//! - sliding log: `recorded` (entries kept), `slots`, `dedup`, `oldest_ms`, `newest_ms` (Unix ms).
//!
//! Given the limiter's parameters (`capacity rate` for a bucket, `limit window` for the windows), also
//! what a request would meet now: `remaining` (units available), `retry_after_ms` (until one unit is
//! available; 0 now) and `reset_after_ms`, computed as the commands compute them.

use super::arg::Arg;
use super::args::{whole, window};
use super::counting::Counting;
use super::error::RlError;
use super::registry::{Command, KeySpec};
use super::reply::{Reply, Value};
use super::store::StateKey;
use super::{clock, token};
use ratelimit_core::fixed_window::{FixedWindow, WindowState};
use ratelimit_core::sliding_counter::{CounterState, SlidingCounter};
use ratelimit_core::sliding_log::{Log, RequestId, SlidingLog, Width, MAX_LIMIT};
use ratelimit_core::time::{ceil_ms, Nanos, NANOS_PER_MS};
use ratelimit_core::verdict::Verdict;
use redis_module::Context;

pub struct Inspect;

type Fields = Vec<(&'static str, Value)>;

impl Command for Inspect {
    const KEYS: KeySpec = KeySpec::FIRST;

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let (name, params) = match args {
            [name] => (name, None),
            [name, p1, p2] => (name, Some((p1, p2))),
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
        let mut fields: Fields = vec![];
        let peek = if let Ok(log) = Log::parse(bytes) {
            describe_log(&mut fields, &log);
            params.map(|(l, w)| peek_log(log, l, w, now)).transpose()?
        } else {
            match bytes.len() {
                8 => {
                    let tat = token::decode_tat(bytes)?;
                    fields.push(("limiter", Value::Status("RL.TOKEN")));
                    fields.push(("tat_ms", Value::Int(ceil_ms(tat))));
                    fields.push(("backlog_ms", Value::Int(ceil_ms(tat - now))));
                    params
                        .map(|(c, r)| {
                            let bucket = token::parse_bucket(c, r)?;
                            Ok::<_, RlError>((
                                bucket.decide(Some(tat), now, 0).verdict,
                                bucket.decide(Some(tat), now, 1).verdict,
                            ))
                        })
                        .transpose()?
                }
                16 => {
                    let state = FixedWindow::decode(bytes).ok_or(RlError::BadState)?;
                    fields.push(("limiter", Value::Status("RL.FIXED")));
                    fields.push(("count", Value::Int(clamp(state.count))));
                    fields.push(("window_ends_at_ms", Value::Int(ceil_ms(state.ends_at))));
                    params
                        .map(|(l, w)| peek_counting::<FixedWindow, WindowState>(state, l, w, now))
                        .transpose()?
                }
                24 => {
                    let state = SlidingCounter::decode(bytes).ok_or(RlError::BadState)?;
                    fields.push(("limiter", Value::Status("RL.SLIDECOUNT")));
                    fields.push(("window_index", Value::Int(clamp(state.window))));
                    fields.push(("current", Value::Int(clamp(state.current))));
                    fields.push(("previous", Value::Int(clamp(state.previous))));
                    params
                        .map(|(l, w)| peek_counting::<SlidingCounter, CounterState>(state, l, w, now))
                        .transpose()?
                }
                _ => return Err(RlError::BadState),
            }
        };
        fields.push(("ttl_ms", Value::Int(ttl_ms)));
        if let Some((now_verdict, one_unit)) = peek {
            fields.push(("remaining", Value::Int(clamp(now_verdict.remaining))));
            fields.push(("retry_after_ms", Value::Int(one_unit.retry_after_ns.map_or(-1, ceil_ms))));
            fields.push(("reset_after_ms", Value::Int(ceil_ms(now_verdict.reset_after_ns))));
        }
        Ok(Reply::Value(Value::Map(fields)))
    }
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The verdicts of a peek and of a one-unit request, from a window limiter's arguments.
fn peek_counting<L: Counting<State = S>, S: Copy>(
    state: S,
    limit: &Arg,
    window_arg: &Arg,
    now: Nanos,
) -> Result<(Verdict, Verdict), RlError> {
    let limit = whole(limit.bytes(), "limit", 1, "must be a whole number >= 1")?;
    let limiter = L::new(limit, window(window_arg.bytes())?)
        .ok_or(RlError::invalid("limit", "must be a whole number >= 1"))?;
    Ok((limiter.decide(Some(state), now, 0).0, limiter.decide(Some(state), now, 1).0))
}

fn describe_log(fields: &mut Fields, log: &Log<'_>) {
    let (mut recorded, mut oldest, mut newest) = (0u64, None, None);
    for ts in log.recorded() {
        recorded += 1;
        oldest.get_or_insert(ts);
        newest = Some(ts);
    }
    let ms = |us: Option<u64>| us.map_or(Value::Null, |us| Value::Int(clamp(us.div_ceil(1000))));
    fields.push(("limiter", Value::Status("RL.SLIDE")));
    fields.push(("recorded", Value::Int(clamp(recorded))));
    fields.push(("slots", Value::Int(clamp(log.slots() as u64))));
    fields.push(("dedup", Value::Int(i64::from(log.width() == Width::WithIds))));
    fields.push(("oldest_ms", ms(oldest)));
    fields.push(("newest_ms", ms(newest)));
}

/// A sliding log's state as a request would meet it now: the decision is computed and its write
/// discarded.
fn peek_log(log: Log<'_>, limit: &Arg, window_arg: &Arg, now: Nanos) -> Result<(Verdict, Verdict), RlError> {
    let limit = whole(limit.bytes(), "limit", 1, "must be a whole number from 1 to 1000000")?;
    if limit > MAX_LIMIT {
        return Err(RlError::invalid("limit", "must be a whole number from 1 to 1000000"));
    }
    let window_us = (window(window_arg.bytes())? / 1000) as u64;
    let sliding =
        SlidingLog::new(limit, window_us).ok_or(RlError::invalid("limit", "must be a whole number >= 1"))?;
    let now_us = (now.max(0) / 1000) as u64;
    let one = sliding.decide(Some(log), now_us, RequestId { hash: 0, dedup: false }).verdict;
    // Before this hypothetical request: one more unit left, and the window empties with its newest entry.
    let newest = log.recorded().last().unwrap_or(0);
    let before = Verdict {
        remaining: if one.allowed { one.remaining + 1 } else { one.remaining },
        reset_after_ns: (newest.saturating_add(window_us).saturating_sub(now_us) as Nanos)
            .saturating_mul(1000),
        ..one
    };
    Ok((before, one))
}
