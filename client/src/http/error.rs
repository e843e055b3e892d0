//! Mistakes in a layer's configuration, refused by [`RateLimitLayer::build`](super::RateLimitLayer::build)
//! with the route and what is wrong, instead of a layer that silently limits something else.

/// A layer configuration that cannot work as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayerError {
    #[error("cost for route '{route}' was given before the route: call .route(\"{route}\", ..) first")]
    CostBeforeRoute { route: String },
    #[error("cost for route '{route}': there is no route of that name (routes: {known})")]
    CostForUnknownRoute { route: String, known: String },
    #[error("route '{route}' is defined twice")]
    DuplicateRoute { route: String },
    #[error("routes '{first}' and '{second}' have the same prefix {prefix:?}: '{second}' would never match")]
    DuplicatePrefix { first: String, second: String, prefix: String },
    #[error("route '{route}': the prefix {prefix:?} must start with '/'")]
    InvalidPrefix { route: String, prefix: String },
    #[error("route '{route}': the name is reserved for the global limit's key")]
    ReservedRouteName { route: String },
    #[error("IPv6 prefix /{0}: must be at most 128")]
    InvalidIpv6Prefix(u8),
    #[error("the layer limits nothing: add a .route(..) or a .global(..) limit")]
    NothingToLimit,
    #[error("shadow '{limit}': there is no limit of that name (limits: {known})")]
    ShadowForUnknownLimit { limit: String, known: String },
    /// A concurrency policy given as a rate limit (it has no release there), or a rate policy given
    /// as a concurrency limit.
    #[error("limit '{limit}': expected {expected}")]
    WrongPolicyKind { limit: String, expected: &'static str },
}
