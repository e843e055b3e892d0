//! The in-process limiter: the local fallback, and `Limiter::in_process`.
//!
//! The local fallback: while Redis cannot decide, each application instance limits on its own at its
//! share of each limit. Imprecise by design: it keeps a rough bound and availability. One algorithm
//! serves every kind whose request is not a lease ([`Algorithm::of`]): core's `TokenBucket` of the
//! kind's limit refilled over its period, shared as a token bucket shares ([`fallback_of`]: `limit /
//! instances` tokens, at least 1, refilled `instances` times slower). A token bucket is then itself at
//! its share; a window or a log lets an instance admit at most its share in a burst, plus what refills
//! meanwhile: in any stretch of its period, at most the share plus `limit / instances`. Concurrency
//! limits keep core's leases. The contract says which kind is served how (`kinds[].fallback`), so no
//! client's fallback names a kind, and a new kind needs nothing here.
//!
//! `Limiter::in_process` decides each limit with its own kind's algorithm on the whole limit instead
//! (the sliding log approximated by the sliding counter). Both keep values in a map exactly as the
//! module stores them in keys, decided through core (`AnyLimit::decide`, `combine::all_or_nothing`).
//! Memory is bounded: past `MAX_KEYS` keys, state that is back to its initial value is dropped first,
//! then everything (a fresh start errs towards allowing, as failing open does).

use crate::command::Limit;
use crate::decision::Decision;
use crate::decision::Taken;
use crate::policy::Policy;
use ratelimit_core::combine::all_or_nothing;
use ratelimit_core::kind::{AnyLimit, AnyLimiter, Declare, LimiterKind, RequestForm};
use ratelimit_core::leases::{LeaseId, Leases};
use ratelimit_core::limiter::{apply, Change, Outcome, Write};
use ratelimit_core::sliding_counter::SlidingCounter;
use ratelimit_core::time::{ceil_ms, Nanos, NANOS_PER_MS};
use ratelimit_core::token_bucket::{Reserve, TokenBucket};
use ratelimit_core::verdict::Verdict;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The most keys the in-process limiter keeps: past it, expired state goes first, then everything.
pub const MAX_KEYS: usize = 100_000;

/// A stored value, as the module would store it, and when it stops mattering (Unix ns).
struct Entry {
    value: Vec<u8>,
    expires_at: Nanos,
}

/// How the fallback decides a kind's limits: the contract's `kinds[].fallback`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Core's token bucket of the kind's limit refilled over its period, at the instance's share.
    TokenBucket,
    /// Core's leases, acquired, renewed and released (a kind whose request is a lease).
    Leases,
}

impl Algorithm {
    pub fn of(kind: LimiterKind) -> Algorithm {
        match kind.request_form() {
            RequestForm::Lease => Algorithm::Leases,
            RequestForm::Cost | RequestForm::Id | RequestForm::Reserve => Algorithm::TokenBucket,
        }
    }

    /// Its name in the contract.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Leases => "leases",
        }
    }
}

/// The limiter the fallback decides `limiter`'s requests with at the share of one of `n` instances:
/// its leases, or core's token bucket of its limit refilled over its period (for a token bucket: the
/// same bucket), each shared as its kind shares. None when the clock cannot express the bucket (a
/// period within `limit` ns of the horizon).
pub fn fallback_of(limiter: AnyLimiter, n: u64) -> Option<AnyLimiter> {
    let own = match Algorithm::of(limiter.kind()) {
        Algorithm::Leases => limiter,
        Algorithm::TokenBucket => {
            let period = u128::try_from(limiter.period_ns()).ok()?;
            AnyLimiter::TokenBucket(TokenBucket::per_period(limiter.limit(), limiter.limit(), period).ok()?)
        }
    };
    Some(own.share(n))
}

pub struct LocalLimiter {
    /// The fallback of one of this many instances; None: each kind's own algorithm on the whole
    /// limit (`Limiter::in_process`).
    shared_by: Option<u64>,
    entries: Mutex<HashMap<String, Entry>>,
}

impl LocalLimiter {
    /// The local fallback of one of `instances` instances.
    pub fn fallback(instances: u32) -> LocalLimiter {
        LocalLimiter { shared_by: Some(u64::from(instances.max(1))), entries: Mutex::new(HashMap::new()) }
    }

    /// Each kind's own algorithm on the whole limit, as the module decides it (`Limiter::in_process`).
    pub fn in_process() -> LocalLimiter {
        LocalLimiter { shared_by: None, entries: Mutex::new(HashMap::new()) }
    }

    /// The limiter `policy`'s requests are decided with here; None when the clock cannot express it.
    fn limiter(&self, policy: &Policy) -> Option<AnyLimiter> {
        match self.shared_by {
            Some(n) => fallback_of(*policy.limiter(), n),
            None => Some(*policy.limiter()),
        }
    }

    /// The limit a denial that cannot be decided reports: this instance's share.
    fn share(&self, policy: &Policy) -> u64 {
        (policy.limit() / self.shared_by.unwrap_or(1)).max(1)
    }

    /// Decides `limits` together, the concurrency limits among them taking leases held by `id`
    /// (each with its share of the limit): all or nothing, like RL.ALL.
    pub fn acquire(&self, limits: &[Limit<'_>], id: &str, now: Nanos, degraded: bool) -> Decision {
        self.decide_for(limits, Some(id), now, degraded)
    }

    /// Frees the lease `id` holds at `key`, as RL.RELEASE does: true when it held one.
    pub fn release(&self, key: &str, id: &str, now: Nanos) -> bool {
        self.lease_op(key, now, |stored| Leases::release(stored, now, LeaseId::of(id.as_bytes())))
    }

    /// Extends the lease `id` holds at `key`, as RL.RENEW does: true when it still held one.
    pub fn renew(&self, key: &str, lease: Duration, id: &str, now: Nanos) -> bool {
        let lease_ns = Nanos::try_from(lease.as_nanos()).unwrap_or(Nanos::MAX);
        self.lease_op(key, now, |stored| Leases::renew(stored, now, LeaseId::of(id.as_bytes()), lease_ns))
    }

    fn lease_op(
        &self,
        key: &str,
        now: Nanos,
        op: impl FnOnce(Option<&[u8]>) -> Result<(bool, Option<Write>), ratelimit_core::error::StateError>,
    ) -> bool {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let stored = entries.get(key).filter(|e| e.expires_at > now).map(|e| e.value.as_slice());
        let Ok((done, write)) = op(stored) else { return false };
        if let Some(write) = write {
            store(&mut entries, key, &write, now);
        }
        done
    }

    /// Decides `limits` together at `now` (ns since the Unix epoch) while Redis cannot: a degraded
    /// decision.
    pub fn check(&self, limits: &[Limit<'_>], now: Nanos) -> Decision {
        self.decide(limits, now, true)
    }

    /// Decides `limits` together at `now`: allowed only if all allow, as the module does
    /// (`ratelimit_core::combine`). `degraded` says whether this stands in for Redis.
    pub fn decide(&self, limits: &[Limit<'_>], now: Nanos, degraded: bool) -> Decision {
        self.decide_for(limits, None, now, degraded)
    }

    /// Takes as many whole tokens as the token bucket of `limit` holds (at this instance's share
    /// under the fallback), up to `limit.cost`, as RL.TAKE does (core's `TokenBucket::take`).
    pub fn take(&self, limit: &Limit<'_>, now: Nanos, degraded: bool) -> Taken {
        self.reserve(limit, Reserve { cost: 1, upto: limit.cost, max_wait_ns: 0 }, now, degraded)
    }

    /// A reservation on the token bucket of `limit` (at this instance's share under the fallback),
    /// as RL.RESERVE decides it (core's `TokenBucket::reserve`).
    pub fn reserve(&self, limit: &Limit<'_>, request: Reserve, now: Nanos, degraded: bool) -> Taken {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let Some(AnyLimiter::TokenBucket(bucket)) = self.limiter(limit.policy) else {
            let verdict = never(self.share(limit.policy)).verdict;
            return Taken { decision: decision(verdict, 0, degraded), taken: 0 };
        };
        let stored = entries.get(limit.key).filter(|e| e.expires_at > now).map(|e| e.value.as_slice());
        // A value of another kind (the key's policy changed) counts as none.
        let (outcome, taken) = match bucket.reserve(stored, now, request) {
            Ok(result) => result,
            Err(_) => bucket.reserve(None, now, request).unwrap_or((never(bucket.capacity()), 0)),
        };
        if let Some(write) = &outcome.write {
            make_room(&mut entries, 1, now);
            store(&mut entries, limit.key, write, now);
        }
        Taken { decision: decision(outcome.verdict, 0, degraded), taken }
    }

    /// Gives `units` back to the limit of `policy` at `key` (this instance's share under the
    /// fallback), as RL.REFUND does; nothing for a kind that takes no refunds.
    pub fn refund(&self, key: &str, policy: &Policy, units: u64, now: Nanos) {
        let Some(limiter) = self.limiter(policy).filter(|_| policy.kind().refunds()) else { return };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let stored = entries.get(key).filter(|e| e.expires_at > now).map(|e| e.value.as_slice());
        if let Some(Ok((Some(write), _))) = limiter.refund(stored, now, units) {
            store(&mut entries, key, &write, now);
        }
    }

    /// `decide`, with the leases of concurrency limits held by `id` (none without an id: a check
    /// cannot take a lease it could never release).
    fn decide_for(&self, limits: &[Limit<'_>], id: Option<&str>, now: Nanos, degraded: bool) -> Decision {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let outcomes: Vec<Outcome> = limits
            .iter()
            .map(|l| {
                let stored = entries.get(l.key).filter(|e| e.expires_at > now).map(|e| e.value.as_slice());
                match self.limiter(l.policy) {
                    Some(limiter) => decide(limiter, stored, now, l.cost, id),
                    None => never(self.share(l.policy)),
                }
            })
            .collect();
        let Some(combined) = all_or_nothing(outcomes) else {
            let nothing =
                Verdict { allowed: true, limit: 0, remaining: 0, retry_after_ns: Some(0), reset_after_ns: 0 };
            return decision(nothing, 0, degraded);
        };
        make_room(&mut entries, limits.len(), now);
        for (limit, outcome) in limits.iter().zip(&combined.outcomes) {
            if let Some(write) = &outcome.write {
                store(&mut entries, limit.key, write, now);
            }
        }
        decision(combined.verdict, combined.limiting, degraded)
    }
}

/// Room for `more` keys within `MAX_KEYS`: expired state goes first, then everything.
fn make_room(entries: &mut HashMap<String, Entry>, more: usize, now: Nanos) {
    if entries.len() + more > MAX_KEYS {
        entries.retain(|_, e| e.expires_at > now);
        if entries.len() + more > MAX_KEYS {
            entries.clear();
        }
    }
}

/// Stores a write as the module would: the value changed in place, with its expiry; deleted.
fn store(entries: &mut HashMap<String, Entry>, key: &str, write: &Write, now: Nanos) {
    if write.change == Change::Delete {
        entries.remove(key);
        return;
    }
    let entry = entries.entry(key.to_string()).or_insert(Entry { value: Vec::new(), expires_at: 0 });
    if entry.expires_at <= now {
        entry.value.clear();
    }
    apply(&mut entry.value, &write.change);
    entry.expires_at = write.expiry.latest_ms().saturating_mul(NANOS_PER_MS);
}

fn decision(v: Verdict, limiting: usize, degraded: bool) -> Decision {
    let ms = |ns: Nanos| Duration::from_millis(ceil_ms(ns) as u64);
    Decision {
        allowed: v.allowed,
        limit: v.limit,
        remaining: v.remaining,
        retry_after: v.retry_after_ns.map(ms),
        reset_after: ms(v.reset_after_ns),
        limiting,
        degraded,
        local: false,
    }
}

/// One limit's outcome from a core limiter; a concurrency limit takes a lease for `id`.
fn decide(limiter: AnyLimiter, stored: Option<&[u8]>, now: Nanos, cost: u64, id: Option<&str>) -> Outcome {
    let limit = match limiter {
        // In process, the sliding log, which keeps every request, is approximated by the sliding
        // counter: O(1) memory per key. (The fallback has made it a token bucket already.)
        AnyLimiter::SlidingLog(log) => SlidingCounter::new(log.limit(), log.period_ns())
            .ok()
            .map(|counter| AnyLimit::SlidingCounter(counter, cost)),
        other => other.request_of(cost, id.map(str::as_bytes)),
    };
    let Some(limit) = limit else { return never(limiter.limit()) };
    // A value of another kind (the key's policy changed) counts as none.
    limit.decide(stored, now).or_else(|_| limit.decide(None, now)).unwrap_or_else(|_| never(limiter.limit()))
}

/// A limit the clock cannot express at the share: deny.
fn never(limit: u64) -> Outcome {
    Outcome {
        verdict: Verdict { allowed: false, limit, remaining: 0, retry_after_ns: None, reset_after_ns: 0 },
        write: None,
        repair: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;

    #[test]
    fn each_instance_gets_its_share_and_limits_are_checked_together() {
        let local = LocalLimiter::fallback(2);
        let route = Policy::token_bucket(10, 5.0).unwrap();
        let global = Policy::token_bucket(4, 1.0).unwrap();
        let now = 1_700_000_000_000_000_000;
        let allowed = (0..10).filter(|_| local.check(&[Limit::new("k", &route, 1)], now).allowed).count();
        assert_eq!(allowed, 5, "half of capacity 10 on one of two instances");
        let both = [Limit::new("r2", &route, 1), Limit::new("g", &global, 1)];
        let decisions: Vec<Decision> = (0..3).map(|_| local.check(&both, now)).collect();
        assert!(decisions[0].allowed && decisions[1].allowed && !decisions[2].allowed);
        assert_eq!((decisions[2].limiting, decisions[2].limit), (1, 2));
        assert!(decisions.iter().all(|d| d.degraded));
        // The denial took nothing from the route limit: 5 - 2 left there.
        assert_eq!(local.check(&[Limit::new("r2", &route, 0)], now).remaining, 3);
        let fixed = Policy::fixed_window(4, Duration::from_secs(1)).unwrap();
        let allowed = (0..5).filter(|_| local.check(&[Limit::new("f", &fixed, 1)], now).allowed).count();
        assert_eq!(allowed, 2);
    }

    #[test]
    fn a_token_bucket_is_its_own_fallback_at_its_share() {
        for capacity in [1, 2, 3, 7, 10, 1000, 1 << 40] {
            for rate in [0.001, 0.3, 1.0, 3.0, 7.0, 5_000.0, 3e8] {
                let Ok(policy) = Policy::token_bucket(capacity, rate) else { continue };
                for n in [1, 2, 3, 7, 1000] {
                    let bucket = *policy.limiter();
                    assert_eq!(fallback_of(bucket, n), Some(bucket.share(n)), "{capacity} at {rate}/s, {n}");
                }
            }
        }
    }

    #[test]
    fn every_rate_kind_is_one_bucket_of_its_limit_over_its_period_at_the_share() {
        let sec = 1_000_000_000;
        let now = 1_700_000_000_000_000_000;
        for (i, policy) in [
            Policy::fixed_window(10, Duration::from_secs(1)).unwrap(),
            Policy::sliding_counter(10, Duration::from_secs(1)).unwrap(),
            Policy::sliding_log(10, Duration::from_secs(1)).unwrap(),
        ]
        .iter()
        .enumerate()
        {
            let expected = TokenBucket::per_period(10, 10, sec as u128).unwrap().share(3);
            assert_eq!(fallback_of(*policy.limiter(), 3), Some(AnyLimiter::TokenBucket(expected)));
            let local = LocalLimiter::fallback(3);
            let key = format!("k{i}");
            let check = |at: Nanos| local.check(&[Limit::new(&key, policy, 1)], at);
            let burst: Vec<Decision> = (0..5).map(|_| check(now)).collect();
            assert_eq!(
                burst.iter().filter(|d| d.allowed).count(),
                3,
                "the share of 10 on one of 3 instances"
            );
            assert_eq!((burst[4].limit, burst[4].retry_after), (3, Some(Duration::from_millis(300))));
            // Refilled at a third of 10 per second: one every 300 ms, so in the second after the
            // burst 3 more (the share plus limit / instances in the period).
            let admitted = (1..=10).filter(|k| check(now + k * sec / 10).allowed).count();
            assert_eq!(admitted, 3);
        }
        let concurrency = Policy::concurrency(4, Duration::from_secs(1)).unwrap();
        assert_eq!(fallback_of(*concurrency.limiter(), 2), Some(concurrency.limiter().share(2)), "leases");
    }

    #[test]
    fn leases_are_the_module_s_own_shared_out_released_renewed_and_ending_by_themselves() {
        let local = LocalLimiter::fallback(2);
        let policy = Policy::concurrency(4, Duration::from_secs(10)).unwrap();
        let now = 1_700_000_000_000_000_000;
        let sec = 1_000_000_000;
        let take = |id: &str, at: Nanos| local.acquire(&[Limit::new("k", &policy, 1)], id, at, true);
        assert!(take("a", now).allowed && take("b", now).allowed, "half of 4 on one of two instances");
        let denied = take("c", now + sec);
        assert!(!denied.allowed && denied.degraded);
        assert_eq!(denied.retry_after, Some(Duration::from_secs(9)), "until the first lease ends");
        assert!(take("a", now + sec).allowed, "a retry by a holder is the same request");
        assert!(!local.renew("k", Duration::from_secs(10), "c", now + sec), "c holds nothing");
        assert!(local.release("k", "a", now + sec) && !local.release("k", "a", now + sec));
        assert!(local.renew("k", Duration::from_secs(10), "b", now + 5 * sec));
        assert!(take("d", now + 12 * sec).allowed, "a's slot is free");
        assert!(!take("e", now + 12 * sec).allowed, "b (renewed to 15 s) and d hold both");
        assert!(take("f", now + 16 * sec).allowed, "b's renewed lease ended at 15 s by itself");
        let bucket = Policy::token_bucket(2, 0.001).unwrap();
        let both = [Limit::new("t", &bucket, 1), Limit::new("k2", &policy, 1)];
        assert!(local.acquire(&both, "g", now, true).allowed);
        assert!(!local.acquire(&both, "h", now, true).allowed, "the bucket is empty: no lease taken");
        assert!(!local.release("k2", "h", now), "the denied request holds nothing");
    }

    #[test]
    fn take_takes_what_the_share_holds_up_to_max_and_then_says_when_one_is_back() {
        let local = LocalLimiter::fallback(2);
        let bucket = Policy::token_bucket(10, 1.0).unwrap();
        let now = 1_700_000_000_000_000_000;
        let take = |max: u64, at: Nanos| local.take(&Limit::new("w", &bucket, max), at, true);
        let first = take(3, now);
        assert_eq!((first.taken, first.decision.remaining), (3, 2), "3 of the share of 5");
        assert!(first.decision.allowed && first.decision.degraded);
        assert_eq!(take(100, now).taken, 2, "what is left, not the 100 asked");
        let empty = take(4, now);
        assert_eq!(empty.taken, 0);
        assert!(!empty.decision.allowed);
        assert_eq!(empty.decision.retry_after, Some(Duration::from_secs(2)), "one token at half the rate");
        assert_eq!(take(4, now + 4_000_000_000).taken, 2, "refilled at 0.5 per second");
    }
}
