//! The calls to Redis for one request: its enforced limits (and concurrency slots) in one RL.ALL
//! call, then, if they let it through, its shadow limits in another, counted and never enforced.

use super::config::Config;
use super::denial::{AnswerStyle, Denial, DenialKind};
use super::metrics::{outcome_of, record};
use super::plan::{Plan, PlannedLimit};
use super::response::RateHeaders;
use crate::command::Limit;
use crate::decision::Decision;
use crate::limiter::FailurePolicy;
use crate::permit::{Acquired, Permit};
use http::Response;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

/// What the checks decided about a request.
pub(super) enum Verdict {
    /// Turned away with this answer.
    Denied(Response<String>),
    /// Served: its response gets `headers` (none when no rate limit was enforced, or a lease was the
    /// tightest limit), its body holds `permit` (the concurrency slots, if any) until sent or dropped.
    Served { headers: Option<RateHeaders>, permit: Option<Permit> },
}

/// The checks of one request, boxed (an async fn's future has no name to store it by): the one boxed
/// future of a limited request; a request the layer does not limit has none.
pub(super) type Checks = Pin<Box<dyn Future<Output = Verdict> + Send>>;

/// Checks the request `plan` describes: the enforced limits first; after they allowed, in a call of
/// its own, the shadow limits, unless Redis just failed to answer (a second deadline for a decision
/// nobody enforces).
pub(super) async fn enforce(config: Arc<Config>, plan: Plan) -> Verdict {
    let (shadow, enforced): (Vec<&PlannedLimit>, Vec<&PlannedLimit>) =
        plan.limits.iter().partition(|l| l.shadow);
    let (mut headers, mut permit, mut redis_answered) = (None, None, true);
    if !enforced.is_empty() {
        let (decision, limiting, held) = config.check_or_acquire(&enforced).await;
        record(&plan.route_name, &limiting.name, outcome_of(&decision, false));
        if !decision.allowed {
            let closed = decision.degraded && config.limiter.failure_policy() == FailurePolicy::Closed;
            let outage = closed.then(|| match config.limiter.misconfigured() {
                true => DenialKind::Misconfigured,
                false => DenialKind::Unavailable,
            });
            // None of them could be checked: name the route's own limit, not the global one.
            let limiting = match outage {
                Some(_) => enforced.iter().copied().find(|l| l.name == plan.route_name).unwrap_or(limiting),
                None => limiting,
            };
            let style = AnswerStyle { structured: config.structured, outage_status: config.outage_status };
            let name = Arc::clone(&limiting.name);
            let denial =
                Denial::new(plan.route_name, name, &limiting.policy, limiting.cost, decision, outage, style);
            return Verdict::Denied(denial.answer(config.on_denial.as_ref()));
        }
        redis_answered = !decision.degraded;
        permit = held;
        // The RateLimit-* fields describe rate limits; a lease that was the tightest has none.
        if !limiting.policy.is_concurrency() {
            headers = Some(RateHeaders {
                window_secs: limiting.policy.window_length().as_secs().max(1),
                decision,
                limit: Arc::clone(&limiting.name),
                cost: limiting.cost,
                structured: config.structured,
            });
        }
    }
    if !shadow.is_empty() && redis_answered {
        config.check_shadow(&plan.route_name, &shadow).await;
    }
    Verdict::Served { headers, permit }
}

impl Config {
    /// Checks `limits` in one call; the decision and the limit it describes.
    async fn check<'a>(&self, limits: &[&'a PlannedLimit]) -> (Decision, &'a PlannedLimit) {
        let calls: Vec<Limit<'_>> = limits.iter().map(|l| Limit::new(&l.key, &l.policy, l.cost)).collect();
        let decision = self.limiter.check_all(&calls).await;
        let limiting = limits[decision.limiting.min(limits.len() - 1)];
        (decision, limiting)
    }

    /// Like [`check`](Self::check); when a concurrency limit is among them, acquires them all in
    /// one call, and the permit holds the slots.
    async fn check_or_acquire<'a>(
        &self,
        limits: &[&'a PlannedLimit],
    ) -> (Decision, &'a PlannedLimit, Option<Permit>) {
        if !limits.iter().any(|l| l.policy.is_concurrency()) {
            let (decision, limiting) = self.check(limits).await;
            return (decision, limiting, None);
        }
        let calls: Vec<Limit<'_>> = limits.iter().map(|l| Limit::new(&l.key, &l.policy, l.cost)).collect();
        let (decision, permit) = match self.limiter.acquire_all(&calls).await {
            Acquired::Granted(permit) => (permit.decision().clone(), Some(permit)),
            Acquired::Denied(decision) => (decision, None),
        };
        let limiting = limits[decision.limiting.min(limits.len() - 1)];
        // Granted with a lease as the tightest limit: the RateLimit-* fields still describe the rate
        // limits, read with a peek (cost 0, writes nothing; a sliding log cannot be peeked).
        let rate: Vec<&PlannedLimit> = limits
            .iter()
            .copied()
            .filter(|l| !l.policy.is_concurrency() && l.policy.kind_is_peekable())
            .collect();
        if decision.allowed && limiting.policy.is_concurrency() && !rate.is_empty() {
            let peeks: Vec<Limit<'_>> = rate.iter().map(|l| Limit::new(&l.key, &l.policy, 0)).collect();
            let peeked = self.limiter.check_all(&peeks).await;
            let described = rate[peeked.limiting.min(rate.len() - 1)];
            return (Decision { allowed: true, ..peeked }, described, permit);
        }
        (decision, limiting, permit)
    }

    /// Checks the shadow limits of a request that is served whatever they say: counted, and a
    /// denial logged (at most one line per 10 s, with the number held back).
    async fn check_shadow(&self, route: &Arc<str>, limits: &[&PlannedLimit]) {
        let (decision, limiting) = self.check(limits).await;
        record(route, &limiting.name, outcome_of(&decision, true));
        if !decision.allowed && !decision.degraded {
            self.shadow_log.maybe(Instant::now(), |suppressed| {
                tracing::info!(route = %route, limit = %limiting.name, key = %limiting.key, suppressed,
                    "shadow limit would have denied a request (served: shadow limits are not enforced)");
            });
        }
    }
}
