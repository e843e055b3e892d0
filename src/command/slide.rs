//! RL.SLIDE key limit window id [DEDUP]
//!
//! The exact sliding window (see `ratelimit_core::sliding_log`): a compact log of the allowed requests' times
//! in one string. An ordinary request overwrites one 8-byte slot in place and replicates one SETRANGE;
//! growing or shrinking the log rewrites it (replicated as SET ... PXAT). The key expires when its
//! newest request leaves the window (less than one second later, so most requests leave the TTL alone).

use super::arg::Arg;
use super::args::{whole, window};
use super::clock;
use super::error::RlError;
use super::registry::{Command, KeySpec};
use super::reply::Reply;
use super::stats::{self, CommandStats};
use super::store::{Expiry, StateKey};
use ratelimit_core::sliding_log::{Log, LogWrite, RequestId, SlidingLog, MAX_LIMIT};
use redis_module::Context;
use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;

pub struct Slide;

const EXPIRY_SLACK_MS: i64 = 999;

/// Request ids are stored as keyed 64-bit hashes (SipHash with a key chosen at module load), so
/// callers cannot craft ids that collide with other ids. After a restart the key differs: ids recorded
/// before it no longer match, and a retry of one of them counts again (never less).
fn id_hash(id: &[u8]) -> u64 {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    KEYS.get_or_init(RandomState::new).hash_one(id)
}

fn parse(args: &[Arg]) -> Result<(&Arg, SlidingLog, RequestId), RlError> {
    let [key, limit, window_arg, id, rest @ ..] = args else {
        return Err(RlError::WrongArity);
    };
    let dedup = match rest {
        [] => false,
        [option] if option.bytes().eq_ignore_ascii_case(b"DEDUP") => true,
        [_] => return Err(RlError::Syntax),
        _ => return Err(RlError::WrongArity),
    };
    const LIMIT: &str = "must be a whole number from 1 to 1000000 (use RL.SLIDECOUNT for larger limits)";
    let limit = whole(limit.bytes(), "limit", 1, LIMIT)?;
    if limit > MAX_LIMIT {
        return Err(RlError::invalid("limit", LIMIT));
    }
    let window_us = (window(window_arg.bytes())? / 1000) as u64;
    if id.bytes().is_empty() {
        return Err(RlError::invalid("id", "must not be empty"));
    }
    let log = SlidingLog::new(limit, window_us).ok_or(RlError::invalid("limit", LIMIT))?;
    Ok((key, log, RequestId { hash: id_hash(id.bytes()), dedup }))
}

impl Command for Slide {
    const STATS: Option<&'static CommandStats> = Some(&stats::SLIDE);
    const KEYS: KeySpec = KeySpec::FIRST;
    const COUNTED: bool = true;

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let (name, log, id) = parse(args)?;
        let now_us = (clock::now_ns().max(0) / 1000) as u64;
        let mut key = StateKey::open(ctx, name)?;
        let decision = {
            let stored = key.read()?.map(Log::parse).transpose().map_err(|_| RlError::BadState)?;
            log.decide(stored, now_us, id)
        };
        if let (Some(write), Some(empty_at_us)) = (&decision.write, decision.empty_at_us) {
            let at_least_ms = i64::try_from(empty_at_us.div_ceil(1000)).unwrap_or(i64::MAX);
            let expiry = Expiry { at_least_ms, slack_ms: EXPIRY_SLACK_MS };
            match write {
                LogWrite::Slot { offset, bytes } => key.write_at(*offset, bytes, expiry)?,
                LogWrite::Rewrite(bytes) => key.write(bytes, expiry)?,
            }
        }
        Ok(Reply::Limit { verdict: decision.verdict, limiting: None })
    }
}
