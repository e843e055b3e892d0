//! RL.ALL key KIND args [key KIND args ...]
//!
//! Several limits of any kind in one atomic call: allowed only when every limit allows, and then
//! every one is taken; otherwise none is (see `ratelimit_core::combine`). Each group starts with its
//! key, so a client that routes an unknown command by its first argument sends it to the right node;
//! each key once; in a cluster every key must share a slot. A group is its key, a kind's group name
//! and that kind's command arguments (`ratelimit_core::kind`):
//!
//! - `TOKEN capacity rate cost` (RL.TOKEN's)
//! - `FIXED limit window cost`, `SLIDECOUNT limit window cost` (RL.FIXED's, RL.SLIDECOUNT's)
//! - `SLIDE limit window id [DEDUP]` (RL.SLIDE's; a key right after such a group cannot be `DEDUP`)
//! - `ACQUIRE limit lease id [WEIGHT w]` (RL.ACQUIRE's; a key right after such a group cannot be
//!   `WEIGHT`)
//!
//! The reply is always six fields: the most restrictive limit's five and its group's 1-based
//! position. The keys are declared as a function of the arguments (`getkeys-api`), so
//! `COMMAND GETKEYS` and cluster routing find every one.

use super::limit;
use super::memo::Memo;
use super::parse::prefix;
use super::slide::id_hash;
use crate::server::{Arg, Command, Keys, Reply, RlError, Spec};
use crate::stats::CommandStats;
use ratelimit_core::kind::{AnyLimit, AnyLimiter, LimiterKind};
use redis_module::Context;

/// Its counters in INFO ratelimit (`all_allowed`, `all_denied`, `all_errors`).
static STATS: CommandStats = CommandStats::new("all");

/// The last limiter parsed at each of the first group positions: most calls repeat them.
static LAST: [Memo<AnyLimiter>; 4] = [const { Memo::new() }; 4];

pub struct All;

impl Command for All {
    // Not "fast": a SLIDE group may rewrite its log.
    const SPEC: Spec = Spec::limiter(c"rl.all", c"write deny-oom", Keys::Function(key_index), &STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let (keys, limits) = groups(args, None)?;
        limit::decide_all(ctx, &keys, |i, stored, now| Ok(limits[i].decide(stored, now)?))
    }
}

/// RL.ALL's groups (also RL.HOLD's): each key and its limit, in order; each key once. `starts`, when
/// given, receives each group's index among `args` (its key's).
pub(super) fn groups<'a>(
    args: &'a [Arg],
    mut starts: Option<&mut Vec<usize>>,
) -> Result<(Vec<&'a Arg>, Vec<AnyLimit>), RlError> {
    let bytes: Vec<&[u8]> = args.iter().map(Arg::bytes).collect();
    let mut keys: Vec<&Arg> = Vec::new();
    let mut limits: Vec<AnyLimit> = Vec::new();
    let mut at = 0;
    while at < args.len() {
        let key = &args[at];
        let memo = LAST.get(keys.len());
        let build = |kind: LimiterKind, params: [&[u8]; 2]| match memo {
            Some(memo) => memo.get_or(&[kind.group().as_bytes(), params[0], params[1]], || {
                AnyLimiter::parse(kind, params)
            }),
            None => AnyLimiter::parse(kind, params),
        };
        let (limit, len) = AnyLimit::parse_group(&bytes[at + 1..], id_hash, &build)?;
        if keys.iter().any(|k| k.bytes() == key.bytes()) {
            return Err(RlError::DuplicateKey);
        }
        keys.push(key);
        limits.push(limit);
        if let Some(starts) = starts.as_deref_mut() {
            starts.push(at);
        }
        at += 1 + len;
    }
    if limits.is_empty() {
        return Err(RlError::WrongArity);
    }
    Ok((keys, limits))
}

/// The index of the `position`-th key: each group's first argument.
pub(super) fn key_index(args: &[Arg], position: usize) -> Option<usize> {
    let mut at = 0;
    for _ in 0..position {
        let kind = LimiterKind::from_group(args.get(at + 1)?.bytes())?;
        // The longest group after its kind is 5 arguments (`limit lease id WEIGHT w`): no allocation.
        let (rest, n) = prefix::<5>(args.get(at + 2..)?);
        at += 2 + kind.group_len(&rest[..n]);
    }
    (at < args.len()).then_some(at)
}
