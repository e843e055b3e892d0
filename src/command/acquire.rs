//! RL.ACQUIRE key limit lease id [WEIGHT w]
//!
//! A concurrency limit (see `ratelimit_core::leases`): allowed iff the leases held on `key` (neither
//! released nor expired) weigh, with this one, at most `limit` (1 to 100,000). An allowed request
//! records a lease for `id` that ends `lease` seconds from now (decimal, whole milliseconds); an id that
//! holds a lease already keeps its slot and its weight, and its lease is extended. Replies the five
//! fields: `remaining` is the weight still free, `retry_after_ms` (when denied) the time until enough
//! held leases will have expired were none released (an upper bound; -1 when `w > limit`), and
//! `reset_after_ms` the time until the last held lease ends.

use super::limit;
use super::memo::Memo;
use super::parse::{split, whole, window};
use crate::server::{Arg, Command, Keys, Reply, RlError, Spec};
use crate::stats::CommandStats;
use ratelimit_core::leases::{Acquire, LeaseId, Leases, LIMIT};
use redis_module::Context;

/// Its counters in INFO ratelimit (`acquire_allowed`, `acquire_denied`, `acquire_errors`).
static STATS: CommandStats = CommandStats::new("acquire");

pub struct AcquireLease;

impl Command for AcquireLease {
    // Not "fast": the write is proportional to the leases held.
    const SPEC: Spec = Spec::limiter(c"rl.acquire", c"write deny-oom", Keys::FIRST, &STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let ([key, limit, lease, id], rest) = split::<4>(args)?;
        let (leases, acquire) = parse(limit, lease, id, rest)?;
        limit::decide(ctx, key, &leases, acquire)
    }
}

/// `limit lease id [WEIGHT w]` (RL.ACQUIRE's, and an RL.ALL ACQUIRE group's).
pub fn parse(limit: &Arg, lease: &Arg, id: &Arg, options: &[Arg]) -> Result<(Leases, Acquire), RlError> {
    let weight = match options {
        [] => 1,
        [option, w] if option.bytes().eq_ignore_ascii_case(b"WEIGHT") => {
            Leases::weight(whole(w.bytes(), "weight", 1, ratelimit_core::leases::WEIGHT.expected)?)?
        }
        [_, _] => return Err(RlError::Syntax),
        _ => return Err(RlError::WrongArity),
    };
    let leases = LAST_LEASES.get_or(&[limit.bytes(), lease.bytes()], || {
        let limit = whole(limit.bytes(), LIMIT.field, 1, LIMIT.expected)?;
        Ok::<_, RlError>(Leases::new(limit, lease_ns(lease)?)?)
    })?;
    Ok((leases, Acquire { id: lease_id(id)?, weight }))
}

/// The last lease parameters parsed.
static LAST_LEASES: Memo<Leases> = Memo::new();

/// A lease length: like a window, with the field named `lease`.
pub fn lease_ns(lease: &Arg) -> Result<i64, RlError> {
    window(lease.bytes()).map_err(|_| RlError::from(ratelimit_core::leases::LEASE))
}

/// A holder's id: binary-safe, not empty.
pub fn lease_id(id: &Arg) -> Result<LeaseId, RlError> {
    if id.bytes().is_empty() {
        return Err(RlError::invalid("id", "must not be empty"));
    }
    Ok(LeaseId::of(id.bytes()))
}
