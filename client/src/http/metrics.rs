//! What the layer counts: `ratelimit_http_requests_total{route, limit, outcome}`, one increment per
//! decision, through the `metrics` facade (the application installs the exporter).

use crate::decision::Decision;
use std::sync::Arc;

/// `ratelimit_http_requests_total{route, limit, outcome}` through the `metrics` facade: `limit` is the
/// policy the decision describes (the route's, or `all` for the global one); for the lists' outcomes,
/// the route's name.
pub(super) fn record(route: &Arc<str>, limit: &Arc<str>, outcome: &'static str) {
    let (route, limit) =
        (metrics::SharedString::from(Arc::clone(route)), metrics::SharedString::from(Arc::clone(limit)));
    metrics::counter!("ratelimit_http_requests_total", "route" => route, "limit" => limit, "outcome" => outcome)
        .increment(1);
}

/// The `outcome` label of a decision; a shadow limit's says what enforcing it would have done.
pub(super) fn outcome_of(d: &Decision, shadow: bool) -> &'static str {
    const LABELS: [[&str; 4]; 2] = [
        ["denied", "allowed", "degraded_denied", "degraded_allowed"],
        ["shadow_denied", "shadow_allowed", "shadow_degraded_denied", "shadow_degraded_allowed"],
    ];
    LABELS[usize::from(shadow)][usize::from(d.allowed) + 2 * usize::from(d.degraded)]
}
