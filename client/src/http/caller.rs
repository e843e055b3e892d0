//! Who is calling: the key a request is limited under, in this order of preference: the
//! authenticated principal, then the tenant, then the client's IP address. The IP is read from
//! `X-Forwarded-For` / `Forwarded` only when the connection comes from a configured trusted proxy:
//! those headers are written by the client otherwise, and a client that could choose its own key
//! could pick a fresh one for every request ([`TrustedProxies`](super::TrustedProxies)).
//!
//! The caller's part of a key ([`Caller::key_part`]) is the whole of the key's hash tag, whatever the
//! caller sent: ids with braces are escaped and ids too long for [`MAX_CALLER_KEY_BYTES`] hashed, so
//! no id can end the tag early, share another caller's tag or make a key of unbounded length.

use http::Extensions;
use sha2::{Digest, Sha256};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// The most bytes of a caller's part of a key, the content of its hash tag (`user:ada` in
/// `rl:{user:ada}:api`). Longer ids are hashed ([`Caller::key_part`]).
pub const MAX_CALLER_KEY_BYTES: usize = 128;
/// What follows a caller's kind in its key part: the id as it is, escaped, or hashed.
pub const PLAIN: &str = ":";
pub const ESCAPED: &str = ".esc:";
pub const HASHED: &str = ".sha256:";
/// The escaped form's escapes: `%` first (it starts every escape), then the braces.
pub const ESCAPES: [(char, &str); 3] = [('%', "%25"), ('{', "%7B"), ('}', "%7D")];

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
    if kind.len() + PLAIN.len() + id.len() <= MAX_CALLER_KEY_BYTES {
        if !id.bytes().any(|b| b == b'{' || b == b'}') {
            return format!("{kind}{PLAIN}{id}");
        }
        let escape = |c: char| ESCAPES.iter().find(|(e, _)| *e == c).map(|(_, to)| *to);
        let grown: usize = id.chars().filter_map(escape).map(|to| to.len() - 1).sum();
        if kind.len() + ESCAPED.len() + id.len() + grown <= MAX_CALLER_KEY_BYTES {
            let mut part = format!("{kind}{ESCAPED}");
            for c in id.chars() {
                match escape(c) {
                    Some(to) => part.push_str(to),
                    None => part.push(c),
                }
            }
            return part;
        }
    }
    let mut part = format!("{kind}{HASHED}");
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

/// The standard key choice: principal, tenant, then the client IP.
pub fn default_caller(extensions: &Extensions, client_ip: Option<IpAddr>) -> Caller {
    if let Some(Principal(p)) = extensions.get::<Principal>() {
        return Caller::Principal(p.clone());
    }
    if let Some(Tenant(t)) = extensions.get::<Tenant>() {
        return Caller::Tenant(t.clone());
    }
    client_ip.map_or(Caller::Unknown, Caller::Ip)
}

/// The peer address from the extensions: ours, or axum's ConnectInfo.
pub fn peer_ip(extensions: &Extensions) -> Option<IpAddr> {
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

/// `<prefix>:{<caller's key part>}`, the start of every key of the caller: the hash tag is the whole
/// caller, whatever it sent (braces escaped, long ids hashed: [`Caller::key_part`]).
pub fn caller_tag(prefix: &str, caller: &Caller) -> String {
    format!("{prefix}:{{{}}}", caller.key_part())
}

/// The address a caller is counted under: IPv4 as it is (also when written IPv4-mapped), IPv6 as
/// its network of `prefix` bits.
pub fn group_ip(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u32::from(prefix.min(128));
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_parts_escape_braces_and_hash_long_ids_and_leave_the_rest_as_it_was() {
        let user = |id: &str| Caller::Principal(id.into()).key_part();
        let tenant = |id: &str| Caller::Tenant(id.into()).key_part();
        assert_eq!(user("ada"), "user:ada");
        assert_eq!(tenant("acme"), "tenant:acme");
        assert_eq!(user("50%:x.esc:y"), "user:50%:x.esc:y", "no brace: the plain `kind:id` form, % and all");
        assert_eq!(user("é日本"), "user:é日本");
        assert_eq!(Caller::Ip("2001:db8::".parse().unwrap()).key_part(), "ip:2001:db8::");
        assert_eq!(Caller::Unknown.key_part(), "unknown");
        // Unescaped, `a}x1` and `a}x2` would both be tagged `user:a`.
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

    /// The id and its kind, when its part is the plain `kind:id` (no brace, under the bound).
    fn plain(caller: &Caller) -> Option<String> {
        let plain = caller.to_string();
        let id = match caller {
            Caller::Principal(id) | Caller::Tenant(id) => id,
            _ => return Some(plain),
        };
        (!id.contains(['{', '}']) && plain.len() <= MAX_CALLER_KEY_BYTES).then_some(plain)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// (1) `rl:` first, (2) exactly one brace pair, the hash tag being the whole caller part,
        /// (3) the part within the bound, (5) the plain key whenever the id has no brace and fits.
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
            match plain(&c) {
                Some(plain) => prop_assert_eq!(key, format!("rl:{{{plain}}}:api")),
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
    fn braces_never_cut_the_tag_short() {
        let a1 = key(&Caller::Principal("a}x1".into()));
        let a2 = key(&Caller::Principal("a}x2".into()));
        // Unescaped, both would be tagged `user:a` (rl:{user:a}x1}:api, rl:{user:a}x2}:api).
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
