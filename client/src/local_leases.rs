//! The in-process counting semaphore behind concurrency limits when Redis cannot decide
//! (`FailurePolicy::LocalFallback`, with the limit divided by the number of instances) and for an
//! in-process limiter (the whole limit): the same contract as RL.ACQUIRE / RL.RELEASE / RL.RENEW,
//! leases that end by themselves included, so a permit leaked here comes back too.

use crate::decision::Decision;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Past this many keys, keys whose leases all ended are dropped.
const MAX_KEYS: usize = 100_000;

struct Lease {
    id: String,
    ends: Instant,
    weight: u64,
}

#[derive(Default)]
pub(crate) struct LocalLeases {
    keys: Mutex<HashMap<String, Vec<Lease>>>,
}

/// What one key says about a lease of `weight` under `limit` (not taken yet).
pub(crate) struct Fit {
    pub decision: Decision,
    /// The id holds a lease there already: taking it again extends it.
    held: bool,
}

impl LocalLeases {
    /// Runs `f` with the table locked, so that fitting and taking several leases is one step.
    pub(crate) fn locked<T>(&self, f: impl FnOnce(&mut Table<'_>) -> T) -> T {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut Table { keys: &mut keys })
    }

    pub(crate) fn release(&self, key: &str, id: &str) -> bool {
        self.locked(|t| t.release(key, id, Instant::now()))
    }

    pub(crate) fn renew(&self, key: &str, lease: Duration, id: &str) -> bool {
        self.locked(|t| t.renew(key, lease, id, Instant::now()))
    }
}

pub(crate) struct Table<'a> {
    keys: &'a mut HashMap<String, Vec<Lease>>,
}

impl Table<'_> {
    fn held(&mut self, key: &str, now: Instant) -> Option<&mut Vec<Lease>> {
        let leases = self.keys.get_mut(key)?;
        leases.retain(|l| l.ends > now);
        Some(leases)
    }

    /// Whether a lease of `weight` for `id` fits under `limit` at `key` now.
    pub(crate) fn fit(&mut self, key: &str, limit: u64, weight: u64, id: &str, now: Instant) -> Fit {
        let leases: &[Lease] = self.held(key, now).map_or(&[], |l| l.as_slice());
        let held_weight: u64 = leases.iter().map(|l| l.weight).sum();
        let held = leases.iter().any(|l| l.id == id);
        let latest = leases.iter().map(|l| l.ends).max().map_or(Duration::ZERO, |e| e - now);
        let allowed = held || held_weight.saturating_add(weight) <= limit;
        let retry_after = if allowed {
            Some(Duration::ZERO)
        } else if weight > limit {
            None
        } else {
            // Until enough leases have ended, soonest first, for this one to fit.
            let mut ends: Vec<(Instant, u64)> = leases.iter().map(|l| (l.ends, l.weight)).collect();
            ends.sort();
            let mut freed = held_weight;
            let mut wait = Duration::ZERO;
            for (end, w) in ends {
                freed -= w;
                wait = end - now;
                if freed + weight <= limit {
                    break;
                }
            }
            Some(wait)
        };
        let remaining =
            if allowed && !held { limit - held_weight - weight } else { limit.saturating_sub(held_weight) };
        let decision = Decision {
            allowed,
            limit,
            remaining,
            retry_after,
            reset_after: latest,
            limiting: 0,
            degraded: false,
        };
        Fit { decision, held }
    }

    /// Takes (or extends) the lease `fit` allowed.
    pub(crate) fn take(
        &mut self,
        key: &str,
        fit: &Fit,
        weight: u64,
        lease: Duration,
        id: &str,
        now: Instant,
    ) {
        if self.keys.len() >= MAX_KEYS && !self.keys.contains_key(key) {
            self.keys.retain(|_, leases| leases.iter().any(|l| l.ends > now));
        }
        let leases = self.keys.entry(key.to_string()).or_default();
        match leases.iter_mut().find(|l| l.id == id).filter(|_| fit.held) {
            Some(l) => l.ends = now + lease,
            None => leases.push(Lease { id: id.to_string(), ends: now + lease, weight }),
        }
    }

    fn release(&mut self, key: &str, id: &str, now: Instant) -> bool {
        let Some(leases) = self.held(key, now) else { return false };
        let before = leases.len();
        leases.retain(|l| l.id != id);
        let released = leases.len() < before;
        if leases.is_empty() {
            self.keys.remove(key);
        }
        released
    }

    fn renew(&mut self, key: &str, lease: Duration, id: &str, now: Instant) -> bool {
        let Some(leases) = self.held(key, now) else { return false };
        match leases.iter_mut().find(|l| l.id == id) {
            Some(l) => {
                l.ends = now + lease;
                true
            }
            None => false,
        }
    }

    /// The weight held at `key` now (tests).
    #[cfg(test)]
    fn weight(&mut self, key: &str, now: Instant) -> u64 {
        self.held(key, now).map_or(0, |l| l.iter().map(|l| l.weight).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_fit_under_the_limit_and_end_by_themselves() {
        let leases = LocalLeases::default();
        let t = Instant::now();
        let lease = Duration::from_secs(10);
        leases.locked(|table| {
            for (id, allowed) in [("a", true), ("b", true), ("c", false)] {
                let fit = table.fit("k", 2, 1, id, t);
                assert_eq!(fit.decision.allowed, allowed, "{id}");
                if allowed {
                    table.take("k", &fit, 1, lease, id, t);
                }
            }
            let denied = table.fit("k", 2, 1, "c", t + Duration::from_secs(1));
            assert_eq!(
                denied.decision.retry_after,
                Some(Duration::from_secs(9)),
                "until the first lease ends"
            );
            assert!(table.fit("k", 2, 1, "a", t).decision.allowed, "a retry by a holder is the same request");
            assert_eq!(table.fit("k", 2, 3, "d", t).decision.retry_after, None, "never fits");
            assert!(!table.renew("k", lease, "c", t), "c holds nothing");
            assert!(table.release("k", "a", t) && !table.release("k", "a", t));
            assert!(table.renew("k", lease, "b", t + Duration::from_secs(5)));
            assert_eq!(table.weight("k", t + Duration::from_secs(12)), 1, "b was renewed");
            assert_eq!(table.weight("k", t + Duration::from_secs(15)), 0, "and then ended");
            assert!(!table.renew("k", lease, "b", t + Duration::from_secs(15)), "a renew never re-acquires");
        });
    }
}
