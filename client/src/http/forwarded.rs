//! Reading the forwarding chain from `Forwarded` (RFC 7239) or `X-Forwarded-For`, newest hop first,
//! lazily: the caller reads only as many hops as it believes (at most [`MAX_HOPS`]), so a header of
//! 10,000 hops costs no more than one of 32. Never panics: a hop that is not an address (`unknown`,
//! an obfuscated name, garbage, bytes that are not ASCII, an entry over [`MAX_NODE_BYTES`]) is None.
//! The chain is believed only as far as [`TrustedProxies`] say: the client's address is read from it.

use http::header::{HeaderName, FORWARDED};
use http::HeaderMap;
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The most hops read from the right of a forwarding chain. More trusted proxies in a row than this
/// is no real deployment; the hop reached last is then taken as the client.
pub const MAX_HOPS: usize = 32;

/// The longest entry read as an address: `"[ffff:...:255.255.255.255%zone]:65535"` fits; a longer one
/// is not an address and is not parsed.
pub const MAX_NODE_BYTES: usize = 96;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The forwarding chain, newest hop first: the `Forwarded` header's `for=` values when the request
/// has a `Forwarded` header (then it alone is read), else `X-Forwarded-For`'s entries. Every line of
/// the header counts, the last line's last entry first.
pub(super) fn hops(headers: &HeaderMap) -> impl Iterator<Item = Option<IpAddr>> + '_ {
    let forwarded = headers.contains_key(FORWARDED);
    let name = if forwarded { &FORWARDED } else { &X_FORWARDED_FOR };
    headers
        .get_all(name)
        .iter()
        .rev()
        .flat_map(|line| line.as_bytes().rsplit(|&b| b == b','))
        .map(move |entry| if forwarded { for_parameter(entry) } else { Some(entry) }.and_then(parse_node))
}

/// The `for=` value of one `Forwarded` element (`for=192.0.2.60;proto=http;by=203.0.113.43`); the
/// parameter name is case-insensitive (RFC 7239, 4).
fn for_parameter(element: &[u8]) -> Option<&[u8]> {
    element.split(|&b| b == b';').map(<[u8]>::trim_ascii).find_map(|pair| {
        let (name, value) = pair.split_at_checked(4)?;
        name.eq_ignore_ascii_case(b"for=").then_some(value)
    })
}

/// An address as forwarding headers write it: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`,
/// `[2001:db8::1]`, `"[2001:db8::1]:443"`, with an IPv6 zone id (`fe80::1%eth0`, `[fe80::1%25eth0]`)
/// dropped. An IPv6 address with a port needs its brackets (`2001:db8::1:443` is an address).
fn parse_node(node: &[u8]) -> Option<IpAddr> {
    let node = node.trim_ascii();
    if node.len() > MAX_NODE_BYTES {
        return None;
    }
    let node = std::str::from_utf8(node).ok()?.trim_matches('"');
    if let Some(rest) = node.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(is_port);
        return port_ok.then(|| parse_addr(addr)).flatten();
    }
    if let Some(ip) = parse_addr(node) {
        return Some(ip);
    }
    let (host, port) = node.rsplit_once(':')?;
    is_port(port).then(|| host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)).flatten()
}

/// An address, an IPv6 one possibly with its zone id (dropped: it names an interface of the sender).
fn parse_addr(text: &str) -> Option<IpAddr> {
    match text.split_once('%') {
        Some((addr, zone)) if !zone.is_empty() => addr.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
        Some(_) => None,
        None => text.parse().ok(),
    }
}

fn is_port(text: &str) -> bool {
    (1..=5).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_digit()) && text.parse::<u16>().is_ok()
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    // How each way of writing a node reads (as the hop a trusted proxy forwarded) is the contract's
    // vectors (contract/vectors/forwarded.json), which every client runs.

    #[test]
    fn forwarded_elements_give_their_for_parameter_in_any_case() {
        assert_eq!(for_parameter(b"for=192.0.2.1;proto=https"), Some(&b"192.0.2.1"[..]));
        assert_eq!(for_parameter(b" proto=https; FOR=\"[2001:db8::1]\""), Some(&b"\"[2001:db8::1]\""[..]));
        assert_eq!(for_parameter(b"by=10.0.0.1"), None);
        assert_eq!(for_parameter(b"fo"), None);
    }

    fn map(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    #[test]
    fn hops_are_read_newest_first_across_lines_and_forwarded_alone_when_present() {
        let h = map(&[("x-forwarded-for", b"192.0.2.1, 192.0.2.2"), ("x-forwarded-for", b"192.0.2.3")]);
        let got: Vec<_> = hops(&h).collect();
        assert_eq!(got, [ip("192.0.2.3"), ip("192.0.2.2"), ip("192.0.2.1")]);
        // A Forwarded header, even an unreadable one, is the chain: X-Forwarded-For is not consulted.
        let h = map(&[("forwarded", b"for=\xff"), ("x-forwarded-for", b"192.0.2.9")]);
        assert_eq!(hops(&h).collect::<Vec<_>>(), [None]);
        // A non-ASCII entry is one hop that is not an address; its neighbours are read as they are.
        let h = map(&[("x-forwarded-for", b"\xc3\xa9t\xc3\xa9, 192.0.2.4")]);
        assert_eq!(hops(&h).collect::<Vec<_>>(), [ip("192.0.2.4"), None]);
        assert_eq!(hops(&HeaderMap::new()).count(), 0);
    }

    proptest! {
        /// Whatever bytes a header may carry, reading its hops does not panic, and every hop it
        /// yields is one of its entries, at most one per comma-separated entry.
        #[test]
        fn arbitrary_header_bytes_never_panic(
            xff in proptest::collection::vec(prop_oneof![Just(b','), Just(b' '), 0x20u8..=0xff], 0..400),
            fwd in proptest::option::of(
                proptest::collection::vec(prop_oneof![Just(b';'), Just(b','), 0x20u8..=0xff], 0..200)),
        ) {
            let xff: Vec<u8> = xff.into_iter().filter(|&b| b != 0x7f).collect();
            let mut h = map(&[("x-forwarded-for", &xff)]);
            if let Some(fwd) = fwd {
                let fwd: Vec<u8> = fwd.into_iter().filter(|&b| b != 0x7f).collect();
                h.append(FORWARDED, HeaderValue::from_bytes(&fwd).unwrap());
                prop_assert_eq!(hops(&h).count(), fwd.split(|&b| b == b',').count());
            } else {
                prop_assert_eq!(hops(&h).count(), xff.split(|&b| b == b',').count());
            }
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    // The reading of trusted and hostile chains, case by case, is the contract's vectors
    // (contract/vectors/forwarded.json, written from `client_ip` by `contract::vectors`).

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
}
