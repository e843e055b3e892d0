//! The local fallback: while Redis cannot decide, each application instance limits on its own with
//! the same algorithms (`ratelimit-core`) and its share of the limit (limit / instances). Imprecise by
//! design: it keeps a rough bound and availability. Its memory is bounded: past `MAX_KEYS` keys, state
//! that is back to its initial value is dropped first, then everything (a fresh start errs towards
//! allowing, as failing open does).

use crate::command::Limit;
use crate::decision::Decision;
use crate::policy::{Kind, Policy, Window};
use ratelimit_core::decimal::Decimal;
use ratelimit_core::fixed_window::{FixedWindow, WindowState};
use ratelimit_core::sliding_counter::{CounterState, SlidingCounter};
use ratelimit_core::time::{ceil_ms, Nanos};
use ratelimit_core::token_bucket::TokenBucket;
use ratelimit_core::verdict::{most_restrictive, Verdict};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

const MAX_KEYS: usize = 100_000;

#[derive(Clone, Copy)]
enum State {
    Tat(Nanos),
    Fixed(WindowState),
    Counter(CounterState),
}

/// A stored state and when it stops mattering.
struct Entry {
    state: State,
    expires_at: Nanos,
}

pub(crate) struct LocalLimiter {
    instances: u32,
    entries: Mutex<HashMap<String, Entry>>,
}

/// One limit's decision and the state to store when the whole request is allowed.
struct Step {
    verdict: Verdict,
    next: Option<Entry>,
}

impl LocalLimiter {
    pub(crate) fn new(instances: u32) -> LocalLimiter {
        LocalLimiter { instances: instances.max(1), entries: Mutex::new(HashMap::new()) }
    }

    /// Decides `limits` together at `now` (ns since the Unix epoch): allowed only if all allow.
    pub(crate) fn check(&self, limits: &[Limit<'_>], now: Nanos) -> Decision {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let steps: Vec<Step> = limits
            .iter()
            .map(|l| step(&l.policy.share(self.instances), entries.get(l.key).map(|e| e.state), now, l.cost))
            .collect();
        let allowed = steps.iter().all(|s| s.verdict.allowed);
        let limiting = most_restrictive(steps.iter().map(|s| s.verdict)).unwrap_or(0);
        let verdict = steps.get(limiting).map(|s| s.verdict);
        if allowed {
            if entries.len() + limits.len() > MAX_KEYS {
                entries.retain(|_, e| e.expires_at > now);
                if entries.len() + limits.len() > MAX_KEYS {
                    entries.clear();
                }
            }
            for (limit, step) in limits.iter().zip(steps) {
                if let Some(next) = step.next {
                    entries.insert(limit.key.to_string(), next);
                }
            }
        }
        let v = verdict.unwrap_or(Verdict {
            allowed,
            limit: 0,
            remaining: 0,
            retry_after_ns: Some(0),
            reset_after_ns: 0,
        });
        let ms = |ns: Nanos| Duration::from_millis(ceil_ms(ns) as u64);
        Decision {
            allowed,
            limit: v.limit,
            remaining: v.remaining,
            retry_after: v.retry_after_ns.map(ms),
            reset_after: ms(v.reset_after_ns),
            limiting,
            degraded: true,
        }
    }
}

fn step(policy: &Policy, state: Option<State>, now: Nanos, cost: u64) -> Step {
    let window_ns = |w: &Duration| Nanos::try_from(w.as_nanos()).unwrap_or(Nanos::MAX);
    match policy.kind() {
        Kind::Token { capacity, rate } => {
            let bucket =
                Decimal::parse(rate.text.as_bytes()).ok().and_then(|r| TokenBucket::new(*capacity, r).ok());
            let Some(bucket) = bucket else { return never(*capacity) };
            let tat = match state {
                Some(State::Tat(t)) => Some(t),
                _ => None,
            };
            let d = bucket.decide(tat, now, cost);
            let next = d.new_tat.map(|t| Entry { state: State::Tat(t), expires_at: t });
            Step { verdict: d.verdict, next }
        }
        Kind::Window { algorithm: Window::Fixed, limit, window } => {
            let Some(fixed) = FixedWindow::new(*limit, window_ns(window)) else { return never(*limit) };
            let previous = match state {
                Some(State::Fixed(s)) => Some(s),
                _ => None,
            };
            let d = fixed.decide(previous, now, cost);
            let next = d.new_state.map(|s| Entry { state: State::Fixed(s), expires_at: s.ends_at });
            Step { verdict: d.verdict, next }
        }
        // The sliding log is approximated by the sliding counter: O(1) memory per key in the process.
        Kind::Window { limit, window, .. } => {
            let Some(counter) = SlidingCounter::new(*limit, window_ns(window)) else { return never(*limit) };
            let previous = match state {
                Some(State::Counter(s)) => Some(s),
                _ => None,
            };
            let d = counter.decide(previous, now, cost);
            let next = d.new_state.map(|s| Entry { state: State::Counter(s), expires_at: d.expires_at });
            Step { verdict: d.verdict, next }
        }
    }
}

/// A share that cannot be computed (a rate divided below what the clock expresses): deny.
fn never(limit: u64) -> Step {
    Step {
        verdict: Verdict { allowed: false, limit, remaining: 0, retry_after_ns: None, reset_after_ns: 0 },
        next: None,
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
