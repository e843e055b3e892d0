//! Request planning: which limits a request is checked against (its route's, the global one, the
//! concurrency limits), under which keys and at what cost, or why it is not checked at all (skipped,
//! on an allow or deny list). No call to Redis is made here.

use super::access::{Access, AccessLists};
use super::caller::{caller_tag, default_caller, group_ip, peer_ip, Caller, Principal, Tenant};
use super::config::Config;
use crate::policy::Policy;
use http::request::Parts;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What the layer does with one request (besides passing it on untouched).
pub(super) enum Step {
    /// Check these limits.
    Limit(Plan),
    /// On the allow list: served without a limit (the route's name, for the counter).
    Allowlisted(Arc<str>),
    /// On the deny list: 403.
    Refuse(Arc<str>),
}

/// The limits one request is checked against.
pub(super) struct Plan {
    pub(super) route_name: Arc<str>,
    pub(super) limits: Vec<PlannedLimit>,
}

/// One limit of a request: its key, policy, what the request costs, and its name (the route's, or
/// `all`) in headers and metrics.
pub(super) struct PlannedLimit {
    pub(super) key: String,
    pub(super) policy: Policy,
    pub(super) cost: u64,
    pub(super) name: Arc<str>,
    pub(super) shadow: bool,
}

impl Config {
    /// What to do with the request whose head is `parts`; None: pass it on untouched.
    pub(super) fn plan(&self, parts: &Parts) -> Option<Step> {
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
            let policy = r.source.policy(&caller);
            limits.push(PlannedLimit {
                key: limit_key(&tag, &r.name, &policy),
                policy,
                cost,
                name: Arc::clone(&r.name),
                shadow: r.shadow,
            });
        }
        if let Some(g) = &self.global {
            let (policy, name) = (g.policy(&caller), Arc::clone(&self.global_name));
            let key = limit_key(&tag, &name, &policy);
            let shadow = self.global_shadow;
            limits.push(PlannedLimit { key, policy, cost, name, shadow });
        }
        // Leases of weight 1: a request in flight is one, whatever its rate cost.
        if let Some(r) = concurrency {
            let (policy, name) = (r.source.policy(&caller), Arc::clone(&r.name));
            let key = limit_key(&tag, &name, &policy);
            limits.push(PlannedLimit { key, policy, cost: 1, name, shadow: false });
        }
        if let Some(g) = &self.global_concurrency {
            let (policy, name) = (g.policy(&caller), Arc::clone(&self.global_name));
            let key = limit_key(&tag, &name, &policy);
            limits.push(PlannedLimit { key, policy, cost: 1, name, shadow: false });
        }
        Some(Step::Limit(Plan { route_name, limits }))
    }
}

/// A limit's key (the contract's `http.limit_key`): the caller's tag, the limit's name and its kind's
/// owner, so that a limit whose kind changes in a deploy starts afresh instead of meeting the other
/// kind's state, and one whose numbers change carries on (docs/errors.md). An admin page reads a
/// caller's state under it: `limit_key("rl:{ip:203.0.113.7}", "api", &policy)`.
pub fn limit_key(tag: &str, name: &str, policy: &Policy) -> String {
    format!("{tag}:{name}:{}", policy.kind().owner().name())
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
}
