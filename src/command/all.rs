//! RL.ALL key KIND args [key KIND args ...]
//!
//! Several limits of any kind in one atomic call: allowed only when every limit allows, and then
//! every one is taken; otherwise none is (see `ratelimit_core::combine`). Each group starts with its
//! key, so a client that routes an unknown command by its first argument sends it to the right node;
//! each key once; in a cluster every key must share a slot. The kinds and their arguments:
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

use super::parse::{cost, split, window_limiter};
use super::{acquire, limit, slide, token};
use crate::server::{Arg, Command, Keys, Reply, RlError, Spec};
use crate::stats::CommandStats;
use ratelimit_core::fixed_window::FixedWindow;
use ratelimit_core::leases::Leases;
use ratelimit_core::limiter::{Limiter, Outcome};
use ratelimit_core::sliding_counter::SlidingCounter;
use ratelimit_core::sliding_log::{RequestId, SlidingLog};
use ratelimit_core::time::Nanos;
use ratelimit_core::token_bucket::TokenBucket;
use redis_module::Context;

/// Its counters in INFO ratelimit (`all_allowed`, `all_denied`, `all_errors`).
static STATS: CommandStats = CommandStats::new("all");

pub struct All;

impl Command for All {
    // Not "fast": a SLIDE group may rewrite its log.
    const SPEC: Spec = Spec::limiter(c"rl.all", c"write deny-oom", Keys::Function(key_index), &STATS);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let mut groups = Vec::new();
        let mut rest = args;
        while !rest.is_empty() {
            let (group, after) = parse_group(rest)?;
            if groups.iter().any(|g: &Group| g.key.bytes() == group.key.bytes()) {
                return Err(RlError::DuplicateKey);
            }
            groups.push(group);
            rest = after;
        }
        if groups.is_empty() {
            return Err(RlError::WrongArity);
        }
        let keys: Vec<&Arg> = groups.iter().map(|g| g.key).collect();
        limit::decide_all(ctx, &keys, |i, stored, now| groups[i].limit.decide(stored, now))
    }
}

/// One group's limiter and request.
enum AnyLimit {
    Token(TokenBucket, u64),
    Fixed(FixedWindow, u64),
    Counter(SlidingCounter, u64),
    Slide(SlidingLog, RequestId),
    Acquire(Leases, ratelimit_core::leases::Acquire),
}

impl AnyLimit {
    fn decide(&self, stored: Option<&[u8]>, now: Nanos) -> Result<Outcome, RlError> {
        Ok(match self {
            AnyLimit::Token(l, cost) => l.decide(stored, now, *cost),
            AnyLimit::Fixed(l, cost) => l.decide(stored, now, *cost),
            AnyLimit::Counter(l, cost) => l.decide(stored, now, *cost),
            AnyLimit::Slide(l, id) => l.decide(stored, now, *id),
            AnyLimit::Acquire(l, request) => l.decide(stored, now, *request),
        }?)
    }
}

struct Group<'a> {
    key: &'a Arg,
    limit: AnyLimit,
}

/// What kind a group is, and how many arguments it takes after its key and kind.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GroupKind {
    Token,
    Fixed,
    Counter,
    Slide,
    Acquire,
}

fn kind_of(name: &[u8]) -> Option<GroupKind> {
    let is = |k: &[u8]| name.eq_ignore_ascii_case(k);
    match () {
        _ if is(b"TOKEN") => Some(GroupKind::Token),
        _ if is(b"FIXED") => Some(GroupKind::Fixed),
        _ if is(b"SLIDECOUNT") => Some(GroupKind::Counter),
        _ if is(b"SLIDE") => Some(GroupKind::Slide),
        _ if is(b"ACQUIRE") => Some(GroupKind::Acquire),
        _ => None,
    }
}

fn is_weight(arg: Option<&Arg>) -> bool {
    arg.is_some_and(|a| a.bytes().eq_ignore_ascii_case(b"WEIGHT"))
}

fn is_dedup(arg: Option<&Arg>) -> bool {
    arg.is_some_and(|a| a.bytes().eq_ignore_ascii_case(b"DEDUP"))
}

/// The length of the group starting at `args[0]` (key, kind, its arguments), when its kind is known;
/// the arguments themselves are not checked here.
fn group_len(args: &[Arg]) -> Option<usize> {
    match kind_of(args.get(1)?.bytes())? {
        GroupKind::Slide => Some(5 + usize::from(is_dedup(args.get(5)))),
        GroupKind::Acquire => Some(5 + 2 * usize::from(is_weight(args.get(5)))),
        _ => Some(5),
    }
}

/// The index of the `position`-th key: each group's first argument.
fn key_index(args: &[Arg], position: usize) -> Option<usize> {
    let mut at = 0;
    for _ in 0..position {
        at += group_len(args.get(at..)?)?;
    }
    (at < args.len()).then_some(at)
}

fn parse_group(args: &[Arg]) -> Result<(Group<'_>, &[Arg]), RlError> {
    let ([key, kind, a, b, c], rest) = split::<5>(args)?;
    let limit = match kind_of(kind.bytes()).ok_or(RlError::Syntax)? {
        GroupKind::Token => AnyLimit::Token(token::parse_bucket(a, b)?, cost(c.bytes())?),
        GroupKind::Fixed => AnyLimit::Fixed(window_limiter(a, b)?, cost(c.bytes())?),
        GroupKind::Counter => AnyLimit::Counter(window_limiter(a, b)?, cost(c.bytes())?),
        GroupKind::Slide => {
            let dedup = is_dedup(rest.first());
            let log = slide::parse_log(a, b)?;
            let id = slide::request_id(c, dedup)?;
            let rest = if dedup { &rest[1..] } else { rest };
            return Ok((Group { key, limit: AnyLimit::Slide(log, id) }, rest));
        }
        GroupKind::Acquire => {
            let options =
                if is_weight(rest.first()) { rest.get(..2).ok_or(RlError::WrongArity)? } else { &[] };
            let (leases, request) = acquire::parse(a, b, c, options)?;
            return Ok((Group { key, limit: AnyLimit::Acquire(leases, request) }, &rest[options.len()..]));
        }
    };
    Ok((Group { key, limit }, rest))
}
