//! Concurrency limits: leases on work in flight. A key holds the leases that are neither released nor
//! expired; a request of weight `w` is allowed iff their weights, with this one, are at most `limit`.
//! An allowed request records a lease for its id that expires `lease` from now; acquiring again with an
//! id that holds a lease is allowed without taking another slot and extends that lease (a retry is the
//! same request), keeping the weight it was acquired with.
//!
//! Expired leases free their slots by themselves: every decision counts only the leases alive at
//! `now`, and a write drops the expired ones. Nothing runs in between (no timer, no thread), and the
//! key expires when its last lease does.
//!
//! # Encoding
//!
//! The tag `RLA\x01`, then one 28-byte entry per lease: the id's 16-byte digest (the first 16 bytes of
//! the id's SHA-1: the same on every server, so a replica promoted to primary releases what its old
//! primary leased, and the Lua library, which has only SHA-1, computes the same; no caller can find
//! another id with a given 128-bit digest, a second preimage), its expiry in Unix microseconds (u64)
//! and its weight (u32), little-endian, in no particular order. Release 0.2 stored the first 16 bytes
//! of SHA-256: such a record still matches its id (`LeaseId::matches`) and takes the SHA-1 digest
//! when its holder acquires or renews it again.

use crate::args::{whole, whole_for, ArgError};
use crate::declare::{Declare, IdHash, Param, ParamType, RequestArgs, RequestForm, EMPTY_ID};
use crate::error::{ParamError, StateError};
use crate::format::{Bytes, Layout, LEASE_RECORD, TAG_LEN};
use crate::limiter::{Change, Expiry, Field, Limiter, Outcome, Peek, Write};
use crate::limits::{in_range, MAX_HORIZON_NS};
use crate::time::{ceil_ms, us_to_ns, Nanos};
use crate::verdict::Verdict;
use crate::window::window_ns;
use sha1::Sha1;
use sha2::{Digest, Sha256};

/// The largest concurrency limit: [`MAX_LEASE_LIMIT`](crate::limits::MAX_LEASE_LIMIT).
pub const MAX_LIMIT: u64 = crate::limits::MAX_LEASE_LIMIT;
/// A limit outside 1 to `MAX_LIMIT`.
pub const LIMIT: ParamError =
    ParamError::new("limit", concat!("must be a whole number from 1 to ", crate::limits::max_lease_limit!()));
/// A lease that is not a positive number of whole milliseconds within the horizon.
pub const LEASE: ParamError = ParamError::new("lease", crate::limits::SECONDS_EXPECTED);
/// A weight of zero, or above what any limit allows.
pub const WEIGHT: ParamError = ParamError::new(
    "weight",
    concat!("must be a whole number from 1 to ", crate::limits::max_lease_limit!()),
);

const ENTRY: usize = LEASE_RECORD;

/// Valid lease parameters: how many may be held and for how long each lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leases {
    limit: u64,
    lease_us: u64,
}

/// A lease holder's id as stored: the first 16 bytes of its SHA-1; and, while records written by
/// release 0.2 may still be held, the first 16 bytes of its SHA-256, which 0.2 stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseId {
    digest: Digest16,
    legacy: Digest16,
}

/// A stored lease record's id digest.
type Digest16 = [u8; 16];

fn first_16(digest: &[u8]) -> Digest16 {
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

impl LeaseId {
    pub fn of(id: &[u8]) -> LeaseId {
        LeaseId { digest: first_16(&Sha1::digest(id)), legacy: first_16(&Sha256::digest(id)) }
    }

    /// Whether a stored record's digest is this id's (either digest).
    fn matches(&self, stored: &Digest16) -> bool {
        *stored == self.digest || *stored == self.legacy
    }
}

/// An acquisition: whose, and how many slots it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquire {
    pub id: LeaseId,
    pub weight: u64,
}

/// One held lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lease {
    id: Digest16,
    expires_us: u64,
    weight: u64,
}

fn now_us(now: Nanos) -> u64 {
    (now.max(0) / 1000) as u64
}

/// The stored value's entries, one per lease (expired or not).
fn entries(stored: &[u8]) -> Result<std::slice::ChunksExact<'_, u8>, StateError> {
    let body = match stored.get(..TAG_LEN) {
        Some(tag) if Layout::Leases.has_tag(tag) => &stored[TAG_LEN..],
        _ => return Err(StateError),
    };
    if !body.len().is_multiple_of(ENTRY) {
        return Err(StateError);
    }
    Ok(body.chunks_exact(ENTRY))
}

fn expires_us(entry: &[u8]) -> u64 {
    u64::from_le_bytes(entry[16..24].try_into().unwrap_or([0; 8]))
}

/// The leases of a stored value (all of them, expired or not).
fn decode(stored: &[u8]) -> Result<Vec<Lease>, StateError> {
    Ok(entries(stored)?
        .map(|e| {
            let mut id = [0u8; 16];
            id.copy_from_slice(&e[..16]);
            let expires_us = expires_us(e);
            let weight = u64::from(u32::from_le_bytes(e[24..28].try_into().unwrap_or([0; 4])));
            Lease { id, expires_us, weight }
        })
        .collect())
}

/// Without decoding every lease: Some(the id of the one live lease, or None when none is live), or
/// None when more than one is live.
fn only_live_lease(stored: Option<&[u8]>, now_us: u64) -> Result<Option<Option<Digest16>>, StateError> {
    let Some(stored) = stored else { return Ok(Some(None)) };
    let mut found = None;
    for e in entries(stored)? {
        if expires_us(e) > now_us {
            if found.is_some() {
                return Ok(None);
            }
            let mut id = [0u8; 16];
            id.copy_from_slice(&e[..16]);
            found = Some(id);
        }
    }
    Ok(Some(found))
}

fn live(stored: Option<&[u8]>, now_us: u64) -> Result<Vec<Lease>, StateError> {
    let mut leases = stored.map(decode).transpose()?.unwrap_or_default();
    leases.retain(|l| l.expires_us > now_us);
    Ok(leases)
}

/// The leases alive at `now_us`, none ending later than `lease_us` from now: a lease stored further
/// ahead than any call can grant came from a clock that ran ahead (or a call with a longer lease),
/// and is treated as ending one lease from now, so nobody is locked out for longer than one lease.
/// It is cut, never dropped: a slot is never freed early. True when one was cut.
fn live_within(stored: Option<&[u8]>, now_us: u64, lease_us: u64) -> Result<(Vec<Lease>, bool), StateError> {
    let mut leases = live(stored, now_us)?;
    let latest = now_us.saturating_add(lease_us);
    let mut cut = false;
    for lease in leases.iter_mut().filter(|l| l.expires_us > latest) {
        lease.expires_us = latest;
        cut = true;
    }
    Ok((leases, cut))
}

/// The finest expiry slack: one second.
const MIN_EXPIRY_SLACK_MS: u64 = 1000;

/// How long a key may outlive its last lease: max(1 s, 1/16 of a lease of `lease_us`). An expiry
/// within that of the last lease's end stays, so a key under steady acquires and renewals moves its
/// expiry about once per slack instead of once per call.
fn expiry_slack_ms(lease_us: u64) -> i64 {
    i64::try_from((lease_us / 16 / 1000).max(MIN_EXPIRY_SLACK_MS)).unwrap_or(i64::MAX)
}

/// The value that holds `leases` (all alive), expiring with the last of them, within
/// `expiry_slack_ms(lease_us)` after it; the key is deleted when there are none.
fn write(leases: &[Lease], lease_us: u64) -> Write {
    let Some(last) = leases.iter().map(|l| l.expires_us).max() else {
        return Write { change: Change::Delete, expiry: Expiry::Within { at_least_ms: 0, slack_ms: 0 } };
    };
    let entry = |l: &Lease| {
        let mut e = [0u8; ENTRY];
        e[..16].copy_from_slice(&l.id);
        e[16..24].copy_from_slice(&l.expires_us.to_le_bytes());
        e[24..].copy_from_slice(&(l.weight as u32).to_le_bytes());
        e
    };
    let bytes = match leases {
        // One lease fits the inline buffer: no allocation for the commonest value.
        [only] => Bytes::tagged(Layout::Leases, &entry(only)),
        _ => {
            let mut value = Vec::with_capacity(TAG_LEN + leases.len() * ENTRY);
            value.extend_from_slice(&Layout::Leases.tag().unwrap_or_default());
            leases.iter().for_each(|l| value.extend_from_slice(&entry(l)));
            Bytes::from(value)
        }
    };
    let at_least_ms = i64::try_from(last.div_ceil(1000)).unwrap_or(i64::MAX);
    Write {
        change: Change::Set(bytes),
        expiry: Expiry::Within { at_least_ms, slack_ms: expiry_slack_ms(lease_us) },
    }
}

impl Leases {
    pub fn new(limit: u64, lease_ns: Nanos) -> Result<Leases, ParamError> {
        let limit = in_range(limit, 1..=MAX_LIMIT, LIMIT)?;
        let lease_us = in_range(lease_ns, 1_000_000..=MAX_HORIZON_NS, LEASE)? / 1000;
        Ok(Leases { limit, lease_us: lease_us as u64 })
    }

    /// A weight for this limiter's requests (1 to `MAX_LIMIT`; above `limit` it never fits).
    pub fn weight(weight: u64) -> Result<u64, ParamError> {
        (1..=MAX_LIMIT).contains(&weight).then_some(weight).ok_or(WEIGHT)
    }

    fn verdict(&self, allowed: bool, held: &[Lease], now_us: u64, retry: Option<Nanos>) -> Verdict {
        let weight: u64 = held.iter().map(|l| l.weight).sum();
        let last = held.iter().map(|l| l.expires_us).max().unwrap_or(now_us);
        Verdict {
            allowed,
            limit: self.limit,
            remaining: self.limit.saturating_sub(weight),
            retry_after_ns: retry,
            reset_after_ns: us_to_ns(last.saturating_sub(now_us)),
        }
    }

    /// When `weight` more would fit if no held lease were released: the leases that end first free
    /// their slots first. An upper bound of the wait (a release frees a slot sooner).
    fn retry_after(&self, held: &[Lease], now_us: u64, weight: u64) -> Option<Nanos> {
        if weight > self.limit {
            return None;
        }
        let mut ends: Vec<(u64, u64)> = held.iter().map(|l| (l.expires_us, l.weight)).collect();
        ends.sort_unstable();
        let mut load: u64 = ends.iter().map(|e| e.1).sum();
        for (expires_us, w) in ends {
            load -= w;
            if load + weight <= self.limit {
                return Some(us_to_ns(expires_us.saturating_sub(now_us)).max(1));
            }
        }
        Some(1)
    }

    /// `RL.RELEASE`: frees the lease `id` holds. True when it held one (alive); the write removes it.
    pub fn release(
        stored: Option<&[u8]>,
        now: Nanos,
        id: LeaseId,
    ) -> Result<(bool, Option<Write>), StateError> {
        let now_us = now_us(now);
        if let Some(last) = only_live_lease(stored, now_us)? {
            // The commonest release: the key's one live lease, or nothing to release.
            return Ok(if last.is_some_and(|l| id.matches(&l)) {
                (true, Some(write(&[], 0)))
            } else {
                (false, None)
            });
        }
        let mut held = live(stored, now_us)?;
        let before = held.len();
        held.retain(|l| !id.matches(&l.id));
        // The lease length is not known here: the slack is that of the longest time left.
        let left = held.iter().map(|l| l.expires_us.saturating_sub(now_us)).max().unwrap_or(0);
        Ok(if held.len() < before { (true, Some(write(&held, left))) } else { (false, None) })
    }

    /// `RL.RENEW`: the lease `id` holds now expires `lease_ns` from `now`. True when it still held one;
    /// a lease that is gone is never re-acquired here.
    pub fn renew(
        stored: Option<&[u8]>,
        now: Nanos,
        id: LeaseId,
        lease_ns: Nanos,
    ) -> Result<(bool, Option<Write>), StateError> {
        let (now_us, lease_us) = (now_us(now), (lease_ns.max(0) / 1000) as u64);
        let (mut held, cut) = live_within(stored, now_us, lease_us)?;
        let Some(lease) = held.iter_mut().find(|l| id.matches(&l.id)) else {
            return Ok((false, cut.then(|| write(&held, lease_us))));
        };
        lease.id = id.digest;
        lease.expires_us = now_us.saturating_add(lease_us);
        Ok((true, Some(write(&held, lease_us))))
    }
}

impl Limiter for Leases {
    type Request = Acquire;
    const LAYOUT: Layout = Layout::Leases;

    fn decide(&self, stored: Option<&[u8]>, now: Nanos, request: Acquire) -> Result<Outcome, StateError> {
        let now_us = now_us(now);
        let (mut held, cut) = live_within(stored, now_us, self.lease_us)?;
        let expires_us = now_us.saturating_add(self.lease_us);
        if let Some(lease) = held.iter_mut().find(|l| request.id.matches(&l.id)) {
            // A retry of the same request: the same slot, for longer.
            lease.id = request.id.digest;
            lease.expires_us = expires_us;
        } else {
            let load: u64 = held.iter().map(|l| l.weight).sum();
            if load + request.weight > self.limit {
                let retry = self.retry_after(&held, now_us, request.weight);
                // A denial writes nothing but the repair of leases cut to one lease.
                return Ok(Outcome {
                    verdict: self.verdict(false, &held, now_us, retry),
                    write: cut.then(|| write(&held, self.lease_us)),
                    repair: cut,
                });
            }
            held.push(Lease { id: request.id.digest, expires_us, weight: request.weight });
        }
        Ok(Outcome {
            verdict: self.verdict(true, &held, now_us, Some(0)),
            write: Some(write(&held, self.lease_us)),
            repair: false,
        })
    }

    fn peek(&self, stored: Option<&[u8]>, now: Nanos) -> Result<Peek, StateError> {
        let now_us = now_us(now);
        let (held, _) = live_within(stored, now_us, self.lease_us)?;
        let load: u64 = held.iter().map(|l| l.weight).sum();
        let fits = load < self.limit;
        let one_retry = if fits { Some(0) } else { self.retry_after(&held, now_us, 1) };
        Ok(Peek {
            now: self.verdict(true, &held, now_us, Some(0)),
            one: self.verdict(fits, &held, now_us, one_retry),
        })
    }

    fn describe(stored: &[u8], now: Nanos) -> Result<Vec<Field>, StateError> {
        let now_us = now_us(now);
        let all = decode(stored)?;
        let held: Vec<&Lease> = all.iter().filter(|l| l.expires_us > now_us).collect();
        let n = |v: u64| Some(i64::try_from(v).unwrap_or(i64::MAX));
        let ms = |us: Option<u64>| us.and_then(|us| n(us.div_ceil(1000)));
        Ok(vec![
            ("held", n(held.len() as u64)),
            ("weight_held", n(held.iter().map(|l| l.weight).sum())),
            ("next_expiry_ms", ms(held.iter().map(|l| l.expires_us).min())),
            ("last_expiry_ms", ms(held.iter().map(|l| l.expires_us).max())),
        ])
    }
}

/// Unix ms at which a lease acquired at `now` for `lease_ns` ends (for replies and tests).
pub fn lease_end_ms(now: Nanos, lease_ns: Nanos) -> i64 {
    ceil_ms(now.saturating_add(lease_ns))
}

impl Declare for Leases {
    const NAME: &'static str = "concurrency";
    const PARAMS: [Param; 2] = [
        Param {
            name: "limit",
            form: ParamType::Whole,
            min: 1,
            max: MAX_LIMIT,
            unit: "weight in flight",
            errors: &[LIMIT],
        },
        Param { name: "lease", errors: &[LEASE], ..crate::window::WINDOW_PARAM },
    ];
    const GROUP: &'static str = "ACQUIRE";
    const COMMAND: &'static str = "RL.ACQUIRE";
    const SYNTAX: &'static str = "RL.ACQUIRE key limit lease id [WEIGHT w]";
    const FUNCTION: &'static str = "rl_acquire";
    const REQUEST: RequestForm = RequestForm::Lease;

    /// `limit lease`.
    fn parse([limit, lease]: [&[u8]; 2]) -> Result<Leases, ArgError> {
        let limit = whole_for(limit, LIMIT, 1)?;
        Ok(Leases::new(limit, lease_ns(lease)?)?)
    }

    /// The weight is checked first.
    fn precheck(request: RequestArgs<'_>) -> Result<(), ArgError> {
        if let RequestArgs::Lease { weight: Some(weight), .. } = request {
            parse_weight(weight)?;
        }
        Ok(())
    }

    /// `id [WEIGHT w]`.
    fn request(&self, args: RequestArgs<'_>, _: IdHash) -> Result<Acquire, ArgError> {
        let RequestArgs::Lease { id, weight } = args else { return Err(ArgError::Syntax) };
        let weight = weight.map_or(Ok(1), parse_weight)?;
        Ok(Acquire { id: holder(id)?, weight })
    }

    fn request_of(&self, units: u64, holder: Option<&[u8]>) -> Option<Acquire> {
        holder.map(|h| Acquire { id: LeaseId::of(h), weight: units.max(1) })
    }

    fn limit(&self) -> u64 {
        self.limit
    }

    fn period_ns(&self) -> Nanos {
        us_to_ns(self.lease_us)
    }

    fn share(&self, n: u64) -> Leases {
        Leases { limit: (self.limit / n).max(1), ..*self }
    }
}

/// A lease length: like a window, with the field named `lease`.
pub fn lease_ns(lease: &[u8]) -> Result<Nanos, ParamError> {
    window_ns(lease).map_err(|_| LEASE)
}

/// A lease's weight as written after `WEIGHT`.
pub fn parse_weight(weight: &[u8]) -> Result<u64, ParamError> {
    Leases::weight(whole(weight, WEIGHT.field, 1, WEIGHT.expected)?)
}

/// A holder's id: binary-safe, not empty.
pub fn holder(id: &[u8]) -> Result<LeaseId, ParamError> {
    if id.is_empty() {
        return Err(EMPTY_ID);
    }
    Ok(LeaseId::of(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::apply;
    use crate::time::NANOS_PER_SEC as SEC;
    use proptest::prelude::*;

    const T0: Nanos = 1_700_000_000 * SEC;

    fn acquire(l: &Leases, value: &mut Option<Vec<u8>>, now: Nanos, id: &str, weight: u64) -> Verdict {
        let o = l.decide(value.as_deref(), now, Acquire { id: LeaseId::of(id.as_bytes()), weight }).unwrap();
        store(value, o.write);
        o.verdict
    }

    fn store(value: &mut Option<Vec<u8>>, write: Option<Write>) {
        match write.map(|w| w.change) {
            Some(Change::Delete) => *value = None,
            Some(change) => apply(value.get_or_insert_with(Vec::new), &change),
            None => {}
        }
    }

    /// A record as release 0.2 wrote it: the id's SHA-256, truncated.
    fn record_of_0_2(id: &[u8], expires_us: u64, weight: u32) -> Vec<u8> {
        let mut v = b"RLA\x01".to_vec();
        v.extend_from_slice(&Sha256::digest(id)[..16]);
        v.extend_from_slice(&expires_us.to_le_bytes());
        v.extend_from_slice(&weight.to_le_bytes());
        v
    }

    #[test]
    fn ids_are_stored_as_sha1_and_records_of_0_2_still_match_their_holders() {
        let l = Leases::new(2, 10 * SEC).unwrap();
        let mut v = None;
        acquire(&l, &mut v, T0, "a", 1);
        assert_eq!(&v.as_ref().unwrap()[4..20], &Sha1::digest(b"a")[..16], "the first 16 bytes of SHA-1");
        let end_us = (T0 / 1000) as u64 + 5_000_000;
        // Re-acquired by its holder: the same slot, now under the SHA-1 digest.
        let mut old = Some(record_of_0_2(b"a", end_us, 1));
        let again = acquire(&l, &mut old, T0, "a", 1);
        assert_eq!((again.allowed, again.remaining), (true, 1), "no second slot");
        assert_eq!(old, v, "rewritten as this release writes it");
        // Renewed and released by its holder, never by another id.
        let old = Some(record_of_0_2(b"a", end_us, 1));
        assert!(!Leases::release(old.as_deref(), T0, LeaseId::of(b"b")).unwrap().0);
        assert!(Leases::release(old.as_deref(), T0, LeaseId::of(b"a")).unwrap().0);
        let (renewed, write) = Leases::renew(old.as_deref(), T0, LeaseId::of(b"a"), 10 * SEC).unwrap();
        let mut renewed_value = old.clone();
        store(&mut renewed_value, write);
        assert!(renewed);
        assert_eq!(renewed_value, v, "renewed under the SHA-1 digest");
    }

    #[test]
    fn holds_up_to_the_limit_and_frees_slots_on_release_and_expiry() {
        let l = Leases::new(2, 10 * SEC).unwrap();
        let mut v = None;
        assert_eq!(acquire(&l, &mut v, T0, "a", 1).remaining, 1);
        assert_eq!(acquire(&l, &mut v, T0 + SEC, "b", 1).remaining, 0);
        let denied = acquire(&l, &mut v, T0 + 2 * SEC, "c", 1);
        assert!(!denied.allowed);
        assert_eq!(denied.retry_after_ns, Some(8 * SEC), "until a's lease ends");
        assert_eq!(denied.reset_after_ns, 9 * SEC, "until b's lease ends");
        let again = acquire(&l, &mut v, T0 + 3 * SEC, "a", 1);
        assert!(again.allowed && again.remaining == 0, "a retry takes no other slot");
        let (released, write) = Leases::release(v.as_deref(), T0 + 3 * SEC, LeaseId::of(b"b")).unwrap();
        store(&mut v, write);
        assert!(released);
        assert!(!Leases::release(v.as_deref(), T0 + 3 * SEC, LeaseId::of(b"b")).unwrap().0, "idempotent");
        assert!(acquire(&l, &mut v, T0 + 3 * SEC, "c", 1).allowed);
        // a (renewed at 3 s) and c end at 13 s: then both slots are free without any call.
        assert_eq!(acquire(&l, &mut v, T0 + 13 * SEC, "d", 2).remaining, 0);
        assert_eq!(
            acquire(&l, &mut v, T0 + 13 * SEC, "e", 3).retry_after_ns,
            None,
            "weight 3 never fits in 2"
        );
    }

    #[test]
    fn renew_extends_a_held_lease_and_never_reacquires() {
        let l = Leases::new(1, SEC).unwrap();
        let mut v = None;
        acquire(&l, &mut v, T0, "a", 1);
        let (renewed, write) = Leases::renew(v.as_deref(), T0 + SEC / 2, LeaseId::of(b"a"), SEC).unwrap();
        store(&mut v, write);
        assert!(renewed);
        assert!(!acquire(&l, &mut v, T0 + SEC, "b", 1).allowed, "a holds it until 1.5 s");
        assert!(
            !Leases::renew(v.as_deref(), T0 + 2 * SEC, LeaseId::of(b"a"), SEC).unwrap().0,
            "expired: lost"
        );
        assert!(!Leases::renew(v.as_deref(), T0, LeaseId::of(b"x"), SEC).unwrap().0, "never held");
    }

    #[test]
    fn the_last_release_deletes_the_key_and_a_denial_writes_nothing() {
        let l = Leases::new(1, SEC).unwrap();
        let mut v = None;
        acquire(&l, &mut v, T0, "a", 1);
        let o = l.decide(v.as_deref(), T0, Acquire { id: LeaseId::of(b"b"), weight: 1 }).unwrap();
        assert_eq!(o.write, None);
        let (_, write) = Leases::release(v.as_deref(), T0, LeaseId::of(b"a")).unwrap();
        assert_eq!(write.unwrap().change, Change::Delete);
        assert_eq!(decode(b"RLT\x01\0\0\0\0\0\0\0\0"), Err(StateError));
        assert!(
            Leases::new(0, SEC).is_err() && Leases::new(100_001, SEC).is_err() && Leases::new(1, 0).is_err()
        );
    }

    #[test]
    fn a_lease_further_ahead_than_one_lease_counts_as_ending_one_lease_from_now() {
        let l = Leases::new(1, 10 * SEC).unwrap();
        let mut v = None;
        // Written by a clock an hour ahead (or by a call with an hour's lease).
        acquire(&Leases::new(1, 3600 * SEC).unwrap(), &mut v, T0, "ahead", 1);
        let denied = l.decide(v.as_deref(), T0, Acquire { id: LeaseId::of(b"b"), weight: 1 }).unwrap();
        assert!(!denied.verdict.allowed, "still held: a cut lease is not dropped");
        assert_eq!(denied.verdict.retry_after_ns, Some(10 * SEC), "one lease at most, not an hour");
        assert_eq!(denied.verdict.reset_after_ns, 10 * SEC);
        assert!(denied.repair, "the denial stores the cut");
        store(&mut v, denied.write);
        assert_eq!(live(v.as_deref(), now_us(T0)).unwrap()[0].expires_us, now_us(T0 + 10 * SEC));
        assert_eq!(
            l.decide(v.as_deref(), T0, Acquire { id: LeaseId::of(b"b"), weight: 1 }).unwrap().write,
            None,
            "once cut, a denial writes nothing"
        );
        assert!(!l.peek(v.as_deref(), T0 + 9 * SEC).unwrap().one.allowed, "never freed early");
        assert!(acquire(&l, &mut v, T0 + 10 * SEC, "b", 1).allowed, "free one lease later");
        // A renew cuts the others to its own lease too, and says 0 for a lease it does not hold.
        let mut w = None;
        acquire(&Leases::new(2, 3600 * SEC).unwrap(), &mut w, T0, "x", 1);
        let (renewed, write) = Leases::renew(w.as_deref(), T0, LeaseId::of(b"y"), SEC).unwrap();
        assert!(!renewed && write.is_some());
        store(&mut w, write);
        assert_eq!(live(w.as_deref(), now_us(T0)).unwrap()[0].expires_us, now_us(T0 + SEC));
    }

    proptest! {
        /// Whatever the interleaving of acquisitions, releases and time, the weight held never
        /// exceeds the limit, and what is stored is always readable.
        #[test]
        fn never_more_than_the_limit_in_flight(
            limit in 1u64..8,
            steps in proptest::collection::vec((0i64..3_000_000_000, 0u8..6, 1u64..4, any::<bool>()), 1..120),
        ) {
            let l = Leases::new(limit, 5 * SEC).unwrap();
            let mut v: Option<Vec<u8>> = None;
            let mut now = T0;
            for (gap, who, weight, release) in steps {
                now += gap;
                let id = LeaseId::of(&[who]);
                if release {
                    let (_, write) = Leases::release(v.as_deref(), now, id).unwrap();
                    store(&mut v, write);
                } else {
                    let verdict = acquire(&l, &mut v, now, &format!("{}", who as char), weight);
                    prop_assert!(verdict.remaining <= limit);
                }
                let held: u64 = live(v.as_deref(), now_us(now)).unwrap().iter().map(|l| l.weight).sum();
                prop_assert!(held <= limit, "held {} > limit {}", held, limit);
            }
        }
    }
}
