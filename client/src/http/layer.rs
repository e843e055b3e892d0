//! The tower `Layer` and its builder: routes, limits and answers configured once, checked by
//! [`build`](RateLimitLayer::build), then shared by every service the layer wraps.

use super::access::AccessLists;
use super::caller::Caller;
use super::config::{kind_mistake, limit_mistake, Config, CostFn, Mistake, Route, Source};
use super::denial::Denial;
use super::error::LayerError;
use super::forwarded::TrustedProxies;
use super::service::RateLimit;
use crate::limiter::Limiter;
use crate::policy::Policy;
use http::request::Parts;
use http::{Response, StatusCode};
use ipnet::IpNet;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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
        RateLimitLayer { config: Arc::new(Config::new(limiter)) }
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

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
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
        RateLimit::new(inner, Arc::clone(&self.config))
    }
}
