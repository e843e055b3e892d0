//! The tower `Layer`: per-route limits plus a per-client global limit, checked in one atomic call;
//! shadow limits checked after them in a call of their own, never enforced; allow and deny lists
//! consulted before either.

use super::access::{Access, AccessLists};
use super::body::LimitedBody;
use super::caller::{default_caller, peer_ip, Caller, Principal, Tenant, TrustedProxies};
use super::denial::{Denial, DenialKind};
use super::error::LayerError;
use super::response::{add_headers, forbidden, Described};
use crate::command::Limit;
use crate::decision::Decision;
use crate::limiter::{FailurePolicy, Limiter};
use crate::log_throttle::LogThrottle;
use crate::permit::{Acquired, Permit};
use crate::policy::Policy;
use http::request::Parts;
use http::{Request, Response, StatusCode};
use ipnet::IpNet;
use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

type PolicyFn = Arc<dyn Fn(&Caller) -> Policy + Send + Sync>;
type CallerFn = Arc<dyn Fn(&Parts, Option<IpAddr>) -> Caller + Send + Sync>;
type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;
type DenialFn = Arc<dyn Fn(&Denial) -> Response<String> + Send + Sync>;

/// Where a limit's policy comes from: a constant, or the caller's plan.
#[derive(Clone)]
enum Source {
    Fixed(Policy),
    PerCaller(PolicyFn),
}

impl Source {
    fn policy(&self, caller: &Caller) -> Policy {
        match self {
            Source::Fixed(p) => p.clone(),
            Source::PerCaller(f) => f(caller),
        }
    }
}

#[derive(Clone)]
struct Route {
    /// Shared: it labels metrics and limits on every request without being copied.
    name: Arc<str>,
    prefix: String,
    source: Source,
    cost: Option<CostFn>,
    /// Checked and counted, never enforced.
    shadow: bool,
}

#[derive(Clone)]
struct Config {
    limiter: Limiter,
    prefix: String,
    routes: Vec<Route>,
    global: Option<Source>,
    /// Concurrency limits per route (matched by their own prefixes) and over all routes.
    concurrency: Vec<Route>,
    global_concurrency: Option<Source>,
    skip: Vec<String>,
    proxies: TrustedProxies,
    caller: Option<CallerFn>,
    structured: bool,
    /// The global limit's name in keys, headers and metrics: `all`.
    global_name: Arc<str>,
    /// The status of a denial by `FailurePolicy::Closed` during an outage.
    outage_status: StatusCode,
    /// IPv6 callers are grouped by this prefix length (a host usually has a whole /64).
    ipv6_prefix: u8,
    /// The application's own denial answer, if any.
    on_denial: Option<DenialFn>,
    /// What was wrong with the configuration, in the order it was written; `build` refuses it.
    mistakes: Vec<Mistake>,
    /// The names given to `shadow`, in order; `build` refuses one that names no limit.
    shadow: Vec<String>,
    /// The global limit is a shadow one.
    global_shadow: bool,
    /// The allow and deny lists, shared with the application.
    access: Option<AccessLists>,
    /// Set once the layer has said, loudly, that a mistake or a caller without an address was met.
    warned_mistake: Arc<AtomicBool>,
    warned_unknown: Arc<AtomicBool>,
    /// The line a shadow denial logs, at most one per 10 s.
    shadow_log: Arc<LogThrottle>,
}

/// A mistake as it is noticed; a cost for a route that is missing is told apart at `build`.
#[derive(Clone)]
enum Mistake {
    Found(LayerError),
    CostWithoutRoute(String),
}

/// What cannot work in a new limit `name` on `prefix` among `existing` (rate routes, or concurrency
/// limits when `concurrency`): a name or prefix given twice, a prefix without `/`, a policy of the
/// other family.
fn limit_mistake(
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
fn kind_mistake(name: &str, policy: &Policy, concurrency: bool) -> Option<LayerError> {
    (policy.is_concurrency() != concurrency).then(|| LayerError::WrongPolicyKind {
        limit: name.to_string(),
        expected: if concurrency { "a concurrency policy (Policy::concurrency)" } else { "a rate policy" },
    })
}

/// Rate limiting for HTTP services. Built once; the per-request path clones one `Arc`.
///
/// ```no_run
/// use redis_ratelimit_client::http::RateLimitLayer;
/// use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
/// use axum::{routing::get, Router};
///
/// # fn app() -> Result<Router, Box<dyn std::error::Error>> {
/// let limiter = Limiter::builder(FailurePolicy::Open).connect("redis://127.0.0.1:6379/")?;
/// let layer = RateLimitLayer::new(limiter)
///     .route("login", "/login", Policy::token_bucket(5, 0.1)?)
///     .route("api", "/api", Policy::token_bucket(10, 5.0)?)
///     .global(Policy::token_bucket(100, 20.0)?)
///     .skip("/health")
///     .trusted_proxies(["10.0.0.0/8".parse()?])
///     .build()?;
/// let app = Router::new().route("/api/items", get(|| async { "ok" })).layer(layer);
/// // Serve with `into_make_service_with_connect_info::<SocketAddr>()` so the peer address is known.
/// # Ok(app)
/// # }
/// ```
#[derive(Clone)]
pub struct RateLimitLayer {
    config: Arc<Config>,
}

impl RateLimitLayer {
    /// A layer that limits nothing yet: add routes and/or a global limit.
    pub fn new(limiter: Limiter) -> RateLimitLayer {
        RateLimitLayer {
            config: Arc::new(Config {
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
                ipv6_prefix: 64,
                on_denial: None,
                mistakes: vec![],
                shadow: vec![],
                global_shadow: false,
                access: None,
                warned_mistake: Arc::default(),
                warned_unknown: Arc::default(),
                shadow_log: Arc::new(LogThrottle::new(Duration::from_secs(10))),
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Config)) -> Self {
        // Copies the configuration only when the layer was cloned before being configured further.
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// Requests under `prefix` (the longest matching prefix wins) are limited by `policy`, per caller,
    /// under `name` (used in keys, headers and metrics). Prefixes match whole path segments: `/api`
    /// matches `/api` and `/api/items`, not `/apiary` (a prefix ending in `/` matches what is below it).
    pub fn route(self, name: &str, prefix: &str, policy: Policy) -> Self {
        self.add_route(name, prefix, Source::Fixed(policy))
    }

    /// Like [`route`](Self::route), with the policy looked up per caller (from the caller's plan).
    pub fn route_per_caller(
        self,
        name: &str,
        prefix: &str,
        policy: impl Fn(&Caller) -> Policy + Send + Sync + 'static,
    ) -> Self {
        self.add_route(name, prefix, Source::PerCaller(Arc::new(policy)))
    }

    fn add_route(self, name: &str, prefix: &str, source: Source) -> Self {
        self.with(|c| {
            let shadow = c.shadow.iter().any(|s| s == name);
            let mistake = limit_mistake(&c.routes, name, prefix, &source, false).or_else(|| {
                (name == &*c.global_name).then(|| LayerError::ReservedRouteName { route: name.to_string() })
            });
            c.mistakes.extend(mistake.map(Mistake::Found));
            c.routes.push(Route { name: name.into(), prefix: prefix.into(), source, cost: None, shadow });
            c.routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
        })
    }

    /// At most `policy` ([`Policy::concurrency`]) requests of a caller in flight under `prefix`,
    /// under `name`. On the prefix of a rate route, it attaches to that route: the request is
    /// checked against both in one RL.ALL call (a denial takes from neither). Its key is
    /// `rl:{<caller>}:<name>:lease`, apart from the rate keys; the slot is held until the response
    /// body has been sent or dropped. `RateLimit-*` fields keep describing the rate limits.
    pub fn concurrency(self, name: &str, prefix: &str, policy: Policy) -> Self {
        self.add_concurrency(name, prefix, Source::Fixed(policy))
    }

    /// Like [`concurrency`](Self::concurrency), with the policy looked up per caller.
    pub fn concurrency_per_caller(
        self,
        name: &str,
        prefix: &str,
        policy: impl Fn(&Caller) -> Policy + Send + Sync + 'static,
    ) -> Self {
        self.add_concurrency(name, prefix, Source::PerCaller(Arc::new(policy)))
    }

    /// At most `policy` requests of a caller in flight over all routes (key `rl:{<caller>}:all:lease`).
    pub fn global_concurrency(self, policy: Policy) -> Self {
        self.with(|c| {
            c.mistakes.extend(kind_mistake("all", &policy, true).map(Mistake::Found));
            c.global_concurrency = Some(Source::Fixed(policy));
        })
    }

    fn add_concurrency(self, name: &str, prefix: &str, source: Source) -> Self {
        self.with(|c| {
            let mistake = limit_mistake(&c.concurrency, name, prefix, &source, true);
            c.mistakes.extend(mistake.map(Mistake::Found));
            let route = Route { name: name.into(), prefix: prefix.into(), source, cost: None, shadow: false };
            c.concurrency.push(route);
            c.concurrency.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
        })
    }

    /// What a request to route `name` costs (default 1): an expensive endpoint can cost 5 tokens.
    /// The route must already be defined: [`build`](Self::build) refuses a cost for a route that is
    /// not (yet) there.
    pub fn cost(self, name: &str, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        let cost: CostFn = Arc::new(cost);
        self.with(|c| {
            let mut found = false;
            for r in c.routes.iter_mut().filter(|r| &*r.name == name) {
                r.cost = Some(cost.clone());
                found = true;
            }
            if !found {
                c.mistakes.push(Mistake::CostWithoutRoute(name.to_string()));
            }
        })
    }

    /// A per-client limit over all routes, checked atomically with the route's: a client cannot
    /// multiply its capacity across routes, and a denial takes from neither. (Both are token buckets
    /// whose keys share the caller's hash tag, so this works on Redis Cluster.)
    pub fn global(self, policy: Policy) -> Self {
        self.with(|c| {
            c.mistakes.extend(kind_mistake("all", &policy, false).map(Mistake::Found));
            c.global = Some(Source::Fixed(policy));
        })
    }

    /// Like [`global`](Self::global), looked up per caller.
    pub fn global_per_caller(self, policy: impl Fn(&Caller) -> Policy + Send + Sync + 'static) -> Self {
        self.with(|c| c.global = Some(Source::PerCaller(Arc::new(policy))))
    }

    /// Makes the limit `name` (a route's name, or `all` for the global limit) a shadow limit: a dry
    /// run. Its decisions are made in Redis and counted (`outcome="shadow_allowed"` or
    /// `"shadow_denied"` in `ratelimit_http_requests_total`, with a log line at most every 10 s for
    /// the denials), but never enforced: a request it would deny is served, and its responses carry
    /// no `RateLimit-*` field from it. The shadow limits of a request are checked in their own call,
    /// after the enforced ones allowed it, so a shadow denial can never veto (and leave uncharged) a
    /// request the enforced limits let through; a request the enforced limits deny is not checked
    /// against the shadow ones (enforcing them too would not have charged it). Before or after the
    /// route: [`build`](Self::build) refuses a name that is no limit of the layer.
    ///
    /// ```no_run
    /// # use redis_ratelimit_client::http::RateLimitLayer;
    /// # use redis_ratelimit_client::Policy;
    /// # fn f(layer: RateLimitLayer) -> Result<RateLimitLayer, Box<dyn std::error::Error>> {
    /// let layer = layer
    ///     .route("search", "/search", Policy::token_bucket(20, 2.0)?) // enforced
    ///     .route("export", "/export", Policy::token_bucket(5, 0.1)?)
    ///     .shadow("export") // new: watch what it would deny before enforcing it
    ///     .global(Policy::token_bucket(100, 20.0)?)
    ///     .shadow("all")
    ///     .build()?;
    /// # Ok(layer)
    /// # }
    /// ```
    pub fn shadow(self, name: &str) -> Self {
        self.with(|c| {
            if !c.shadow.iter().any(|s| s == name) {
                c.shadow.push(name.to_string());
            }
            for r in c.routes.iter_mut().filter(|r| &*r.name == name) {
                r.shadow = true;
            }
            if name == &*c.global_name {
                c.global_shadow = true;
            }
        })
    }

    /// Allow and deny lists, consulted for every request the layer would limit: an allowed caller
    /// is served without a limit (`outcome="allowlisted"`), a denied one gets `403 Forbidden` with a
    /// problem body of type [`DENIED`](super::DENIED) (`outcome="denylisted"`), without a call to
    /// Redis. Keep a clone of `lists` and change it while the layer runs.
    pub fn access_lists(self, lists: AccessLists) -> Self {
        self.with(|c| c.access = Some(lists))
    }

    /// Paths that are never limited (health checks); exact, or a prefix when ending in `/`.
    pub fn skip(self, path: &str) -> Self {
        self.with(|c| c.skip.push(path.into()))
    }

    /// Proxies whose `X-Forwarded-For` / `Forwarded` headers are believed (none by default).
    pub fn trusted_proxies(self, nets: impl IntoIterator<Item = IpNet>) -> Self {
        self.with(|c| c.proxies = TrustedProxies::new(nets))
    }

    /// IPv6 callers are counted per network of this prefix length (default 64; 128 counts every
    /// address alone). One host usually holds a whole /64, so keying by address would give it
    /// endless fresh buckets. IPv4-mapped addresses (`::ffff:192.0.2.1`, a dual-stack socket's
    /// IPv4 peers) count as the IPv4 address they are.
    pub fn ipv6_prefix(self, len: u8) -> Self {
        self.with(|c| {
            if len > 128 {
                c.mistakes.push(Mistake::Found(LayerError::InvalidIpv6Prefix(len)));
            }
            c.ipv6_prefix = len.min(128);
        })
    }

    /// A custom key choice: one closure from the request head and the client IP (as the trusted
    /// proxy rule resolved it, grouped as [`ipv6_prefix`](Self::ipv6_prefix) says) to the caller.
    pub fn caller_fn(
        self,
        caller: impl Fn(&Parts, Option<IpAddr>) -> Caller + Send + Sync + 'static,
    ) -> Self {
        self.with(|c| c.caller = Some(Arc::new(caller)))
    }

    /// Also send the IETF draft's structured fields, `RateLimit-Policy` and `RateLimit`.
    pub fn structured_headers(self, on: bool) -> Self {
        self.with(|c| c.structured = on)
    }

    /// The status of the answer when Redis cannot decide and the limiter fails closed (default 429;
    /// `StatusCode::SERVICE_UNAVAILABLE` tells callers that the outage is not their overuse). The body
    /// is of type [`UNAVAILABLE`](super::UNAVAILABLE) either way.
    pub fn outage_status(self, status: StatusCode) -> Self {
        self.with(|c| c.outage_status = status)
    }

    /// The application's own answer to a denied request (its own status, its own JSON). The layer
    /// then adds the `RateLimit-*` headers, and `Retry-After` when the answer has none and waiting
    /// helps. [`Denial::default_response`] is the layer's answer, to start from or fall back to.
    ///
    /// ```no_run
    /// # use redis_ratelimit_client::http::{DenialKind, RateLimitLayer};
    /// # fn f(layer: RateLimitLayer) -> RateLimitLayer {
    /// layer.on_denial(|denial| match denial.kind() {
    ///     DenialKind::RateLimited => http::Response::builder()
    ///         .status(429)
    ///         .header("content-type", "application/json")
    ///         .body(format!(r#"{{"error":"slow down","limit":"{}"}}"#, denial.limit()))
    ///         .unwrap(),
    ///     _ => denial.default_response(),
    /// })
    /// # }
    /// ```
    pub fn on_denial(self, respond: impl Fn(&Denial) -> Response<String> + Send + Sync + 'static) -> Self {
        self.with(|c| c.on_denial = Some(Arc::new(respond)))
    }

    /// The limiter this layer checks with.
    pub fn limiter(&self) -> &Limiter {
        &self.config.limiter
    }

    /// The routes' names and prefixes, longest prefix first (the order they are matched in).
    pub fn routes(&self) -> impl Iterator<Item = (&str, &str)> {
        self.config.routes.iter().map(|r| (&*r.name, r.prefix.as_str()))
    }

    /// The key prefix (default `rl`): keys are `rl:{<caller>}:<route>` and `rl:{<caller>}:all`, the
    /// caller as [`Caller::key_part`] writes it (at most 128 bytes, no braces).
    pub fn key_prefix(self, prefix: &str) -> Self {
        self.with(|c| c.prefix = prefix.into())
    }
}

impl RateLimitLayer {
    /// The configured layer, or the first mistake in its configuration, naming the route: a cost
    /// for a route that is not defined (misspelt, or given before the route), a route defined twice
    /// or two with one prefix, a prefix without its leading `/`, an IPv6 prefix over 128, a layer
    /// that limits nothing, a [`shadow`](Self::shadow) name that is no limit of the layer.
    ///
    /// ```
    /// use redis_ratelimit_client::http::{LayerError, RateLimitLayer};
    /// use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
    ///
    /// # let runtime = tokio::runtime::Runtime::new().unwrap();
    /// # let _in_runtime = runtime.enter();
    /// let limiter = Limiter::builder(FailurePolicy::Open).connect("redis://127.0.0.1:6379/").unwrap();
    /// let err = RateLimitLayer::new(limiter)
    ///     .cost("export", |_| 5)
    ///     .route("export", "/export", Policy::token_bucket(10, 1.0).unwrap())
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err, LayerError::CostBeforeRoute { route: "export".into() });
    /// ```
    pub fn build(self) -> Result<RateLimitLayer, LayerError> {
        match self.config.first_mistake() {
            Some(e) => Err(e),
            None => Ok(self),
        }
    }
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

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

impl<S> RateLimit<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The limiter this service checks with.
    pub fn limiter(&self) -> &Limiter {
        &self.config.limiter
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit").field("inner", &self.inner).field("config", &self.config).finish()
    }
}

impl<S> tower_layer::Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    /// A layer that was not checked with [`build`](RateLimitLayer::build) still works, and says what
    /// is wrong with it once, at error level.
    fn layer(&self, inner: S) -> RateLimit<S> {
        if let Some(e) = self.config.first_mistake() {
            if !self.config.warned_mistake.swap(true, Ordering::Relaxed) {
                tracing::error!("rate limit layer misconfigured: {e} (RateLimitLayer::build refuses it)");
            }
        }
        RateLimit { inner, config: self.config.clone() }
    }
}

/// The service the layer wraps around yours.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S, B, ResBody> tower_service::Service<Request<B>> for RateLimit<S>
where
    S: tower_service::Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<LimitedBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The instance that was polled ready serves this request; a fresh clone stays for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        let unheld = |r: Response<ResBody>| r.map(|b| LimitedBody::new(b, None));
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let plan = match config.plan(&parts) {
                None => return inner.call(Request::from_parts(parts, body)).await.map(unheld),
                Some(Step::Refuse(route)) => {
                    record(&route, &route, "denylisted");
                    return Ok(unheld(forbidden().map(ResBody::from)));
                }
                Some(Step::Allowlisted(route)) => {
                    record(&route, &route, "allowlisted");
                    return inner.call(Request::from_parts(parts, body)).await.map(unheld);
                }
                Some(Step::Limit(plan)) => plan,
            };
            let (shadow, enforced): (Vec<&PlannedLimit>, Vec<&PlannedLimit>) =
                plan.limits.iter().partition(|l| l.shadow);
            let mut enforced_decision = None;
            let mut permit = None;
            if !enforced.is_empty() {
                let (decision, limiting, held) = config.check_or_acquire(&enforced).await;
                permit = held;
                let window_secs = limiting.policy.window_length().as_secs().max(1);
                record(&plan.route_name, &limiting.name, outcome_of(&decision, false));
                if !decision.allowed {
                    let outage =
                        decision.degraded && config.limiter.failure_policy() == FailurePolicy::Closed;
                    let kind = match DenialKind::of(&decision, outage) {
                        DenialKind::RateLimited if limiting.policy.is_concurrency() => {
                            DenialKind::ConcurrencyLimited
                        }
                        kind => kind,
                    };
                    let denial = Denial {
                        kind,
                        route: plan.route_name,
                        limit: Arc::clone(&limiting.name),
                        window_secs,
                        cost: limiting.cost,
                        rate: !limiting.policy.is_concurrency(),
                        decision,
                        structured: config.structured,
                        outage_status: config.outage_status,
                    };
                    let response = match &config.on_denial {
                        Some(respond) => own_denial_response(respond(&denial), &denial),
                        None => denial.default_response(),
                    };
                    return Ok(unheld(response.map(ResBody::from)));
                }
                enforced_decision = Some((decision, limiting, window_secs));
            }
            // After the enforced limits allowed, in a call of its own; not when Redis just failed to
            // answer (a second deadline for a decision nobody enforces).
            let redis_answered = enforced_decision.as_ref().is_none_or(|(d, _, _)| !d.degraded);
            if !shadow.is_empty() && redis_answered {
                config.check_shadow(&plan.route_name, &shadow).await;
            }
            // A panicking or cancelled handler drops the permit with this future: released at once.
            let mut response = inner.call(Request::from_parts(parts, body)).await?;
            // The RateLimit-* fields describe rate limits; a lease that was the tightest has none.
            let rate_described = enforced_decision.filter(|(_, l, _)| !l.policy.is_concurrency());
            if let Some((decision, limiting, window_secs)) = rate_described {
                let described =
                    Described { name: &limiting.name, window_secs, cost: limiting.cost, rate: true };
                add_headers(response.headers_mut(), &decision, &described, config.structured);
            }
            Ok(response.map(|b| LimitedBody::new(b, permit)))
        })
    }
}

/// The application's denial answer, with the rate limit headers the layer always sends (none when a
/// concurrency limit denied: `RateLimit-*` describe rate policies, not work in flight).
fn own_denial_response(mut response: Response<String>, denial: &Denial) -> Response<String> {
    let headers = response.headers_mut();
    add_headers(headers, denial.decision(), &denial.described(), denial.structured);
    if let (false, Some(secs)) = (headers.contains_key(http::header::RETRY_AFTER), denial.retry_after_secs())
    {
        headers.insert(http::header::RETRY_AFTER, secs.into());
    }
    response
}

/// What the layer does with one request (besides passing it on untouched).
enum Step {
    /// Check these limits.
    Limit(Plan),
    /// On the allow list: served without a limit (the route's name, for the counter).
    Allowlisted(Arc<str>),
    /// On the deny list: 403.
    Refuse(Arc<str>),
}

/// The limits one request is checked against.
struct Plan {
    route_name: Arc<str>,
    limits: Vec<PlannedLimit>,
}

/// One limit of a request: its key, policy, what the request costs, and its name (the route's, or
/// `all`) in headers and metrics.
struct PlannedLimit {
    key: String,
    policy: Policy,
    cost: u64,
    name: Arc<str>,
    shadow: bool,
}

impl Config {
    fn first_mistake(&self) -> Option<LayerError> {
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

    fn plan(&self, parts: &Parts) -> Option<Step> {
        let path = parts.uri.path();
        if self.skip.iter().any(|s| path == s || (s.ends_with('/') && path.starts_with(s.as_str()))) {
            return None;
        }
        let route = self.routes.iter().find(|r| under_prefix(path, &r.prefix));
        let concurrency = self.concurrency.iter().find(|r| under_prefix(path, &r.prefix));
        if route.is_none()
            && self.global.is_none()
            && concurrency.is_none()
            && self.global_concurrency.is_none()
        {
            return None;
        }
        let peer = peer_ip(&parts.extensions);
        let client_ip = self.proxies.client_ip(peer, &parts.headers);
        let ip = client_ip.map(|ip| group_ip(ip, self.ipv6_prefix));
        let caller = match &self.caller {
            Some(f) => f(parts, ip),
            None => default_caller(&parts.extensions, ip),
        };
        if caller == Caller::Unknown && peer.is_none() && !self.warned_unknown.swap(true, Ordering::Relaxed) {
            tracing::error!(
                key = %format!("{}:{{unknown}}", self.prefix),
                "rate limit layer: a request without a peer address (no ConnectInfo, no PeerAddr): every \
                 such caller shares one bucket. Serve with into_make_service_with_connect_info::<SocketAddr>() \
                 or insert PeerAddr; said once"
            );
        }
        let route_name = Arc::clone(route.or(concurrency).map_or(&self.global_name, |r| &r.name));
        match self.access.as_ref().map(|lists| access(lists, parts, &caller, client_ip)) {
            Some(Access::Denied) => return Some(Step::Refuse(route_name)),
            Some(Access::Allowed) => return Some(Step::Allowlisted(route_name)),
            Some(Access::Limited) | None => {}
        }
        let cost = route.and_then(|r| r.cost.as_ref()).map_or(1, |f| f(parts));
        let tag = caller_tag(&self.prefix, &caller);
        let mut limits = Vec::with_capacity(2);
        if let Some(r) = route {
            let key = format!("{tag}:{}", r.name);
            limits.push(PlannedLimit {
                key,
                policy: r.source.policy(&caller),
                cost,
                name: Arc::clone(&r.name),
                shadow: r.shadow,
            });
        }
        if let Some(g) = &self.global {
            let (key, name) = (format!("{tag}:{}", self.global_name), Arc::clone(&self.global_name));
            let shadow = self.global_shadow;
            limits.push(PlannedLimit { key, policy: g.policy(&caller), cost, name, shadow });
        }
        // Leases of weight 1: a request in flight is one, whatever its rate cost.
        if let Some(r) = concurrency {
            let (key, name) = (format!("{tag}:{}:lease", r.name), Arc::clone(&r.name));
            limits.push(PlannedLimit { key, policy: r.source.policy(&caller), cost: 1, name, shadow: false });
        }
        if let Some(g) = &self.global_concurrency {
            let (key, name) = (format!("{tag}:{}:lease", self.global_name), Arc::clone(&self.global_name));
            limits.push(PlannedLimit { key, policy: g.policy(&caller), cost: 1, name, shadow: false });
        }
        Some(Step::Limit(Plan { route_name, limits }))
    }
}

/// `<prefix>:{<caller's key part>}`, the start of every key of the caller: the hash tag is the whole
/// caller, whatever it sent (braces escaped, long ids hashed: [`Caller::key_part`]).
fn caller_tag(prefix: &str, caller: &Caller) -> String {
    format!("{prefix}:{{{}}}", caller.key_part())
}

/// What the lists say about a request: its principal and tenant (the extensions', and a custom
/// caller's) and its client address, not grouped.
fn access(lists: &AccessLists, parts: &Parts, caller: &Caller, client_ip: Option<IpAddr>) -> Access {
    let mut principals: Vec<&str> =
        parts.extensions.get::<Principal>().map(|p| p.0.as_str()).into_iter().collect();
    let mut tenants: Vec<&str> = parts.extensions.get::<Tenant>().map(|t| t.0.as_str()).into_iter().collect();
    match caller {
        Caller::Principal(p) => principals.push(p),
        Caller::Tenant(t) => tenants.push(t),
        Caller::Ip(_) | Caller::Unknown => {}
    }
    lists.access_of(&principals, &tenants, client_ip)
}

/// True when `path` is `prefix` or below it, by whole segments.
fn under_prefix(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/') || prefix.ends_with('/'),
        None => false,
    }
}

/// The address a caller is counted under: IPv4 as it is (also when written IPv4-mapped), IPv6 as
/// its network of `prefix` bits.
fn group_ip(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u32::from(prefix.min(128));
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
        v4 => v4,
    }
}

/// `ratelimit_http_requests_total{route, limit, outcome}` through the `metrics` facade: `limit` is the
/// policy the decision describes (the route's, or `all` for the global one); for the lists' outcomes,
/// the route's name.
fn record(route: &Arc<str>, limit: &Arc<str>, outcome: &'static str) {
    let (route, limit) =
        (metrics::SharedString::from(Arc::clone(route)), metrics::SharedString::from(Arc::clone(limit)));
    metrics::counter!("ratelimit_http_requests_total", "route" => route, "limit" => limit, "outcome" => outcome)
        .increment(1);
}

/// The `outcome` label of a decision; a shadow limit's says what enforcing it would have done.
fn outcome_of(d: &Decision, shadow: bool) -> &'static str {
    const LABELS: [[&str; 4]; 2] = [
        ["denied", "allowed", "degraded_denied", "degraded_allowed"],
        ["shadow_denied", "shadow_allowed", "shadow_degraded_denied", "shadow_degraded_allowed"],
    ];
    LABELS[usize::from(shadow)][usize::from(d.allowed) + 2 * usize::from(d.degraded)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_whole_segments() {
        assert!(under_prefix("/api", "/api"));
        assert!(under_prefix("/api/items", "/api"));
        assert!(!under_prefix("/apiary", "/api"));
        assert!(!under_prefix("/ap", "/api"));
        assert!(under_prefix("/api/x", "/api/"));
        assert!(!under_prefix("/api", "/api/"));
        assert!(under_prefix("/anything", "/"));
    }

    use crate::http::MAX_CALLER_KEY_BYTES;
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// The key of a route `api` of `caller` under the default prefix, as `plan` builds it.
    fn key(caller: &Caller) -> String {
        format!("{}:api", caller_tag("rl", caller))
    }

    /// The hash tag Redis Cluster hashes: from the first `{` to the first `}` after it, when not empty.
    fn redis_hash_tag(key: &str) -> Option<&str> {
        let open = key.find('{')?;
        let close = key[open + 1..].find('}')? + open + 1;
        (close > open + 1).then(|| &key[open + 1..close])
    }

    /// Ids as callers send them: plain, with braces and `%`, unicode, the other forms' markers,
    /// around the bound, and far over it.
    fn id() -> impl Strategy<Value = String> {
        let near = MAX_CALLER_KEY_BYTES - 8..MAX_CALLER_KEY_BYTES + 8;
        prop_oneof![
            "[a-z0-9:._-]{0,16}",
            "[a-z{}%:.]{0,16}",
            "(\\{|\\}|%|%7B|%7D|\\.esc:|\\.sha256:|user|:|x){0,12}",
            any::<String>(),
            proptest::collection::vec(any::<char>(), 0..200).prop_map(String::from_iter),
            (near, "[a-z{}]{0,2}").prop_map(|(n, end)| "y".repeat(n) + &end),
            ("[a-z{}]{0,3}", 1_000usize..70_000, "[a-z{}]{0,3}")
                .prop_map(|(start, n, end)| start + &"z".repeat(n) + &end),
        ]
    }

    fn caller() -> impl Strategy<Value = Caller> {
        prop_oneof![id().prop_map(Caller::Principal), id().prop_map(Caller::Tenant)]
    }

    /// The id and its kind, when its part is today's `kind:id` (no brace, under the bound).
    fn as_today(caller: &Caller) -> Option<String> {
        let today = caller.to_string();
        let id = match caller {
            Caller::Principal(id) | Caller::Tenant(id) => id,
            _ => return Some(today),
        };
        (!id.contains(['{', '}']) && today.len() <= MAX_CALLER_KEY_BYTES).then_some(today)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// (1) `rl:` first, (2) exactly one brace pair, the hash tag being the whole caller part,
        /// (3) the part within the bound, (5) today's key whenever the id has no brace and fits.
        #[test]
        fn a_key_is_prefixed_tagged_by_the_whole_caller_bounded_and_unchanged_when_it_can_be(c in caller()) {
            let key = key(&c);
            let part = c.key_part();
            prop_assert!(key.starts_with("rl:"), "{}", key);
            prop_assert_eq!(key.matches('{').count(), 1, "{}", key);
            prop_assert_eq!(key.matches('}').count(), 1, "{}", key);
            prop_assert_eq!(redis_hash_tag(&key), Some(part.as_str()));
            prop_assert_eq!(key.clone(), format!("rl:{{{part}}}:api"));
            prop_assert!(part.len() <= MAX_CALLER_KEY_BYTES, "{} bytes", part.len());
            match as_today(&c) {
                Some(today) => prop_assert_eq!(key, format!("rl:{{{today}}}:api")),
                None => prop_assert!(part.contains(".esc:") || part.contains(".sha256:"), "{}", part),
            }
        }

        /// (4) Distinct callers, distinct keys (and so distinct tags): over generated sets that
        /// also hold, for each id, its part's text written as a plain id (with and without the
        /// markers), the id with its `%7D`, `%7B`, `%25` decoded, and all of them as the other kind.
        #[test]
        fn distinct_callers_have_distinct_keys(ids in proptest::collection::vec(caller(), 1..40)) {
            let mut callers: HashSet<Caller> = HashSet::new();
            for c in ids {
                let (Caller::Principal(id) | Caller::Tenant(id)) = &c else { unreachable!() };
                let part = c.key_part();
                let tail = part.split_once(':').map_or("", |(_, t)| t).to_string();
                let decoded = id.replace("%7D", "}").replace("%7B", "{").replace("%25", "%");
                let forgeries = [id.clone(), decoded, tail.clone(), format!(".esc:{tail}"), format!(".sha256:{tail}")];
                for forged in forgeries {
                    callers.insert(Caller::Principal(forged.clone()));
                    callers.insert(Caller::Tenant(forged));
                }
                callers.insert(c);
            }
            callers.insert(Caller::Unknown);
            callers.insert(Caller::Ip("192.0.2.1".parse().unwrap()));
            let keys: HashSet<String> = callers.iter().map(key).collect();
            prop_assert_eq!(keys.len(), callers.len());
        }
    }

    #[test]
    fn braces_no_longer_cut_the_tag_short() {
        let a1 = key(&Caller::Principal("a}x1".into()));
        let a2 = key(&Caller::Principal("a}x2".into()));
        // Before: rl:{user:a}x1}:api and rl:{user:a}x2}:api, both tagged `user:a`.
        assert_eq!(a1, "rl:{user.esc:a%7Dx1}:api");
        assert_ne!(redis_hash_tag(&a1), redis_hash_tag(&a2));
        assert_eq!(key(&Caller::Tenant("{x}".into())), "rl:{tenant.esc:%7Bx%7D}:api");
        // A principal cannot write itself into another caller's key.
        assert_ne!(key(&Caller::Principal("a}:api:{user:b".into())), key(&Caller::Principal("b".into())));
        assert_eq!(key(&Caller::Principal("ada".into())), "rl:{user:ada}:api");
    }

    #[test]
    fn ipv6_is_grouped_and_mapped_ipv4_is_ipv4() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(group_ip(ip("2001:db8:1:2:aaaa::1"), 64), ip("2001:db8:1:2::"));
        assert_eq!(group_ip(ip("2001:db8:1:2:aaaa::1"), 48), ip("2001:db8:1::"));
        assert_eq!(group_ip(ip("2001:db8::1"), 128), ip("2001:db8::1"));
        assert_eq!(group_ip(ip("2001:db8::1"), 0), ip("::"));
        assert_eq!(group_ip(ip("::ffff:203.0.113.7"), 64), ip("203.0.113.7"));
        assert_eq!(group_ip(ip("203.0.113.7"), 64), ip("203.0.113.7"));
    }
}
