//! HTTP middleware: a tower [`Layer`](tower_layer::Layer) for axum, hyper or any tower-based server.
//!
//! - Keys: the authenticated [`Principal`], then the [`Tenant`], then the client IP; forwarding
//!   headers only through [trusted proxies](RateLimitLayer::trusted_proxies); or your own closure
//!   ([`RateLimitLayer::caller_fn`]). IPv6 addresses count per /64 ([`RateLimitLayer::ipv6_prefix`]),
//!   IPv4-mapped ones as IPv4. The caller is the whole hash tag of its keys, at most
//!   [`MAX_CALLER_KEY_BYTES`]: ids with braces escaped, longer ones hashed ([`Caller::key_part`]);
//!   at most [`MAX_HOPS`] hops of a forwarding header are read.
//! - Routes match path prefixes by whole segments; [`RateLimitLayer::build`] refuses configurations
//!   that cannot work; [`RateLimitLayer::on_denial`] shapes your own denial answer.
//! - Every limited response carries `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset`
//!   (seconds), and optionally the IETF draft's `RateLimit-Policy` and `RateLimit` fields. When the
//!   failure policy decided, `X-RateLimit-Degraded: true`, and only what is known without Redis:
//!   `RateLimit-Limit` (and `RateLimit-Policy`), no remaining or reset.
//! - A denial is `429 Too Many Requests` with `Retry-After` (whole seconds, at least 1) and an
//!   `application/problem+json` body (RFC 9457) of type [`RATE_LIMITED`] naming the limit and when to
//!   retry. A request that costs more than the limit can never be allowed: it gets a 429 *without*
//!   `Retry-After` and a body of type [`COST_EXCEEDS_LIMIT`], so clients do not retry it.
//! - A denial because Redis could not decide and the limiter fails closed is of type [`UNAVAILABLE`],
//!   429 or, with [`RateLimitLayer::outage_status`], 503: callers can tell an outage from overuse.
//!   When Redis answers that the limiter is misconfigured (the module not loaded, a renamed or refused
//!   command), the same denial is of type [`MISCONFIGURED`]: not an outage either.
//! - Rolling limits out: [`RateLimitLayer::shadow`] makes a route's limit (or the global one) a dry
//!   run, decided and counted but never enforced; [`AccessLists`] (allow and deny lists by principal,
//!   tenant or network, changed while the layer runs) let some callers through unlimited and turn
//!   others away with `403` and a body of type [`DENIED`], without a call to Redis.
//! - Concurrency limits ([`RateLimitLayer::concurrency`]): at most so many requests of a caller in
//!   flight on a route, checked with the route's rate limits in one RL.ALL call; the slot is held
//!   until the response body has been sent or dropped ([`LimitedBody`]). A denial is a 429 with
//!   `Retry-After` and a body of type [`CONCURRENCY_LIMITED`].
//! - Built as tower-http's middleware are: [`RateLimitLayer`] and its builder, the [`RateLimit`]
//!   service with its accessors, and its named future, [`future::ResponseFuture`].

mod access;
mod body;
#[doc(hidden)]
pub mod caller;
mod check;
#[doc(hidden)]
pub mod config;
mod denial;
mod error;
#[doc(hidden)]
pub mod forwarded;
pub mod future;
mod layer;
pub mod llm;
mod metrics;
#[doc(hidden)]
pub mod plan;
#[doc(hidden)]
pub mod response;
mod service;

pub use access::{Access, AccessLists};
pub use body::LimitedBody;
pub use caller::{Caller, PeerAddr, Principal, Tenant, MAX_CALLER_KEY_BYTES};
pub use denial::{Denial, DenialKind};
pub use error::LayerError;
pub use forwarded::{TrustedProxies, MAX_HOPS};
pub use layer::RateLimitLayer;
pub use plan::limit_key;
pub use response::{
    CONCURRENCY_LIMITED, COST_EXCEEDS_LIMIT, DENIED, MISCONFIGURED, RATE_LIMITED, UNAVAILABLE,
};
pub use service::RateLimit;
