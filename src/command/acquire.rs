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
use super::parse::{bytes, split};
use crate::server::{Arg, Command, Keys, Reply, RlError, Spec};
use crate::stats::CommandStats;
use ratelimit_core::kind::{Declare, RequestArgs};
use ratelimit_core::leases::{self, Acquire, LeaseId, Leases};
use redis_module::Context;

/// Its counters in INFO ratelimit (`acquire_allowed`, `acquire_denied`, `acquire_errors`).
static STATS: CommandStats = CommandStats::new("acquire");

pub struct AcquireLease;

impl Command for AcquireLease {
    // Not "fast": the write is proportional to the leases held.
    const SPEC: Spec = Spec::limiter(c"rl.acquire", c"write deny-oom", Keys::FIRST, &STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let ([key, limit, lease], rest) = split::<3>(args)?;
        let (request, n) = bytes::<4>(rest).ok_or(RlError::WrongArity)?;
        let request = <Leases as Declare>::REQUEST.parse_whole(&request[..n])?;
        let (leases, acquire) = parse(limit, lease, request)?;
        limit::decide(ctx, key, &leases, acquire)
    }
}

/// `limit lease` and the request `id [WEIGHT w]` (RL.ACQUIRE's): the weight is checked first.
fn parse(limit: &Arg, lease: &Arg, request: RequestArgs<'_>) -> Result<(Leases, Acquire), RlError> {
    Leases::precheck(request)?;
    let leases = LAST_LEASES.get_or(&[limit.bytes(), lease.bytes()], || {
        Ok::<_, RlError>(Leases::parse([limit.bytes(), lease.bytes()])?)
    })?;
    Ok((leases, leases.request(request, no_ids)?))
}

/// Leases hash their holders' ids themselves.
fn no_ids(_: &[u8]) -> u64 {
    0
}

/// The last lease parameters parsed.
static LAST_LEASES: Memo<Leases> = Memo::new();

/// A lease length: like a window, with the field named `lease`.
pub fn lease_ns(lease: &Arg) -> Result<i64, RlError> {
    Ok(leases::lease_ns(lease.bytes())?)
}

/// A holder's id: binary-safe, not empty.
pub fn lease_id(id: &Arg) -> Result<LeaseId, RlError> {
    Ok(leases::holder(id.bytes())?)
}
