//! The in-process pre-check: a key that Redis denied stays denied, in this process, until the
//! `retry_after` Redis gave, without asking Redis again. It catches the obvious abuse (a client
//! hammering while denied) for free, and it is safe: other instances can only consume more, so the
//! same request cannot succeed earlier (a refund can make it succeed earlier; the pre-check then
//! denies for at most the old retry_after). Requests of a smaller cost still go to Redis. Bounded:
//! past `MAX_KEYS` keys, expired entries are dropped, then everything.

use crate::decision::Decision;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const MAX_KEYS: usize = 65_536;

#[derive(Default)]
pub struct DenialCache {
    denied: Mutex<HashMap<String, Denial>>,
}

#[derive(Clone)]
struct Denial {
    until: Instant,
    cost: u64,
    decision: Decision,
}

impl DenialCache {
    pub fn new() -> DenialCache {
        DenialCache::default()
    }

    /// The denial still in force for `key` at `now` for a request of `cost`, if any.
    pub fn check(&self, key: &str, cost: u64, now: Instant) -> Option<Decision> {
        let denied = self.denied.lock().unwrap_or_else(|e| e.into_inner());
        let d = denied.get(key).filter(|d| d.until > now && cost >= d.cost)?;
        let left = d.until - now;
        Some(Decision {
            retry_after: d.decision.retry_after.map(|_| ceil_ms(left)),
            // Time has passed since Redis answered: both waits are shorter by as much.
            reset_after: d
                .decision
                .reset_after
                .saturating_sub(d.decision.retry_after.unwrap_or_default().saturating_sub(left)),
            local: true,
            ..d.decision.clone()
        })
    }

    /// Remembers Redis' denial of `key` for a request of `cost`.
    pub fn remember(&self, key: &str, cost: u64, decision: &Decision, now: Instant) {
        let Some(retry) = decision.retry_after.filter(|_| !decision.allowed && !decision.degraded) else {
            return;
        };
        let mut denied = self.denied.lock().unwrap_or_else(|e| e.into_inner());
        if denied.len() >= MAX_KEYS {
            denied.retain(|_, d| d.until > now);
            if denied.len() >= MAX_KEYS {
                denied.clear();
            }
        }
        denied.insert(key.to_string(), Denial { until: now + retry, cost, decision: decision.clone() });
    }
}

fn ceil_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_nanos().div_ceil(1_000_000) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_holds_until_its_retry_after_for_the_same_or_larger_cost() {
        let cache = DenialCache::new();
        let t = Instant::now();
        let denial = Decision {
            allowed: false,
            limit: 10,
            remaining: 1,
            retry_after: Some(Duration::from_millis(200)),
            reset_after: Duration::from_millis(1800),
            limiting: 0,
            degraded: false,
            local: false,
        };
        cache.remember("k", 2, &denial, t);
        let held = cache.check("k", 2, t + Duration::from_millis(50)).expect("still denied");
        assert_eq!(
            (held.retry_after, held.reset_after),
            (Some(Duration::from_millis(150)), Duration::from_millis(1750))
        );
        assert!(cache.check("k", 1, t).is_none(), "a cheaper request may fit: ask Redis");
        assert!(cache.check("k", 3, t + Duration::from_millis(200)).is_none(), "expired");
        assert!(cache.check("other", 2, t).is_none());
    }
}
