//! Allow and deny lists by principal, tenant or network, which the application changes while the
//! layer runs: an allowed caller is not limited, a denied one is turned away with 403 before any
//! call to Redis.

use ipnet::IpNet;
use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// What the lists say about a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// On the allow list (and not on the deny list): not limited.
    Allowed,
    /// On the deny list: refused, whatever the allow list says.
    Denied,
    /// On neither: limited as usual.
    Limited,
}

/// Allow and deny lists, shared: the layer holds one clone ([`RateLimitLayer::access_lists`]), the
/// application keeps another and changes the lists through it while the layer runs, without
/// rebuilding anything. Cheap to clone (one `Arc`).
///
/// A caller is matched by every identity the request has: its [`Principal`](super::Principal), its
/// [`Tenant`](super::Tenant) (from the request's extensions, or from a custom caller), and its client
/// address (as the trusted-proxy rule resolved it, not grouped per /64). The deny list wins: a
/// principal allowed from a denied network is denied. Allowing an identity takes it off the deny list
/// and denying it takes it off the allow list; networks are kept as networks (`10.1.2.3/8` is
/// `10.0.0.0/8`), and an address in a network on both lists is denied.
///
/// [`RateLimitLayer::access_lists`]: super::RateLimitLayer::access_lists
///
/// ```
/// use redis_ratelimit_client::http::{Access, AccessLists};
///
/// let lists = AccessLists::new();
/// lists.allow_network("10.0.0.0/8".parse().unwrap()); // our own services
/// lists.deny_principal("mallory");
/// let ip = "10.1.2.3".parse().ok();
/// assert_eq!(lists.access(None, None, ip), Access::Allowed);
/// assert_eq!(lists.access(Some("mallory"), None, ip), Access::Denied);
/// lists.remove_principal("mallory");
/// assert_eq!(lists.access(Some("mallory"), None, None), Access::Limited);
/// ```
#[derive(Clone, Default)]
pub struct AccessLists {
    lists: Arc<RwLock<Lists>>,
}

#[derive(Default)]
struct Lists {
    allow: List,
    deny: List,
}

#[derive(Default)]
struct List {
    principals: HashSet<String>,
    tenants: HashSet<String>,
    networks: Vec<IpNet>,
}

impl List {
    fn matches(&self, principals: &[&str], tenants: &[&str], ip: Option<IpAddr>) -> bool {
        principals.iter().any(|p| self.principals.contains(*p))
            || tenants.iter().any(|t| self.tenants.contains(*t))
            || ip.is_some_and(|ip| self.networks.iter().any(|n| n.contains(&ip)))
    }

    fn is_empty(&self) -> bool {
        self.principals.is_empty() && self.tenants.is_empty() && self.networks.is_empty()
    }
}

/// One kind of identity on a list.
enum Identity<'a> {
    Principal(&'a str),
    Tenant(&'a str),
    Network(IpNet),
}

impl AccessLists {
    /// Empty lists: every caller is limited.
    pub fn new() -> AccessLists {
        AccessLists::default()
    }

    /// Principal `p` is not limited.
    pub fn allow_principal(&self, p: &str) {
        self.put(Identity::Principal(p), true);
    }

    /// Tenant `t` is not limited.
    pub fn allow_tenant(&self, t: &str) {
        self.put(Identity::Tenant(t), true);
    }

    /// Callers from network `net` (IPv4 or IPv6; a single address is a /32 or /128) are not limited.
    pub fn allow_network(&self, net: IpNet) {
        self.put(Identity::Network(net), true);
    }

    /// Principal `p` is refused (403).
    pub fn deny_principal(&self, p: &str) {
        self.put(Identity::Principal(p), false);
    }

    /// Tenant `t` is refused (403).
    pub fn deny_tenant(&self, t: &str) {
        self.put(Identity::Tenant(t), false);
    }

    /// Callers from network `net` are refused (403).
    pub fn deny_network(&self, net: IpNet) {
        self.put(Identity::Network(net), false);
    }

    /// Takes principal `p` off both lists: limited as usual again.
    pub fn remove_principal(&self, p: &str) {
        self.remove(Identity::Principal(p));
    }

    /// Takes tenant `t` off both lists.
    pub fn remove_tenant(&self, t: &str) {
        self.remove(Identity::Tenant(t));
    }

    /// Takes network `net` off both lists (the same network; an address inside it stays covered by
    /// any other listed network that holds it).
    pub fn remove_network(&self, net: IpNet) {
        self.remove(Identity::Network(net));
    }

    /// What the lists say about a caller with these identities (any of them may be missing).
    pub fn access(&self, principal: Option<&str>, tenant: Option<&str>, ip: Option<IpAddr>) -> Access {
        let principals: Vec<&str> = principal.into_iter().collect();
        let tenants: Vec<&str> = tenant.into_iter().collect();
        self.access_of(&principals, &tenants, ip)
    }

    /// True when both lists are empty.
    pub fn is_empty(&self) -> bool {
        let lists = self.read();
        lists.allow.is_empty() && lists.deny.is_empty()
    }

    /// The layer's look-up: a request can name a principal or tenant twice (its extension and a custom
    /// caller), and an IPv4-mapped address is matched as IPv4.
    pub(crate) fn access_of(&self, principals: &[&str], tenants: &[&str], ip: Option<IpAddr>) -> Access {
        let ip = ip.map(|ip| ip.to_canonical());
        let lists = self.read();
        if lists.deny.matches(principals, tenants, ip) {
            Access::Denied
        } else if lists.allow.matches(principals, tenants, ip) {
            Access::Allowed
        } else {
            Access::Limited
        }
    }

    fn put(&self, identity: Identity<'_>, allow: bool) {
        let mut lists = self.write();
        let lists = &mut *lists;
        let (to, from) =
            if allow { (&mut lists.allow, &mut lists.deny) } else { (&mut lists.deny, &mut lists.allow) };
        match identity {
            Identity::Principal(p) => {
                from.principals.remove(p);
                to.principals.insert(p.to_string());
            }
            Identity::Tenant(t) => {
                from.tenants.remove(t);
                to.tenants.insert(t.to_string());
            }
            Identity::Network(net) => {
                let net = net.trunc();
                from.networks.retain(|n| *n != net);
                if !to.networks.contains(&net) {
                    to.networks.push(net);
                }
            }
        }
    }

    fn remove(&self, identity: Identity<'_>) {
        let mut lists = self.write();
        let lists = &mut *lists;
        for list in [&mut lists.allow, &mut lists.deny] {
            match &identity {
                Identity::Principal(p) => {
                    list.principals.remove(*p);
                }
                Identity::Tenant(t) => {
                    list.tenants.remove(*t);
                }
                Identity::Network(net) => list.networks.retain(|n| *n != net.trunc()),
            }
        }
    }

    // A writer that panicked left whole entries behind (each change is one insert or remove): the
    // lists are still usable.
    fn read(&self) -> RwLockReadGuard<'_, Lists> {
        self.lists.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Lists> {
        self.lists.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for AccessLists {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lists = self.read();
        let sizes = |l: &List| (l.principals.len(), l.tenants.len(), l.networks.len());
        f.debug_struct("AccessLists")
            .field("allow (principals, tenants, networks)", &sizes(&lists.allow))
            .field("deny (principals, tenants, networks)", &sizes(&lists.deny))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn deny_wins_and_each_identity_is_on_one_list_at_a_time() {
        let lists = AccessLists::new();
        assert!(lists.is_empty());
        lists.allow_principal("ada");
        lists.deny_network("203.0.113.0/24".parse().unwrap());
        assert_eq!(lists.access(Some("ada"), None, ip("198.51.100.1")), Access::Allowed);
        assert_eq!(lists.access(Some("ada"), None, ip("203.0.113.9")), Access::Denied, "deny wins");
        lists.deny_principal("ada");
        assert_eq!(lists.access(Some("ada"), None, None), Access::Denied, "moved, not on both");
        lists.allow_principal("ada");
        assert_eq!(lists.access(Some("ada"), None, None), Access::Allowed);
        lists.remove_principal("ada");
        assert_eq!(lists.access(Some("ada"), None, None), Access::Limited);
        lists.allow_tenant("acme");
        assert_eq!(lists.access(Some("bob"), Some("acme"), None), Access::Allowed);
        lists.remove_tenant("acme");
        assert_eq!(lists.access(Some("bob"), Some("acme"), None), Access::Limited);
    }

    #[test]
    fn networks_of_both_families_match_as_networks() {
        let lists = AccessLists::new();
        lists.allow_network("10.1.2.3/8".parse().unwrap());
        lists.deny_network("2001:db8:bad::/48".parse().unwrap());
        assert_eq!(lists.access(None, None, ip("10.200.0.1")), Access::Allowed);
        assert_eq!(lists.access(None, None, ip("::ffff:10.200.0.1")), Access::Allowed, "mapped IPv4");
        assert_eq!(lists.access(None, None, ip("11.0.0.1")), Access::Limited);
        assert_eq!(lists.access(None, None, ip("2001:db8:bad:1::7")), Access::Denied);
        assert_eq!(lists.access(None, None, ip("2001:db8:beef::7")), Access::Limited);
        assert_eq!(lists.access(None, None, None), Access::Limited);
        lists.remove_network("10.0.0.0/8".parse().unwrap());
        assert_eq!(lists.access(None, None, ip("10.200.0.1")), Access::Limited, "the same network");
        lists.remove_network("2001:db8:bad::/48".parse().unwrap());
        assert!(lists.is_empty());
    }

    #[test]
    fn clones_share_the_lists() {
        let lists = AccessLists::new();
        let held_by_the_layer = lists.clone();
        lists.deny_tenant("spam");
        assert_eq!(held_by_the_layer.access(None, Some("spam"), None), Access::Denied);
        assert!(format!("{held_by_the_layer:?}").contains("deny (principals, tenants, networks): (0, 1, 0)"));
    }
}
