//! Counts of decisions, kept per limiter (for tests and status pages) and exported through the
//! `metrics` facade as `ratelimit_client_decisions_total{limiter, outcome}` (outcome: allowed, denied,
//! degraded_allowed, degraded_denied), where any metrics recorder (Prometheus, StatsD, ...) picks them up.

use crate::decision::Decision;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// A snapshot of a limiter's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub allowed: u64,
    pub denied: u64,
    /// Decisions the failure policy made (included in allowed / denied).
    pub degraded: u64,
    /// Calls that never reached Redis because the breaker was open (included in degraded).
    pub short_circuited: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    allowed: AtomicU64,
    denied: AtomicU64,
    degraded: AtomicU64,
    short_circuited: AtomicU64,
}

impl Counters {
    pub(crate) fn record(&self, limiter: &Arc<str>, d: &Decision, short_circuited: bool) {
        let outcome = match (d.allowed, d.degraded) {
            (true, false) => "allowed",
            (false, false) => "denied",
            (true, true) => "degraded_allowed",
            (false, true) => "degraded_denied",
        };
        // An Arc label: shared, not copied per decision.
        let limiter = metrics::SharedString::from(Arc::clone(limiter));
        metrics::counter!("ratelimit_client_decisions_total", "limiter" => limiter, "outcome" => outcome)
            .increment(1);
        let counter = if d.allowed { &self.allowed } else { &self.denied };
        counter.fetch_add(1, Relaxed);
        if d.degraded {
            self.degraded.fetch_add(1, Relaxed);
        }
        if short_circuited {
            self.short_circuited.fetch_add(1, Relaxed);
        }
    }

    pub(crate) fn snapshot(&self) -> Counts {
        Counts {
            allowed: self.allowed.load(Relaxed),
            denied: self.denied.load(Relaxed),
            degraded: self.degraded.load(Relaxed),
            short_circuited: self.short_circuited.load(Relaxed),
        }
    }
}
