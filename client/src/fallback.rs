//! The local fallback: while Redis cannot decide, each application instance limits on its own with
//! the same algorithms (`ratelimit-core`) and its share of the limit (limit / instances). Imprecise by
//! design: it keeps a rough bound and availability. Its memory is bounded: past `MAX_KEYS` keys, state
//! that is back to its initial value is dropped first, then everything (a fresh start errs towards
//! allowing, as failing open does).

use crate::command::Limit;
use crate::decision::Decision;
use crate::local_leases::LocalLeases;
use crate::policy::{Kind, Policy, Window};
use ratelimit_core::combine::all_or_nothing;
use ratelimit_core::decimal::Decimal;
use ratelimit_core::fixed_window::FixedWindow;
use ratelimit_core::limiter::{apply, Limiter, Outcome};
use ratelimit_core::sliding_counter::SlidingCounter;
use ratelimit_core::time::{ceil_ms, Nanos, NANOS_PER_MS};
use ratelimit_core::token_bucket::TokenBucket;
use ratelimit_core::verdict::Verdict;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MAX_KEYS: usize = 100_000;

/// A stored value, as the module would store it, and when it stops mattering (Unix ns).
struct Entry {
    value: Vec<u8>,
    expires_at: Nanos,
}

pub(crate) struct LocalLimiter {
    instances: u32,
    entries: Mutex<HashMap<String, Entry>>,
    /// The concurrency limits' leases.
    pub(crate) leases: LocalLeases,
}

impl LocalLimiter {
    pub(crate) fn new(instances: u32) -> LocalLimiter {
        LocalLimiter {
            instances: instances.max(1),
            entries: Mutex::new(HashMap::new()),
            leases: LocalLeases::default(),
        }
    }

    /// Decides `limits` together, taking the concurrency limits among them as leases held by `id`
    /// (each with its share of the limit): all or nothing, like RL.ALL. The leases are checked first,
    /// then the rate limits (which take only when they allow), then the leases are taken, all under
    /// the leases' lock, so nobody takes a slot in between.
    pub(crate) fn acquire(&self, limits: &[Limit<'_>], id: &str, now: Nanos, degraded: bool) -> Decision {
        let instant = Instant::now();
        self.leases.locked(|table| {
            let mut fits = Vec::new();
            for (position, l) in limits.iter().enumerate() {
                if let Kind::Lease { lease, .. } = l.policy.kind() {
                    let limit = l.policy.share(self.instances).limit();
                    let fit = table.fit(l.key, limit, l.cost.max(1), id, instant);
                    if !fit.decision.allowed {
                        return Decision { limiting: position, degraded, ..fit.decision };
                    }
                    fits.push((position, fit, *lease));
                }
            }
            let rate: Vec<(usize, Limit<'_>)> =
                limits.iter().copied().enumerate().filter(|(_, l)| !l.policy.is_concurrency()).collect();
            let mut decision = None;
            if !rate.is_empty() {
                let only: Vec<Limit<'_>> = rate.iter().map(|(_, l)| *l).collect();
                let d = self.decide(&only, now, degraded);
                let d = Decision { limiting: rate[d.limiting.min(rate.len() - 1)].0, ..d };
                if !d.allowed {
                    return d;
                }
                decision = Some(d);
            }
            for (position, fit, lease) in &fits {
                let l = &limits[*position];
                table.take(l.key, fit, l.cost.max(1), *lease, id, instant);
                let tighter = decision.as_ref().is_none_or(|d| fit.decision.remaining < d.remaining);
                if tighter {
                    decision = Some(Decision { limiting: *position, degraded, ..fit.decision.clone() });
                }
            }
            decision.unwrap_or_else(|| self.decide(&[], now, degraded))
        })
    }

    /// Decides `limits` together at `now` (ns since the Unix epoch) while Redis cannot: a degraded
    /// decision.
    pub(crate) fn check(&self, limits: &[Limit<'_>], now: Nanos) -> Decision {
        self.decide(limits, now, true)
    }

    /// Decides `limits` together at `now`: allowed only if all allow, as the module does
    /// (`ratelimit_core::combine`). `degraded` says whether this stands in for Redis.
    pub(crate) fn decide(&self, limits: &[Limit<'_>], now: Nanos, degraded: bool) -> Decision {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let outcomes: Vec<Outcome> = limits
            .iter()
            .map(|l| {
                let stored = entries.get(l.key).filter(|e| e.expires_at > now).map(|e| e.value.as_slice());
                decide(&l.policy.share(self.instances), stored, now, l.cost)
            })
            .collect();
        let Some(combined) = all_or_nothing(outcomes) else {
            let nothing =
                Verdict { allowed: true, limit: 0, remaining: 0, retry_after_ns: Some(0), reset_after_ns: 0 };
            return decision(nothing, 0, degraded);
        };
        if entries.len() + limits.len() > MAX_KEYS {
            entries.retain(|_, e| e.expires_at > now);
            if entries.len() + limits.len() > MAX_KEYS {
                entries.clear();
            }
        }
        for (limit, outcome) in limits.iter().zip(&combined.outcomes) {
            if let Some(write) = &outcome.write {
                let entry = entries
                    .entry(limit.key.to_string())
                    .or_insert(Entry { value: Vec::new(), expires_at: 0 });
                if entry.expires_at <= now {
                    entry.value.clear();
                }
                apply(&mut entry.value, &write.change);
                entry.expires_at = write.expiry.latest_ms().saturating_mul(NANOS_PER_MS);
            }
        }
        decision(combined.verdict, combined.limiting, degraded)
    }
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
    }
}

/// One limit's outcome from the core limiter its policy builds.
fn decide(policy: &Policy, stored: Option<&[u8]>, now: Nanos, cost: u64) -> Outcome {
    let window_ns = |w: &Duration| Nanos::try_from(w.as_nanos()).unwrap_or(Nanos::MAX);
    let limit = policy.limit();
    match policy.kind() {
        Kind::Token { capacity, rate } => {
            match Decimal::parse(rate.text.as_bytes()).ok().and_then(|r| TokenBucket::new(*capacity, r).ok())
            {
                Some(bucket) => run(&bucket, stored, now, cost),
                None => never(limit),
            }
        }
        Kind::Window { algorithm: Window::Fixed, window, .. } => {
            match FixedWindow::new(limit, window_ns(window)) {
                Ok(fixed) => run(&fixed, stored, now, cost),
                Err(_) => never(limit),
            }
        }
        // Leases are held by the semaphore of `local_leases`, not here: a check cannot take one.
        Kind::Lease { .. } => never(limit),
        // The sliding log is approximated by the sliding counter: O(1) memory per key in the process.
        Kind::Window { window, .. } => match SlidingCounter::new(limit, window_ns(window)) {
            Ok(counter) => run(&counter, stored, now, cost),
            Err(_) => never(limit),
        },
    }
}

/// A value of another kind (the key's policy changed) counts as none.
fn run<L: Limiter<Request = u64>>(limiter: &L, stored: Option<&[u8]>, now: Nanos, cost: u64) -> Outcome {
    limiter
        .decide(stored, now, cost)
        .or_else(|_| limiter.decide(None, now, cost))
        .unwrap_or_else(|_| never(0))
}

/// A share that cannot be computed (a rate divided below what the clock expresses): deny.
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

    #[test]
    fn each_instance_gets_its_share_and_limits_are_checked_together() {
        let local = LocalLimiter::new(2);
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
}
