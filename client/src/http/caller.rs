//! Who is calling: the key a request is limited under, in this order of preference: the
//! authenticated principal, then the tenant, then the client's IP address. The IP is read from
//! `X-Forwarded-For` / `Forwarded` only when the connection comes from a configured trusted proxy:
//! those headers are written by the client otherwise, and a client that could choose its own key
//! could pick a fresh one for every request.
//!
//! The caller's part of a key ([`Caller::key_part`]) is the whole of the key's hash tag, whatever the
//! caller sent: ids with braces are escaped and ids too long for [`MAX_CALLER_KEY_BYTES`] hashed, so
//! no id can end the tag early, share another caller's tag or make a key of unbounded length.

use super::forwarded::{hops, MAX_HOPS};
use http::{Extensions, HeaderMap};
use ipnet::IpNet;
use sha2::{Digest, Sha256};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// The most bytes of a caller's part of a key, the content of its hash tag (`user:ada` in
/// `rl:{user:ada}:api`). Longer ids are hashed ([`Caller::key_part`]).
pub const MAX_CALLER_KEY_BYTES: usize = 128;

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

impl Caller {
    /// The caller's part of its keys, the whole of their hash tag (`rl:{<key part>}:<limit>`):
    ///
    /// - `user:<id>` for a principal, `tenant:<id>` for a tenant, `ip:<address>`, `unknown`: the
    ///   caller as [`Display`](fmt::Display) writes it, whenever the id holds no brace and this
    ///   part is at most [`MAX_CALLER_KEY_BYTES`] (128) bytes: such callers keep the keys (and the
    ///   buckets) they had before this rule.
    /// - `user.esc:<id>` / `tenant.esc:<id>` for an id with a `{` or `}`, with `%`, `{` and `}`
    ///   written `%25`, `%7B` and `%7D`, when that fits in the 128 bytes: `a}b` is `user.esc:a%7Db`.
    /// - `user.sha256:<hex>` / `tenant.sha256:<hex>` otherwise: the SHA-256 of the id's bytes in 64
    ///   hex digits (a 60 kB principal has a 76-byte part).
    ///
    /// No id can hold braces inside the part or exceed the bound, and the three forms cannot meet
    /// (after `user` comes `:`, `.esc:` or `.sha256:`): distinct callers have distinct parts, so
    /// distinct keys and, on Redis Cluster, slots chosen by the whole caller.
    pub fn key_part(&self) -> String {
        match self {
            Caller::Principal(id) => id_part("user", id),
            Caller::Tenant(id) => id_part("tenant", id),
            Caller::Ip(_) | Caller::Unknown => self.to_string(),
        }
    }
}

/// `kind:id`, `kind.esc:<escaped id>` or `kind.sha256:<hex>`, as [`Caller::key_part`] says.
fn id_part(kind: &str, id: &str) -> String {
    // A long id is hashed without being scanned first: its bytes are read once, by the hash.
    if kind.len() + 1 + id.len() <= MAX_CALLER_KEY_BYTES {
        if !id.bytes().any(|b| b == b'{' || b == b'}') {
            return format!("{kind}:{id}");
        }
        let escapes = id.bytes().filter(|b| matches!(b, b'{' | b'}' | b'%')).count();
        if kind.len() + ".esc:".len() + id.len() + 2 * escapes <= MAX_CALLER_KEY_BYTES {
            let mut part = format!("{kind}.esc:");
            for c in id.chars() {
                match c {
                    '%' => part.push_str("%25"),
                    '{' => part.push_str("%7B"),
                    '}' => part.push_str("%7D"),
                    c => part.push(c),
                }
            }
            return part;
        }
    }
    let mut part = format!("{kind}.sha256:");
    for byte in Sha256::digest(id.as_bytes()) {
        part.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        part.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
    }
    part
}

impl fmt::Display for Caller {
    /// The caller as written: `user:ada`, `tenant:acme`, `ip:203.0.113.7`, `unknown`. Keys hold
    /// [`Caller::key_part`], the same text for every id without braces and up to 128 bytes.
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
    ///
    /// The chain is `Forwarded`'s `for=` values when the request has a `Forwarded` header, else
    /// `X-Forwarded-For`, every line, from the right. An entry may be `192.0.2.1`, `192.0.2.1:80`,
    /// `2001:db8::1`, `[2001:db8::1]:443`, quoted, with an IPv6 zone id (`fe80::1%eth0`, dropped). An
    /// entry that is not an address (`unknown`, an obfuscated name, garbage, bytes that are not
    /// ASCII, an empty entry) ends the reading: the last trusted hop is the best we know. At most
    /// [`MAX_HOPS`] (32) hops are read; after 32 trusted ones, the 32nd counts. A peer that is not a
    /// trusted proxy is never read past: whatever it sends, it is its own address.
    pub fn client_ip(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let mut client = peer?.to_canonical();
        if !self.contains(&client) {
            return Some(client);
        }
        for hop in hops(headers).take(MAX_HOPS) {
            let Some(ip) = hop else { break };
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
        // A dual-stack socket's IPv4 proxy is still the trusted proxy.
        assert_eq!(trusted.client_ip(ip("::ffff:10.0.0.1"), &chain), ip("203.0.113.7"));
    }

    #[test]
    fn key_parts_escape_braces_and_hash_long_ids_and_leave_the_rest_as_it_was() {
        let user = |id: &str| Caller::Principal(id.into()).key_part();
        let tenant = |id: &str| Caller::Tenant(id.into()).key_part();
        assert_eq!(user("ada"), "user:ada");
        assert_eq!(tenant("acme"), "tenant:acme");
        assert_eq!(user("50%:x.esc:y"), "user:50%:x.esc:y", "no brace: as today, % and all");
        assert_eq!(user("é日本"), "user:é日本");
        assert_eq!(Caller::Ip("2001:db8::".parse().unwrap()).key_part(), "ip:2001:db8::");
        assert_eq!(Caller::Unknown.key_part(), "unknown");
        // Today `a}x1` and `a}x2` would both be tagged `user:a`.
        assert_eq!(user("a}x1"), "user.esc:a%7Dx1");
        assert_eq!(user("a}x2"), "user.esc:a%7Dx2");
        assert_eq!(user("{x}"), "user.esc:%7Bx%7D");
        assert_eq!(tenant("50%{"), "tenant.esc:50%25%7B");
        // Under the bound as it is; one byte over, hashed.
        let at_bound = "a".repeat(MAX_CALLER_KEY_BYTES - "user:".len());
        assert_eq!(user(&at_bound), format!("user:{at_bound}"));
        let over = format!("{at_bound}a");
        let hashed = user(&over);
        assert!(hashed.starts_with("user.sha256:") && hashed.len() == 76, "{hashed}");
        assert_ne!(hashed, user(&format!("{at_bound}b")));
        assert_eq!(hashed, user(&over), "the same id, the same key");
        // A 60 kB principal: a 76-byte part. Braces that do not fit escaped: hashed too.
        assert_eq!(user(&"x".repeat(60_000)).len(), 76);
        assert_eq!(user(&"}".repeat(40)).len(), 76);
        assert_eq!(tenant(&"}".repeat(40)).len(), 78);
        assert_eq!(
            user("abc".repeat(50).as_str()),
            "user.sha256:".to_string() + &hex(&Sha256::digest("abc".repeat(50)))
        );
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn hostile_forwarding_headers_are_read_as_documented() {
        let trusted = TrustedProxies::new(["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()]);
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let proxy = ip("10.0.0.1");
        let raw = |pairs: &[(&str, &[u8])]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                let name = http::HeaderName::from_bytes(k.as_bytes()).unwrap();
                h.append(name, http::HeaderValue::from_bytes(v).unwrap());
            }
            h
        };
        let cases: &[(&[u8], Option<IpAddr>)] = &[
            (b"203.0.113.7:8080", ip("203.0.113.7")),
            (b"[2001:db8::1]:443", ip("2001:db8::1")),
            (b"fe80::1%eth0", ip("fe80::1")),
            (b"::ffff:203.0.113.9", ip("203.0.113.9")),
            (b"203.0.113.9, ::ffff:10.0.0.5", ip("203.0.113.9")),
            (b"203.0.113.9, [fd00::1%2]:80", ip("203.0.113.9")),
            (b"\xff\xfe", proxy),
            (b"\xff, 203.0.113.11", ip("203.0.113.11")),
            (b"203.0.113.12, \xff", proxy),
            (b"", proxy),
            (b"203.0.113.13,", proxy),
            (b"unknown", proxy),
        ];
        for (xff, expected) in cases {
            let h = raw(&[("x-forwarded-for", xff)]);
            assert_eq!(trusted.client_ip(proxy, &h), *expected, "{}", String::from_utf8_lossy(xff));
        }
        let fwd = raw(&[("forwarded", b"for=198.51.100.1, FOR=\"[fe80::2%25eth0]:80\";proto=https")]);
        assert_eq!(trusted.client_ip(proxy, &fwd), ip("fe80::2"));
        let fwd = raw(&[("forwarded", b"for=_hidden"), ("x-forwarded-for", b"203.0.113.1")]);
        assert_eq!(trusted.client_ip(proxy, &fwd), proxy, "Forwarded alone is read when present");
    }

    #[test]
    fn ten_thousand_hops_cost_at_most_max_hops() {
        let trusted = TrustedProxies::new(["10.0.0.0/8".parse().unwrap()]);
        let proxy = Some("10.0.0.1".parse().unwrap());
        // Spoofed on the left, the proxy's view on the right: one hop read.
        let mut chain: Vec<String> =
            (0..10_000).map(|i| format!("198.51.{}.{}", i / 256 % 256, i % 256)).collect();
        chain.push("203.0.113.7".into());
        let h = headers(&[("x-forwarded-for", &chain.join(", "))]);
        assert_eq!(trusted.client_ip(proxy, &h), Some("203.0.113.7".parse().unwrap()));
        // 10,000 trusted hops with an untrusted one beyond the 32nd: reading stopped at the 32nd.
        let mut chain: Vec<String> =
            (0..10_000).map(|i| format!("10.0.{}.{}", i / 256 % 256, i % 256)).collect();
        chain[10_000 - MAX_HOPS - 1] = "203.0.113.8".into();
        let h = headers(&[("x-forwarded-for", &chain.join(","))]);
        assert_eq!(trusted.client_ip(proxy, &h), Some(chain[10_000 - MAX_HOPS].parse().unwrap()));
        chain[10_000 - MAX_HOPS] = "203.0.113.9".into();
        let h = headers(&[("x-forwarded-for", &chain.join(","))]);
        assert_eq!(trusted.client_ip(proxy, &h), Some("203.0.113.9".parse().unwrap()), "the 32nd is read");
        // Hops spread over many lines count the same.
        let lines: Vec<(&str, &str)> = chain.iter().map(|hop| ("x-forwarded-for", hop.as_str())).collect();
        assert_eq!(trusted.client_ip(proxy, &headers(&lines)), Some("203.0.113.9".parse().unwrap()));
    }

    proptest::proptest! {
        /// A peer that is not a trusted proxy is its own address, whatever it sends; a trusted one
        /// gets an address, never a panic.
        #[test]
        fn an_untrusted_peer_is_its_address_whatever_it_sends(
            xff in proptest::collection::vec(0x20u8..=0xff, 0..300),
            fwd in proptest::collection::vec(0x20u8..=0xff, 0..300),
            with_fwd in proptest::bool::ANY,
            peer in proptest::prelude::any::<std::net::Ipv6Addr>(),
        ) {
            let clean = |v: Vec<u8>| http::HeaderValue::from_bytes(&v.into_iter().filter(|&b| b != 0x7f).collect::<Vec<_>>()).unwrap();
            let mut h = HeaderMap::new();
            h.append("x-forwarded-for", clean(xff));
            if with_fwd {
                h.append("forwarded", clean(fwd));
            }
            let trusted = TrustedProxies::new(["10.0.0.0/8".parse().unwrap()]);
            let peer = IpAddr::V6(peer).to_canonical();
            if !matches!(peer, IpAddr::V4(v4) if v4.octets()[0] == 10) {
                proptest::prop_assert_eq!(trusted.client_ip(Some(peer), &h), Some(peer));
            }
            proptest::prop_assert!(trusted.client_ip(Some("10.0.0.1".parse().unwrap()), &h).is_some());
        }
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
