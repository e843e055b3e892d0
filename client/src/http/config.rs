//! What a [`RateLimitLayer`](super::RateLimitLayer) is configured with, and the checks that refuse a
//! configuration that cannot work: the builder notes each mistake as it is made, `build` names the first.

/// The bits of an IPv6 address that name one caller unless configured (a /64 is one site's network).
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

use super::access::AccessLists;
use super::caller::Caller;
use super::denial::DenialFn;
use super::error::LayerError;
use super::forwarded::TrustedProxies;
use crate::limiter::Limiter;
use crate::log_throttle::LogThrottle;
use crate::policy::Policy;
use http::request::Parts;
use http::StatusCode;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

type PolicyFn = Arc<dyn Fn(&Caller) -> Policy + Send + Sync>;
pub(super) type CallerFn = Arc<dyn Fn(&Parts, Option<IpAddr>) -> Caller + Send + Sync>;
pub(super) type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;

/// Where a limit's policy comes from: a constant, or the caller's plan.
#[derive(Clone)]
pub(super) enum Source {
    Fixed(Policy),
    PerCaller(PolicyFn),
}

impl Source {
    pub(super) fn policy(&self, caller: &Caller) -> Policy {
        match self {
            Source::Fixed(p) => p.clone(),
            Source::PerCaller(f) => f(caller),
        }
    }
}

#[derive(Clone)]
pub(super) struct Route {
    /// Shared: it labels metrics and limits on every request without being copied.
    pub(super) name: Arc<str>,
    pub(super) prefix: String,
    pub(super) source: Source,
    pub(super) cost: Option<CostFn>,
    /// Checked and counted, never enforced.
    pub(super) shadow: bool,
}

#[derive(Clone)]
pub(super) struct Config {
    pub(super) limiter: Limiter,
    pub(super) prefix: String,
    pub(super) routes: Vec<Route>,
    pub(super) global: Option<Source>,
    /// Concurrency limits per route (matched by their own prefixes) and over all routes.
    pub(super) concurrency: Vec<Route>,
    pub(super) global_concurrency: Option<Source>,
    pub(super) skip: Vec<String>,
    pub(super) proxies: TrustedProxies,
    pub(super) caller: Option<CallerFn>,
    pub(super) structured: bool,
    /// The global limit's name in keys, headers and metrics: `all`.
    pub(super) global_name: Arc<str>,
    /// The status of a denial by `FailurePolicy::Closed` during an outage.
    pub(super) outage_status: StatusCode,
    /// IPv6 callers are grouped by this prefix length (a host usually has a whole /64).
    pub(super) ipv6_prefix: u8,
    /// The application's own denial answer, if any.
    pub(super) on_denial: Option<DenialFn>,
    /// What was wrong with the configuration, in the order it was written; `build` refuses it.
    pub(super) mistakes: Vec<Mistake>,
    /// The names given to `shadow`, in order; `build` refuses one that names no limit.
    pub(super) shadow: Vec<String>,
    /// The global limit is a shadow one.
    pub(super) global_shadow: bool,
    /// The allow and deny lists, shared with the application.
    pub(super) access: Option<AccessLists>,
    /// Set once the layer has said, loudly, that a mistake or a caller without an address was met.
    pub(super) warned_mistake: Arc<AtomicBool>,
    pub(super) warned_unknown: Arc<AtomicBool>,
    /// The line a shadow denial logs, at most one per 10 s.
    pub(super) shadow_log: Arc<LogThrottle>,
}

/// A mistake as it is noticed; a cost for a route that is missing is told apart at `build`.
#[derive(Clone)]
pub(super) enum Mistake {
    Found(LayerError),
    CostWithoutRoute(String),
}

impl Config {
    /// A configuration that limits nothing yet.
    pub(super) fn new(limiter: Limiter) -> Config {
        Config {
            limiter,
            prefix: "rl".into(),
            routes: vec![],
            global: None,
            concurrency: vec![],
            global_concurrency: None,
            skip: vec![],
            proxies: TrustedProxies::default(),
            caller: None,
            structured: false,
            global_name: Arc::from("all"),
            outage_status: StatusCode::TOO_MANY_REQUESTS,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            on_denial: None,
            mistakes: vec![],
            shadow: vec![],
            global_shadow: false,
            access: None,
            warned_mistake: Arc::default(),
            warned_unknown: Arc::default(),
            shadow_log: Arc::new(LogThrottle::new(Duration::from_secs(10))),
        }
    }

    pub(super) fn first_mistake(&self) -> Option<LayerError> {
        let known = || self.routes.iter().map(|r| format!("'{}'", r.name)).collect::<Vec<_>>().join(", ");
        let found = self.mistakes.first().map(|m| match m {
            Mistake::Found(e) => e.clone(),
            Mistake::CostWithoutRoute(route) if self.routes.iter().any(|r| &*r.name == route) => {
                LayerError::CostBeforeRoute { route: route.clone() }
            }
            Mistake::CostWithoutRoute(route) => {
                LayerError::CostForUnknownRoute { route: route.clone(), known: known() }
            }
        });
        let is_limit = |name: &str| {
            self.routes.iter().any(|r| &*r.name == name)
                || (name == &*self.global_name && self.global.is_some())
        };
        found
            .or_else(|| {
                (self.routes.is_empty()
                    && self.global.is_none()
                    && self.concurrency.is_empty()
                    && self.global_concurrency.is_none())
                .then_some(LayerError::NothingToLimit)
            })
            .or_else(|| {
                let unknown = self.shadow.iter().find(|s| !is_limit(s))?;
                let mut limits = known();
                if self.global.is_some() {
                    limits = if limits.is_empty() { "'all'".into() } else { format!("{limits}, 'all'") };
                }
                Some(LayerError::ShadowForUnknownLimit { limit: unknown.clone(), known: limits })
            })
    }
}

/// What cannot work in a new limit `name` on `prefix` among `existing` (rate routes, or concurrency
/// limits when `concurrency`): a name or prefix given twice, a prefix without `/`, a policy of the
/// other family.
pub(super) fn limit_mistake(
    existing: &[Route],
    name: &str,
    prefix: &str,
    source: &Source,
    concurrency: bool,
) -> Option<LayerError> {
    let (route, prefix_text) = (name.to_string(), prefix.to_string());
    if existing.iter().any(|r| &*r.name == name) {
        Some(LayerError::DuplicateRoute { route })
    } else if let Some(first) = existing.iter().find(|r| r.prefix == prefix) {
        Some(LayerError::DuplicatePrefix {
            first: first.name.to_string(),
            second: route,
            prefix: prefix_text,
        })
    } else if !prefix.starts_with('/') {
        Some(LayerError::InvalidPrefix { route, prefix: prefix_text })
    } else if let Source::Fixed(policy) = source {
        kind_mistake(name, policy, concurrency)
    } else {
        None
    }
}

/// A rate policy where a concurrency limit is due, or the reverse: the check could never be made.
pub(super) fn kind_mistake(name: &str, policy: &Policy, concurrency: bool) -> Option<LayerError> {
    (policy.is_concurrency() != concurrency).then(|| LayerError::WrongPolicyKind {
        limit: name.to_string(),
        expected: if concurrency { "a concurrency policy (Policy::concurrency)" } else { "a rate policy" },
    })
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let routes: Vec<(&str, &str)> = self.routes.iter().map(|r| (&*r.name, r.prefix.as_str())).collect();
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .field("key_prefix", &self.prefix)
            .field("routes", &routes)
            .field("global", &self.global.is_some())
            .field("skip", &self.skip)
            .field("trusted_proxies", &self.proxies)
            .field("custom_caller", &self.caller.is_some())
            .field("structured_headers", &self.structured)
            .field("outage_status", &self.outage_status)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .field("shadow", &self.shadow)
            .field("access_lists", &self.access)
            .finish_non_exhaustive()
    }
}
