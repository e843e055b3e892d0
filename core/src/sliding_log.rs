//! The exact sliding window: a request is allowed iff fewer than `limit` requests were allowed in the
//! last `window`. Allowed requests are recorded; denied ones are not.
//!
//! # Encoding
//!
//! The log is one string: an 8-byte header (`RLS`, version 1, slot width, 3 zero bytes) and `n` slots.
//! A slot is a timestamp in microseconds (u64, little-endian), followed, in width-16 logs, by a 64-bit
//! hash of the request id (for deduplication). The timestamps form a rotation of a strictly increasing
//! sequence, so the oldest slot (the rotation point) and the number of live entries are found by
//! binary search, and recording a request overwrites exactly one slot: the oldest, which is expired
//! whenever fewer than `n` entries are live. The log grows by a quarter when every slot is live, and
//! shrinks when three quarters are expired, each time rewritten oldest-first behind "filler" slots with
//! tiny distinct timestamps (1, 2, ...), which order before any real time and never count.
//!
//! Memory: 8 bytes per slot (16 with ids), at most a quarter of the slots unused after growth.
//! An ordinary allowed request changes one slot, so what is replicated is one small SETRANGE.

use crate::args::{whole_for, ArgError};
use crate::declare::{Declare, IdHash, Param, ParamType, RequestArgs, RequestForm, EMPTY_ID};
use crate::error::{ParamError, StateError};
use crate::format::{Bytes, Layout};
use crate::limiter::{apply, Change, Expiry, Field, Limiter, Outcome, Peek, Write};
use crate::limits::{in_range, MAX_HORIZON_NS, MAX_LOG_LIMIT};
use crate::time::{us_to_ns, Nanos};
use crate::verdict::Verdict;
use crate::window::{window_ns, WINDOW};

// The tag of every format (see `format`): `RLS` and the version.
const MAGIC: &[u8; 3] = b"RLS";
const VERSION: u8 = 1;
#[doc(hidden)] // public for the benches and the fuzz tests
pub const HEADER_LEN: usize = 8;
/// Timestamps at or below this are fillers, never live (2^32 us is in 1970).
const FILLER_CEILING: u64 = 1 << 32;
/// The largest limit a log accepts: its memory grows with the limit.
pub const MAX_LIMIT: u64 = MAX_LOG_LIMIT;
/// A limit of zero, or above what a log holds.
pub const LIMIT: ParamError = ParamError::new(
    "limit",
    concat!(
        "must be a whole number from 1 to ",
        crate::limits::max_log_limit!(),
        " (use RL.SLIDECOUNT for larger limits)"
    ),
);
/// The key lives up to this much past the instant its newest entry leaves the window, so most
/// requests leave the expiry alone.
const EXPIRY_SLACK_MS: i64 = 999;
/// How far ahead of the clock the newest entry may be before the log counts as written by a clock
/// that ran ahead: entries are kept strictly increasing, so a burst can run a little ahead.
const FUTURE_TOLERANCE_US: u64 = 1_000;
/// Logs smaller than this are never shrunk.
const MIN_SHRINK_SLOTS: usize = 16;

/// Slot layout: timestamps only, or timestamps with request-id hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)] // public for the benches and the fuzz tests
pub enum Width {
    Plain = 8,
    WithIds = 16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    limit: u64,
    window_us: u64,
}

/// The stored bytes do not form a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)] // public for the benches and the fuzz tests
pub struct NotALog;

/// A parsed view of a stored log.
#[derive(Debug, Clone, Copy)]
#[doc(hidden)] // public for the benches and the fuzz tests
pub struct Log<'a> {
    slots: &'a [u8],
    width: Width,
    n: usize,
    pivot: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[doc(hidden)] // public for the benches and the fuzz tests
pub struct SlideDecision {
    pub verdict: Verdict,
    /// The change to the stored log: one slot in place (`Change::Range`) or the whole log (`Change::Set`).
    pub write: Option<Change>,
    /// When the newest recorded request leaves the window, after this request (us); None when the log
    /// is empty.
    pub empty_at_us: Option<u64>,
    /// The log was impossible (entries from the future) and the write repairs it.
    pub repair: bool,
}

/// What the caller asks about its request id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestId {
    pub hash: u64,
    /// A retried id still in the window is allowed again without being counted.
    pub dedup: bool,
}

impl<'a> Log<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Log<'a>, NotALog> {
        let header = bytes.get(..HEADER_LEN).ok_or(NotALog)?;
        if &header[..3] != MAGIC || header[3] != VERSION || header[5..] != [0, 0, 0] {
            return Err(NotALog);
        }
        let width = match header[4] {
            8 => Width::Plain,
            16 => Width::WithIds,
            _ => return Err(NotALog),
        };
        let slots = &bytes[HEADER_LEN..];
        let w = width as usize;
        if slots.is_empty() || !slots.len().is_multiple_of(w) {
            return Err(NotALog);
        }
        let mut log = Log { slots, width, n: slots.len() / w, pivot: 0 };
        log.pivot = log.find_pivot();
        Ok(log)
    }

    fn ts(&self, physical: usize) -> u64 {
        let at = physical * self.width as usize;
        u64::from_le_bytes(self.slots[at..at + 8].try_into().unwrap_or([0; 8]))
    }

    fn hash(&self, physical: usize) -> u64 {
        if self.width == Width::Plain {
            return 0;
        }
        let at = physical * 16 + 8;
        u64::from_le_bytes(self.slots[at..at + 8].try_into().unwrap_or([0; 8]))
    }

    fn physical(&self, logical: usize) -> usize {
        (self.pivot + logical) % self.n
    }

    /// The oldest slot: the rotation point of the strictly increasing sequence.
    fn find_pivot(&self) -> usize {
        let (mut lo, mut hi) = (0, self.n - 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.ts(mid) > self.ts(hi) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The first logical index whose timestamp is above `threshold`.
    fn first_above(&self, threshold: u64) -> usize {
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.ts(self.physical(mid)) > threshold {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    fn newest(&self) -> u64 {
        self.ts(self.physical(self.n - 1))
    }

    /// Live entries, oldest first, as (timestamp, hash).
    fn entries_from(&self, first: usize) -> impl Iterator<Item = (u64, u64)> + '_ {
        (first..self.n).map(move |l| {
            let p = self.physical(l);
            (self.ts(p), self.hash(p))
        })
    }

    pub fn slots(&self) -> usize {
        self.n
    }

    /// The recorded requests' timestamps (us), oldest first, without the fillers.
    pub fn recorded(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries_from(0).map(|(ts, _)| ts).filter(|ts| *ts > FILLER_CEILING)
    }

    pub fn width(&self) -> Width {
        self.width
    }
}

/// A log laid out oldest first: fillers, then `entries`, in `slots` slots of `width`.
#[doc(hidden)] // public for the benches and the fuzz tests
pub fn build(width: Width, slots: usize, entries: &[(u64, u64)]) -> Vec<u8> {
    let w = width as usize;
    let mut out = Vec::with_capacity(HEADER_LEN + slots * w);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[VERSION, w as u8, 0, 0, 0]);
    let fillers = slots.saturating_sub(entries.len());
    let mut push = |ts: u64, hash: u64| {
        out.extend_from_slice(&ts.to_le_bytes());
        if width == Width::WithIds {
            out.extend_from_slice(&hash.to_le_bytes());
        }
    };
    for f in 0..fillers {
        push(f as u64 + 1, 0);
    }
    for &(ts, hash) in entries {
        push(ts, hash);
    }
    out
}

impl SlidingLog {
    pub fn new(limit: u64, window_us: u64) -> Result<SlidingLog, ParamError> {
        let limit = in_range(limit, 1..=MAX_LIMIT, LIMIT)?;
        let window_us = in_range(window_us, 1..=(MAX_HORIZON_NS / 1000) as u64, WINDOW)?;
        Ok(SlidingLog { limit, window_us })
    }

    /// Decides one request at `now_us` against the stored log (None: no key).
    #[doc(hidden)] // public for the benches and the fuzz tests
    pub fn decide_log(&self, log: Option<Log<'_>>, now_us: u64, id: RequestId) -> SlideDecision {
        match log {
            Some(log) if log.newest() > now_us.saturating_add(FUTURE_TOLERANCE_US) => {
                self.decide_repaired(&log, now_us, id)
            }
            _ => self.decide_on(log, now_us, id),
        }
    }

    /// A log whose newest entry lies in the future (a clock that stepped back, a primary whose clock
    /// ran ahead) is repaired first: entries from the future are moved to now (kept strictly
    /// increasing), so they still count but leave the window one window from now instead of when the
    /// clock catches up. The repaired log is stored even when the request is denied (alone: a
    /// combined request that is denied records nothing).
    fn decide_repaired(&self, log: &Log<'_>, now_us: u64, id: RequestId) -> SlideDecision {
        let mut previous = 0u64;
        let entries: Vec<(u64, u64)> = log
            .entries_from(0)
            .map(|(ts, hash)| {
                let ts = ts.min(now_us).max(previous.saturating_add(1));
                previous = ts;
                (ts, hash)
            })
            .collect();
        let mut repaired = build(log.width, log.n, &entries);
        let Ok(parsed) = Log::parse(&repaired) else {
            return self.decide_on(Some(*log), now_us, id);
        };
        let mut decision = self.decide_on(Some(parsed), now_us, id);
        // Only a write that records nothing is a repair alone, stored even when a combined request is
        // denied; one that also records this request is stored with the request or not at all (the
        // next call repairs again).
        decision.repair = decision.write.is_none();
        decision.write = Some(match decision.write.take() {
            Some(Change::Range { offset, bytes }) => {
                apply(&mut repaired, &Change::Range { offset, bytes });
                Change::Set(repaired.into())
            }
            Some(whole) => whole,
            None => Change::Set(repaired.into()),
        });
        decision
    }

    fn decide_on(&self, log: Option<Log<'_>>, now_us: u64, id: RequestId) -> SlideDecision {
        let threshold = now_us.saturating_sub(self.window_us).max(FILLER_CEILING);
        let wait = |ts: u64| us_to_ns(ts.saturating_add(self.window_us).saturating_sub(now_us));
        // Requests that share a microsecond are stamped one after another (strictly increasing), so
        // the newest stamp may lie a few microseconds ahead; the reset is never reported past one window.
        let reset = |ts: u64| wait(ts).min(us_to_ns(self.window_us));
        let verdict = |allowed: bool, live: u64, retry: Option<Nanos>, newest: Option<u64>| Verdict {
            allowed,
            limit: self.limit,
            remaining: self.limit.saturating_sub(live),
            retry_after_ns: retry,
            reset_after_ns: newest.map_or(0, reset),
        };
        let Some(log) = log else {
            let write = Change::Set(build(width_for(id), 1, &[(now_us, id.hash)]).into());
            return SlideDecision {
                verdict: verdict(true, 1, Some(0), Some(now_us)),
                write: Some(write),
                empty_at_us: Some(now_us.saturating_add(self.window_us)),
                repair: false,
            };
        };
        let first_live = log.first_above(threshold);
        let live = (log.n - first_live) as u64;
        let newest = (live > 0).then(|| log.newest());
        let empty_at_us = newest.map(|t| t.saturating_add(self.window_us));
        if id.dedup && log.entries_from(first_live).any(|(_, h)| h == id.hash) {
            return SlideDecision {
                verdict: verdict(true, live, Some(0), newest),
                write: None,
                empty_at_us,
                repair: false,
            };
        }
        if live >= self.limit {
            // The request fits once all but limit - 1 of the live entries have left the window.
            let leaving = log.ts(log.physical(log.n - self.limit as usize));
            return SlideDecision {
                // At least 1 ns: only a corrupted (unordered) log could say the entry has already left.
                verdict: verdict(false, live, Some(wait(leaving).max(1)), newest),
                write: None,
                empty_at_us,
                repair: false,
            };
        }
        // Strictly increasing, even if the clock stepped back or two requests share a microsecond.
        let stamp = now_us.max(log.newest().saturating_add(1));
        let entry_width = width_for(id).max_with(log.width);
        let live_after = live as usize + 1;
        let write =
            if entry_width != log.width || live as usize == log.n || self.should_shrink(&log, live_after) {
                let mut entries: Vec<(u64, u64)> = log.entries_from(first_live).collect();
                entries.push((stamp, id.hash));
                Change::Set(build(entry_width, self.slots_for(&log, live_after), &entries).into())
            } else {
                let mut slot = [0u8; 16];
                slot[..8].copy_from_slice(&stamp.to_le_bytes());
                slot[8..].copy_from_slice(&id.hash.to_le_bytes());
                let bytes = Bytes::copy(&slot[..log.width as usize]);
                Change::Range { offset: HEADER_LEN + log.pivot * log.width as usize, bytes }
            };
        SlideDecision {
            verdict: verdict(true, live + 1, Some(0), Some(stamp)),
            write: Some(write),
            empty_at_us: Some(stamp.saturating_add(self.window_us)),
            repair: false,
        }
    }

    fn should_shrink(&self, log: &Log<'_>, live_after: usize) -> bool {
        log.n >= MIN_SHRINK_SLOTS && live_after * 4 <= log.n
    }

    /// Slots for a rewrite holding `live_after` entries: a quarter more when growing (at most the
    /// limit), twice the entries when shrinking.
    fn slots_for(&self, log: &Log<'_>, live_after: usize) -> usize {
        let limit = usize::try_from(self.limit).unwrap_or(usize::MAX);
        if live_after > log.n {
            (log.n + log.n / 4).max(live_after).min(limit.max(live_after))
        } else if self.should_shrink(log, live_after) {
            (live_after * 2).max(live_after + 1)
        } else {
            log.n
        }
    }
}

/// How a request id is stored for DEDUP: the first 8 bytes of its SHA-1, as a little-endian u64 (so the
/// stored bytes are those 8 bytes). The same on every server and after every restart, so a retry is
/// recognised across a failover; the Lua library computes the same with `redis.sha1hex`. Aiming at
/// another caller's recorded id takes a second preimage of 64 bits.
pub fn id_hash(id: &[u8]) -> u64 {
    use sha1::{Digest, Sha1};
    let digest = Sha1::digest(id);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

fn width_for(id: RequestId) -> Width {
    if id.dedup {
        Width::WithIds
    } else {
        Width::Plain
    }
}

impl Width {
    fn max_with(self, other: Width) -> Width {
        if self == Width::WithIds || other == Width::WithIds {
            Width::WithIds
        } else {
            Width::Plain
        }
    }
}

fn now_us(now: Nanos) -> u64 {
    (now.max(0) / 1000) as u64
}

fn parse(stored: Option<&[u8]>) -> Result<Option<Log<'_>>, StateError> {
    stored.map(Log::parse).transpose().map_err(|_| StateError)
}

impl Limiter for SlidingLog {
    type Request = RequestId;
    const LAYOUT: Layout = Layout::SlidingLog;

    fn decide(&self, stored: Option<&[u8]>, now: Nanos, id: RequestId) -> Result<Outcome, StateError> {
        let d = self.decide_log(parse(stored)?, now_us(now), id);
        let write = match (d.write, d.empty_at_us) {
            (Some(change), Some(empty_at_us)) => {
                let at_least_ms = i64::try_from(empty_at_us.div_ceil(1000)).unwrap_or(i64::MAX);
                Some(Write { change, expiry: Expiry::Within { at_least_ms, slack_ms: EXPIRY_SLACK_MS } })
            }
            _ => None,
        };
        Ok(Outcome { verdict: d.verdict, write, repair: d.repair })
    }

    /// The decision of a request is computed and its write discarded.
    fn peek(&self, stored: Option<&[u8]>, now: Nanos) -> Result<Peek, StateError> {
        let log = parse(stored)?;
        let now_us = now_us(now);
        let one = self.decide_log(log, now_us, RequestId { hash: 0, dedup: false }).verdict;
        // Before this hypothetical request: one more unit left, and the window empties with its newest entry.
        let newest = log.and_then(|l| l.recorded().last()).unwrap_or(0);
        let before = Verdict {
            remaining: if one.allowed { one.remaining + 1 } else { one.remaining },
            reset_after_ns: (newest.saturating_add(self.window_us).saturating_sub(now_us).min(self.window_us)
                as Nanos)
                .saturating_mul(1000),
            ..one
        };
        Ok(Peek { now: before, one })
    }

    fn describe(stored: &[u8], _now: Nanos) -> Result<Vec<Field>, StateError> {
        let log = Log::parse(stored).map_err(|_| StateError)?;
        let (mut recorded, mut oldest, mut newest) = (0u64, None, None);
        for ts in log.recorded() {
            recorded += 1;
            oldest.get_or_insert(ts);
            newest = Some(ts);
        }
        let n = |v: u64| Some(i64::try_from(v).unwrap_or(i64::MAX));
        let ms = |us: Option<u64>| us.and_then(|us| n(us.div_ceil(1000)));
        Ok(vec![
            ("recorded", n(recorded)),
            ("slots", n(log.slots() as u64)),
            ("dedup", Some(i64::from(log.width() == Width::WithIds))),
            ("oldest_ms", ms(oldest)),
            ("newest_ms", ms(newest)),
        ])
    }
}

impl Declare for SlidingLog {
    const NAME: &'static str = "sliding_log";
    const PARAMS: [Param; 2] = [
        Param {
            name: "limit",
            form: ParamType::Whole,
            min: 1,
            max: MAX_LIMIT,
            unit: "requests",
            errors: &[LIMIT],
        },
        crate::window::WINDOW_PARAM,
    ];
    const GROUP: &'static str = "SLIDE";
    const COMMAND: &'static str = "RL.SLIDE";
    const SYNTAX: &'static str = "RL.SLIDE key limit window id [DEDUP]";
    const FUNCTION: &'static str = "rl_slide";
    const REQUEST: RequestForm = RequestForm::Id;

    /// `limit window`.
    fn parse([limit, window]: [&[u8]; 2]) -> Result<SlidingLog, ArgError> {
        let limit = whole_for(limit, LIMIT, 1)?;
        if limit > MAX_LIMIT {
            return Err(LIMIT.into());
        }
        let window_us = (window_ns(window)? / 1000) as u64;
        Ok(SlidingLog::new(limit, window_us)?)
    }

    /// `id [DEDUP]`: the id is stored as `ids` hashes it.
    fn request(&self, args: RequestArgs<'_>, ids: IdHash) -> Result<RequestId, ArgError> {
        match args {
            RequestArgs::Id { id: [], .. } => Err(EMPTY_ID.into()),
            RequestArgs::Id { id, dedup } => Ok(RequestId { hash: ids(id), dedup }),
            _ => Err(ArgError::Syntax),
        }
    }

    fn request_of(&self, _units: u64, _holder: Option<&[u8]>) -> Option<RequestId> {
        None
    }

    fn limit(&self) -> u64 {
        self.limit
    }

    fn period_ns(&self) -> Nanos {
        us_to_ns(self.window_us)
    }

    fn share(&self, n: u64) -> SlidingLog {
        SlidingLog { limit: (self.limit / n).max(1), ..*self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = 1_000_000; // one second in us
    const T0: u64 = 1_700_000_000 * S;
    const PLAIN: RequestId = RequestId { hash: 0, dedup: false };

    fn run(log: &SlidingLog, value: &mut Option<Vec<u8>>, now: u64, id: RequestId) -> SlideDecision {
        let parsed = value.as_deref().map(|v| Log::parse(v).expect("a valid log"));
        let d = log.decide_log(parsed, now, id);
        if let Some(w) = &d.write {
            let mut v = value.take().unwrap_or_default();
            apply(&mut v, w);
            *value = Some(v);
        }
        d
    }

    #[test]
    fn allows_limit_per_window_and_reports_when_the_oldest_leaves() {
        let log = SlidingLog::new(3, 10 * S).unwrap();
        let mut value = None;
        for (i, t) in [0, S, 2 * S].iter().enumerate() {
            let d = run(&log, &mut value, T0 + t, PLAIN);
            assert!(d.verdict.allowed);
            assert_eq!(d.verdict.remaining, 2 - i as u64);
        }
        let denied = run(&log, &mut value, T0 + 5 * S, PLAIN);
        assert_eq!(
            denied.verdict,
            Verdict {
                allowed: false,
                limit: 3,
                remaining: 0,
                retry_after_ns: Some(5_000_000_000),
                reset_after_ns: 7_000_000_000
            }
        );
        assert_eq!(denied.write, None);
        // At T0 + 10 s the first request leaves the window.
        assert!(!run(&log, &mut value, T0 + 10 * S - 1, PLAIN).verdict.allowed);
        assert!(run(&log, &mut value, T0 + 10 * S, PLAIN).verdict.allowed);
    }

    #[test]
    fn requests_that_share_a_microsecond_never_report_a_reset_past_the_window() {
        // A millisecond clock (Redis 7.0): every call of one millisecond reads the same now.
        let log = SlidingLog::new(100, 60 * S).unwrap();
        let mut value = None;
        for _ in 0..5 {
            let d = run(&log, &mut value, T0, PLAIN);
            assert!(d.verdict.allowed);
            assert!(d.verdict.reset_after_ns <= 60_000_000_000, "{}", d.verdict.reset_after_ns);
        }
        let bytes = value.unwrap();
        let peek = log.peek(Some(&bytes), (T0 * 1000) as Nanos).unwrap();
        assert!(peek.now.reset_after_ns <= 60_000_000_000 && peek.one.reset_after_ns <= 60_000_000_000);
    }

    #[test]
    fn exact_across_fixed_window_boundaries() {
        // 5 per 10 s: 5 requests at 9.9 s and 5 more at 10.1 s would pass two fixed windows.
        let log = SlidingLog::new(5, 10 * S).unwrap();
        let mut value = None;
        let first = (0..5).filter(|_| run(&log, &mut value, T0 + 9_900_000, PLAIN).verdict.allowed).count();
        let second = (0..5).filter(|_| run(&log, &mut value, T0 + 10_100_000, PLAIN).verdict.allowed).count();
        assert_eq!((first, second), (5, 0));
    }

    #[test]
    fn ordinary_requests_write_one_slot() {
        let log = SlidingLog::new(100, S).unwrap();
        let mut value = None;
        // Fill to 8 slots, then let them expire: the next requests reuse expired slots.
        for i in 0..8 {
            run(&log, &mut value, T0 + i, PLAIN);
        }
        let slots = Log::parse(value.as_ref().unwrap()).unwrap().slots();
        let d = run(&log, &mut value, T0 + 2 * S, PLAIN);
        assert!(matches!(d.write, Some(Change::Range { ref bytes, .. }) if bytes.as_ref().len() == 8));
        assert_eq!(Log::parse(value.as_ref().unwrap()).unwrap().slots(), slots);
    }

    #[test]
    fn grows_by_a_quarter_and_shrinks_when_mostly_expired() {
        let log = SlidingLog::new(10_000, 60 * S).unwrap();
        let mut value = None;
        for i in 0..10_000 {
            assert!(run(&log, &mut value, T0 + i, PLAIN).verdict.allowed);
        }
        let bytes = value.as_ref().unwrap().len();
        assert!(bytes <= HEADER_LEN + 10_000 * 8, "{bytes} bytes for 10000 entries");
        assert!(!run(&log, &mut value, T0 + 20_000, PLAIN).verdict.allowed);
        // A minute later all have expired; the next write shrinks the log.
        run(&log, &mut value, T0 + 61 * S, PLAIN);
        assert!(Log::parse(value.as_ref().unwrap()).unwrap().slots() < 16);
    }

    #[test]
    fn dedup_allows_a_retried_id_without_counting_it() {
        let log = SlidingLog::new(2, 10 * S).unwrap();
        let mut value = None;
        let a = RequestId { hash: 11, dedup: true };
        let b = RequestId { hash: 22, dedup: true };
        assert_eq!(run(&log, &mut value, T0, a).verdict.remaining, 1);
        let retried = run(&log, &mut value, T0 + S, a);
        assert!(retried.verdict.allowed);
        assert_eq!((retried.verdict.remaining, retried.write), (1, None));
        assert_eq!(run(&log, &mut value, T0 + S, b).verdict.remaining, 0);
        assert!(!run(&log, &mut value, T0 + S, RequestId { hash: 33, dedup: true }).verdict.allowed);
        // Without the option the same id counts again.
        assert!(!run(&log, &mut value, T0 + S, RequestId { hash: 11, dedup: false }).verdict.allowed);
        // Once a's entry left the window, a counts as new.
        assert_eq!(run(&log, &mut value, T0 + 10 * S, a).verdict.remaining, 0);
    }

    #[test]
    fn a_plain_log_is_widened_when_ids_are_needed() {
        let log = SlidingLog::new(5, 10 * S).unwrap();
        let mut value = None;
        run(&log, &mut value, T0, PLAIN);
        run(&log, &mut value, T0 + 1, RequestId { hash: 7, dedup: true });
        let parsed = Log::parse(value.as_ref().unwrap()).unwrap();
        assert_eq!(parsed.width(), Width::WithIds);
        assert!(run(&log, &mut value, T0 + 2, RequestId { hash: 7, dedup: true }).write.is_none());
    }

    #[test]
    fn clock_steps_back_keep_the_log_ordered_and_never_admit_more() {
        let log = SlidingLog::new(3, 10 * S).unwrap();
        let mut value = None;
        run(&log, &mut value, T0 + 100 * S, PLAIN);
        // The clock steps back 100 s: the entry "from the future" still counts, for one window.
        assert!(run(&log, &mut value, T0, PLAIN).verdict.allowed);
        assert!(run(&log, &mut value, T0, PLAIN).verdict.allowed);
        assert!(!run(&log, &mut value, T0 + 5 * S, PLAIN).verdict.allowed);
        Log::parse(value.as_ref().unwrap()).unwrap();
        assert!(run(&log, &mut value, T0 + 11 * S, PLAIN).verdict.allowed);
    }

    #[test]
    fn entries_from_the_future_are_repaired_and_still_count() {
        let log = SlidingLog::new(2, 10 * S).unwrap();
        let mut value = None;
        run(&log, &mut value, T0 + 3600 * S, PLAIN);
        run(&log, &mut value, T0 + 3600 * S, PLAIN);
        // The clock is an hour behind the log: both entries still count...
        let d = run(&log, &mut value, T0, PLAIN);
        assert!(!d.verdict.allowed);
        assert!(matches!(d.write, Some(Change::Set(_))), "repaired even on a denial");
        // ...but leave one window from now, not in an hour.
        assert!(d.verdict.retry_after_ns.unwrap() <= 10_000_000_000);
        assert!(run(&log, &mut value, T0 + 10 * S + 10, PLAIN).verdict.allowed);
    }

    #[test]
    fn rejects_values_that_are_not_logs() {
        for bad in [
            &b""[..],
            b"RLS",
            b"RLS\x01\x08\0\0\0",
            b"RLS\x02\x08\0\0\0abcdefgh",
            b"RLS\x01\x09\0\0\0abcdefghi",
            b"XYZ\x01\x08\0\0\0abcdefgh",
            b"RLS\x01\x08\0\0\0abc",
        ] {
            assert!(Log::parse(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        /// At no instant do more than limit allowed requests fall in any window-long interval, and
        /// waiting retry_after is enough.
        #[test]
        fn never_more_than_limit_in_any_window(
            limit in 1u64..12,
            window_ms in 1u64..2_000,
            steps in proptest::collection::vec((0u64..400_000, any::<bool>(), 0u64..4), 1..300),
        ) {
            let window = window_ms * 1000;
            let log = SlidingLog::new(limit, window).unwrap();
            let mut value = None;
            let mut now = T0;
            let mut admitted: Vec<u64> = Vec::new();
            for (gap, dedup, id) in steps {
                now += gap;
                let d = run(&log, &mut value, now, RequestId { hash: id, dedup });
                if d.verdict.allowed && d.write.is_some() {
                    admitted.push(now);
                }
                if let (false, Some(retry)) = (d.verdict.allowed, d.verdict.retry_after_ns) {
                    let parsed = Log::parse(value.as_ref().unwrap()).unwrap();
                    let later = now + (retry as u64).div_ceil(1000);
                    let retry_id = RequestId { hash: 99, dedup: false };
                    prop_assert!(log.decide_log(Some(parsed), later, retry_id).verdict.allowed);
                }
                let in_window = admitted.iter().filter(|&&t| t + window > now).count() as u64;
                prop_assert!(in_window <= limit, "{} admitted in the window, limit {}", in_window, limit);
                prop_assert!(d.verdict.remaining <= limit);
            }
        }
    }
}
