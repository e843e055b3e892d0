//! HTTP middleware: a tower [`Layer`](tower_layer::Layer) for axum, hyper or any tower-based server.
//!
//! - Keys: the authenticated [`Principal`], then the [`Tenant`], then the client IP; forwarding
//!   headers only through [trusted proxies](RateLimitLayer::trusted_proxies); or your own closure
//!   ([`RateLimitLayer::caller_fn`]).
//! - Every limited response carries `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset`
//!   (seconds), and optionally the IETF draft's `RateLimit-Policy` and `RateLimit` fields;
//!   `X-RateLimit-Degraded: true` when the failure policy decided.
//! - A denial is `429 Too Many Requests` with `Retry-After` (whole seconds, at least 1) and an
//!   `application/problem+json` body (RFC 9457) of type [`RATE_LIMITED`] naming the limit and when to
//!   retry. A request that costs more than the limit can never be allowed: it gets a 429 *without*
//!   `Retry-After` and a body of type [`COST_EXCEEDS_LIMIT`], so clients do not retry it.

mod caller;
mod layer;
mod response;

pub use caller::{Caller, PeerAddr, Principal, Tenant, TrustedProxies};
pub use layer::{RateLimit, RateLimitLayer};
pub use response::{COST_EXCEEDS_LIMIT, RATE_LIMITED};
