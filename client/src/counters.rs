//! Counts of decisions, kept per limiter (for tests and status pages) and exported through the
//! `metrics` facade as `ratelimit_client_decisions_total{limiter, outcome}` (outcome: allowed, denied,
//! degraded_allowed, degraded_denied), where any metrics recorder (Prometheus, StatsD, ...) picks them up.
//! Outages (`outage.rs`) as events beside them: `ratelimit_outages_total{limiter}` (outages started),
//! `ratelimit_outage_decisions_total{limiter, allowed}` (decisions the failure policy made during
//! one; `allowed` is `true` or `false`), `ratelimit_configuration_faults_total{limiter}` (calls
//! answered with an unknown or refused command), `ratelimit_conflicts_total{limiter}` (calls whose key
//! held another limiter's state) and `ratelimit_usage_errors_total{limiter}` (the caller's mistakes).

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
    /// Outages started (calls that got no answer while none was under way; docs/errors.md).
    pub outages: u64,
    /// Calls answered with a configuration fault (NOPERM, an unknown command; decided by the failure
    /// policy).
    pub misconfigured: u64,
    /// Calls whose key held another limiter's state or another type (decided by the failure policy).
    pub conflicts: u64,
    /// Calls refused as the caller's mistake (no decision; docs/errors.md).
    pub usage_errors: u64,
    /// Decisions made in this process without a round trip (pre-check denials, batched units;
    /// included in allowed / denied; docs/high-volume.md).
    pub local: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    allowed: AtomicU64,
    denied: AtomicU64,
    degraded: AtomicU64,
    short_circuited: AtomicU64,
    outages: AtomicU64,
    misconfigured: AtomicU64,
    conflicts: AtomicU64,
    usage_errors: AtomicU64,
    local: AtomicU64,
}

impl Counters {
    /// An outage started (`outage.rs` logs it).
    pub(crate) fn outage(&self, limiter: &Arc<str>) {
        count(&self.outages, "ratelimit_outages_total", limiter);
    }

    /// A call was answered with a configuration fault (`outage.rs` logs it).
    pub(crate) fn misconfigured(&self, limiter: &Arc<str>) {
        count(&self.misconfigured, "ratelimit_configuration_faults_total", limiter);
    }

    /// A call's key held another limiter's state or another type (`outage.rs` logs it).
    pub(crate) fn conflict(&self, limiter: &Arc<str>) {
        count(&self.conflicts, "ratelimit_conflicts_total", limiter);
    }

    /// A call was the caller's mistake (refused before sending, or answered as one).
    pub(crate) fn usage_error(&self, limiter: &Arc<str>) {
        count(&self.usage_errors, "ratelimit_usage_errors_total", limiter);
    }

    /// A decision was made here, without a round trip (recorded as well).
    pub(crate) fn local(&self, limiter: &Arc<str>) {
        count(&self.local, "ratelimit_local_decisions_total", limiter);
    }

    pub(crate) fn record(&self, limiter: &Arc<str>, d: &Decision, short_circuited: bool) {
        let outcome = match (d.allowed, d.degraded) {
            (true, false) => "allowed",
            (false, false) => "denied",
            (true, true) => "degraded_allowed",
            (false, true) => "degraded_denied",
        };
        // An Arc label: shared, not copied per decision.
        metrics::counter!("ratelimit_client_decisions_total", "limiter" => label(limiter), "outcome" => outcome)
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
            outages: self.outages.load(Relaxed),
            misconfigured: self.misconfigured.load(Relaxed),
            conflicts: self.conflicts.load(Relaxed),
            usage_errors: self.usage_errors.load(Relaxed),
            local: self.local.load(Relaxed),
        }
    }
}

fn label(limiter: &Arc<str>) -> metrics::SharedString {
    metrics::SharedString::from(Arc::clone(limiter))
}

/// One more of `counter`, and of the `metrics` counter `metric{limiter}`.
fn count(counter: &AtomicU64, metric: &'static str, limiter: &Arc<str>) {
    counter.fetch_add(1, Relaxed);
    metrics::counter!(metric, "limiter" => label(limiter)).increment(1);
}

/// The failure policy decided during an outage.
pub(crate) fn outage_decision(limiter: &Arc<str>, allowed: bool) {
    let allowed = if allowed { "true" } else { "false" };
    metrics::counter!("ratelimit_outage_decisions_total", "limiter" => label(limiter), "allowed" => allowed)
        .increment(1);
}
