//! A request the layer turns away, as a value: the application can shape the answer itself
//! ([`RateLimitLayer::on_denial`](super::RateLimitLayer::on_denial)) or take the default one.

use super::response::{add_headers, concurrency_limited, denied, unavailable, Described};
use crate::decision::Decision;
use crate::policy::Policy;
use http::header::RETRY_AFTER;
use http::{Response, StatusCode};
use std::sync::Arc;

/// The application's own answer to a denial ([`RateLimitLayer::on_denial`](super::RateLimitLayer::on_denial)).
pub(crate) type DenialFn = Arc<dyn Fn(&Denial) -> Response<String> + Send + Sync>;

/// How the layer writes its answers, as configured: the header style and the status of an outage.
#[derive(Clone, Copy)]
pub(crate) struct AnswerStyle {
    pub structured: bool,
    pub outage_status: StatusCode,
}

/// Why a request was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DenialKind {
    /// Over the limit: retry after [`Denial::retry_after_secs`].
    RateLimited,
    /// The request costs more than the limit: it can never be allowed.
    CostExceedsLimit,
    /// Redis could not decide and the limiter fails closed: not the caller's overuse.
    Unavailable,
    /// Redis answers that the limiter cannot work with it as configured (the module not loaded, a
    /// renamed command, a refused permission) and the limiter fails closed: not an outage, and not
    /// the caller's overuse ([`Limiter::misconfigured`](crate::Limiter::misconfigured)).
    Misconfigured,
    /// A concurrency limit: too many of the caller's requests in flight.
    ConcurrencyLimited,
}

/// A denied request: which limit, why, and the decision it came from.
#[derive(Debug, Clone)]
pub struct Denial {
    pub(crate) kind: DenialKind,
    pub(crate) route: Arc<str>,
    pub(crate) limit: Arc<str>,
    pub(crate) window_secs: u64,
    pub(crate) cost: u64,
    /// The limit that denied is a rate policy (not a concurrency limit): `RateLimit-*` describe it.
    pub(crate) rate: bool,
    pub(crate) decision: Decision,
    /// How the default answer is written: the layer's header style and outage status.
    pub(crate) structured: bool,
    pub(crate) outage_status: StatusCode,
}

impl DenialKind {
    /// Why `decision` (a denial) denied; `outage` when the failure policy denied because Redis could
    /// not (`Unavailable` or `Misconfigured`).
    pub(crate) fn of(decision: &Decision, outage: Option<DenialKind>) -> DenialKind {
        if let Some(outage) = outage {
            outage
        } else if decision.never_fits() {
            DenialKind::CostExceedsLimit
        } else {
            DenialKind::RateLimited
        }
    }
}

impl Denial {
    /// The denial of a request to `route` by the limit `limit` of `policy`, where the request cost
    /// `cost`; `outage` (`Unavailable` or `Misconfigured`) when the failure policy denied it because
    /// Redis could not decide.
    pub(crate) fn new(
        route: Arc<str>,
        limit: Arc<str>,
        policy: &Policy,
        cost: u64,
        decision: Decision,
        outage: Option<DenialKind>,
        style: AnswerStyle,
    ) -> Denial {
        let rate = !policy.is_concurrency();
        let kind = match DenialKind::of(&decision, outage) {
            DenialKind::RateLimited if !rate => DenialKind::ConcurrencyLimited,
            kind => kind,
        };
        Denial {
            kind,
            route,
            limit,
            window_secs: policy.window_length().as_secs().max(1),
            cost,
            rate,
            decision,
            structured: style.structured,
            outage_status: style.outage_status,
        }
    }

    /// The answer: the application's own (`on_denial`) with the rate limit headers the layer always
    /// sends, or else the layer's [`default_response`](Self::default_response).
    pub(crate) fn answer(&self, on_denial: Option<&DenialFn>) -> Response<String> {
        match on_denial {
            Some(respond) => self.with_headers(respond(self)),
            None => self.default_response(),
        }
    }

    /// The application's answer with the rate limit headers (none when a concurrency limit denied:
    /// `RateLimit-*` describe rate policies, not work in flight), and `Retry-After` unless it has one.
    fn with_headers(&self, mut response: Response<String>) -> Response<String> {
        let headers = response.headers_mut();
        add_headers(headers, self.decision(), &self.described(), self.structured);
        if let (false, Some(secs)) = (headers.contains_key(RETRY_AFTER), self.retry_after_secs()) {
            headers.insert(RETRY_AFTER, secs.into());
        }
        response
    }

    pub fn kind(&self) -> DenialKind {
        self.kind
    }

    /// The route the request matched (`all` when only the global limit applied).
    pub fn route(&self) -> &str {
        &self.route
    }

    /// The limit that denied it: the route's name or `all` (the global limit). When Redis could not
    /// decide, the most specific limit that could not be checked: the route's (its rate limit, else
    /// its concurrency limit) rather than `all`.
    pub fn limit(&self) -> &str {
        &self.limit
    }

    /// What the request cost.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The limiter's decision (`degraded` when Redis did not decide). For a
    /// [`DenialKind::ConcurrencyLimited`] denial it is the lease decision: `limit` is the number in
    /// flight allowed, `remaining` the weight still free, and `retry_after` an upper bound (until
    /// enough held leases expire; a release frees a slot sooner). [`Denial::in_flight_limit`] says
    /// it in one call.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The concurrency limit that denied the request (requests in flight at most), or None when a
    /// rate limit or an outage denied it.
    pub fn in_flight_limit(&self) -> Option<u64> {
        (self.kind == DenialKind::ConcurrencyLimited).then_some(self.decision.limit)
    }

    /// `Retry-After` in whole seconds; None when waiting would not help (the cost exceeds the limit).
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.decision.retry_after_secs()
    }

    /// The layer's own answer: 429 (or the outage status) with an RFC 9457 problem body and the
    /// rate limit headers.
    pub fn default_response(&self) -> Response<String> {
        let described = self.described();
        match self.kind {
            DenialKind::Unavailable | DenialKind::Misconfigured => {
                let misconfigured = self.kind == DenialKind::Misconfigured;
                unavailable(&self.decision, &described, self.structured, self.outage_status, misconfigured)
            }
            DenialKind::ConcurrencyLimited => concurrency_limited(&self.decision, &described),
            _ => denied(&self.decision, &described, self.structured),
        }
    }

    pub(crate) fn described(&self) -> Described<'_> {
        Described { name: &self.limit, window_secs: self.window_secs, cost: self.cost, rate: self.rate }
    }
}
