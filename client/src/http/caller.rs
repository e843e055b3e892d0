//! Who is calling: the key a request is limited under, in this order of preference: the
//! authenticated principal, then the tenant, then the client's IP address. The IP is read from
//! `X-Forwarded-For` / `Forwarded` only when the connection comes from a configured trusted proxy:
//! those headers are written by the client otherwise, and a client that could choose its own key
//! could pick a fresh one for every request.

use http::{Extensions, HeaderMap};
use ipnet::IpNet;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// The authenticated principal (user or API key id). Your authentication layer inserts it into the
/// request's extensions; the rate limit layer then limits by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub String);

/// The tenant of a multi-tenant API, inserted into the request's extensions like [`Principal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);

/// The address of the connection's peer, for servers other than axum (whose `ConnectInfo` is read
/// directly): insert it into the request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// Who a request is counted against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    Principal(String),
    Tenant(String),
    Ip(IpAddr),
    /// No principal, no tenant and no peer address: all such requests share one key.
    Unknown,
}

impl fmt::Display for Caller {
    /// The caller as it appears in keys: `user:ada`, `tenant:acme`, `ip:203.0.113.7`, `unknown`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caller::Principal(p) => write!(f, "user:{p}"),
            Caller::Tenant(t) => write!(f, "tenant:{t}"),
            Caller::Ip(ip) => write!(f, "ip:{ip}"),
            Caller::Unknown => f.write_str("unknown"),
        }
    }
}

/// Proxies whose forwarding headers are believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    pub fn new(nets: impl IntoIterator<Item = IpNet>) -> TrustedProxies {
        TrustedProxies(nets.into_iter().collect())
    }

    fn contains(&self, ip: &IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(ip))
    }

    /// The client's address: the peer's, or, when the peer is a trusted proxy, the nearest address in
    /// the forwarding chain that is not a trusted proxy (read from the right: entries to the left of
    /// an untrusted hop were written by someone we do not trust).
    /// IPv4-mapped addresses are read as IPv4 (a dual-stack socket's IPv4 peers).
    pub fn client_ip(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let mut client = peer?.to_canonical();
        if !self.contains(&client) {
            return Some(client);
        }
        for hop in forwarded_chain(headers).into_iter().rev() {
            let Some(ip) = hop else { return Some(client) };
            client = ip.to_canonical();
            if !self.contains(&client) {
                break;
            }
        }
        Some(client)
    }
}

/// The standard key choice: principal, tenant, then the client IP.
pub(crate) fn default_caller(extensions: &Extensions, client_ip: Option<IpAddr>) -> Caller {
    if let Some(Principal(p)) = extensions.get::<Principal>() {
        return Caller::Principal(p.clone());
    }
    if let Some(Tenant(t)) = extensions.get::<Tenant>() {
        return Caller::Tenant(t.clone());
    }
    client_ip.map_or(Caller::Unknown, Caller::Ip)
}

/// The peer address from the extensions: ours, or axum's ConnectInfo.
pub(crate) fn peer_ip(extensions: &Extensions) -> Option<IpAddr> {
    if let Some(PeerAddr(addr)) = extensions.get::<PeerAddr>() {
        return Some(addr.ip());
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(addr.ip());
    }
    None
}

/// The forwarding chain, oldest first: `Forwarded` (RFC 7239) `for=` values when present, else
/// `X-Forwarded-For`. An entry that is not an address (`unknown`, an obfuscated name, garbage) is None.
fn forwarded_chain(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let joined = |name: &str| {
        let values: Vec<&str> = headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect();
        (!values.is_empty()).then(|| values.join(","))
    };
    if let Some(forwarded) = joined("forwarded") {
        return forwarded
            .split(',')
            .map(|element| {
                element
                    .split(';')
                    .find_map(|pair| {
                        pair.trim().strip_prefix("for=").or_else(|| pair.trim().strip_prefix("For="))
                    })
                    .and_then(parse_node)
            })
            .collect();
    }
    joined("x-forwarded-for").map_or_else(Vec::new, |xff| xff.split(',').map(parse_node).collect())
}

/// An address as forwarding headers write it: `192.0.2.1`, `192.0.2.1:80`, `"[2001:db8::1]:443"`.
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim().trim_matches('"');
    if let Some(rest) = node.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    node.parse().ok().or_else(|| node.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn forwarding_headers_count_only_through_trusted_proxies() {
        let trusted = TrustedProxies::new(["10.0.0.0/8".parse().unwrap()]);
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let spoofed = headers(&[("x-forwarded-for", "1.2.3.4")]);
        // A client connecting directly cannot choose its address.
        assert_eq!(trusted.client_ip(ip("198.51.100.9"), &spoofed), ip("198.51.100.9"));
        // Through our proxy: the address the proxy saw, not what the client prepended.
        let chain = headers(&[("x-forwarded-for", "1.2.3.4, 203.0.113.7, 10.0.0.2")]);
        assert_eq!(trusted.client_ip(ip("10.0.0.1"), &chain), ip("203.0.113.7"));
        let forwarded = headers(&[("forwarded", r#"for=1.2.3.4, for="[2001:db8::7]:443";proto=https"#)]);
        assert_eq!(trusted.client_ip(ip("10.0.0.1"), &forwarded), ip("2001:db8::7"));
        // Garbage where an address should be: the last trusted hop is the best we know.
        let garbage = headers(&[("x-forwarded-for", "1.2.3.4, nonsense")]);
        assert_eq!(trusted.client_ip(ip("10.0.0.1"), &garbage), ip("10.0.0.1"));
        assert_eq!(trusted.client_ip(None, &chain), None);
        assert_eq!(parse_node("192.0.2.1:8080"), ip("192.0.2.1"));
        // A dual-stack socket's IPv4 proxy is still the trusted proxy.
        assert_eq!(trusted.client_ip(ip("::ffff:10.0.0.1"), &chain), ip("203.0.113.7"));
    }

    #[test]
    fn principal_before_tenant_before_ip() {
        let mut ext = Extensions::new();
        let ip = Some("192.0.2.1".parse().unwrap());
        assert_eq!(default_caller(&ext, ip).to_string(), "ip:192.0.2.1");
        assert_eq!(default_caller(&ext, None), Caller::Unknown);
        ext.insert(Tenant("acme".into()));
        assert_eq!(default_caller(&ext, ip).to_string(), "tenant:acme");
        ext.insert(Principal("ada".into()));
        assert_eq!(default_caller(&ext, ip).to_string(), "user:ada");
    }
}
