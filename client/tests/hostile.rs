//! Hostile callers at the HTTP edge, through a real listening socket, a real HTTP client and a real
//! module-enabled server: what callers send (principals, tenants, custom keys, forwarding headers)
//! cannot cut or share a hash tag, make a huge key, or buy a fresh bucket per request. The keys are
//! read back from the server with SCAN.

mod support;

use axum::routing::get;
use axum::Router;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redis_ratelimit_client::http::{Caller, RateLimitLayer, MAX_CALLER_KEY_BYTES, MAX_HOPS};
use redis_ratelimit_client::{FailurePolicy, Policy};
use reqwest::header::HeaderValue;
use std::collections::{HashMap, HashSet};
use support::web::{serve, with_auth};
use testkit::{redis, unique_key, Server};

fn app(layer: RateLimitLayer) -> Router {
    Router::new().route("/api/items", get(|| async { "ok" })).layer(layer)
}

/// A layer with its own key prefix (`rl:<pid>:<n>`: still under `rl:`) and one route `api`.
fn layer(server: &Server, capacity: u64) -> (RateLimitLayer, String) {
    let prefix = unique_key("rl");
    let limiter = support::builder(FailurePolicy::Closed).connect(server.url()).unwrap();
    let layer = RateLimitLayer::new(limiter).key_prefix(&prefix).route(
        "api",
        "/api",
        Policy::token_bucket(capacity, 0.001).unwrap(),
    );
    (layer, prefix)
}

/// Every key under `prefix`, read with SCAN.
fn keys(server: &Server, prefix: &str) -> HashSet<String> {
    let mut con = server.conn();
    let mut cursor = 0u64;
    let mut found = HashSet::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query(&mut con)
            .unwrap();
        found.extend(batch);
        if next == 0 {
            return found;
        }
        cursor = next;
    }
}

/// The hash tag Redis Cluster hashes: from the first `{` to the first `}` after it, when not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')? + open + 1;
    (close > open + 1).then(|| &key[open + 1..close])
}

/// The shape every key of the layer has: `<prefix>:{<tag>}:api:token_bucket`, one brace of each kind, the tag
/// within the bound. Returns the tag.
fn checked_tag<'a>(key: &'a str, prefix: &str) -> &'a str {
    assert!(key.starts_with("rl:") && key.starts_with(&format!("{prefix}:{{")), "{key}");
    assert!(key.ends_with("}:api:token_bucket"), "{key}");
    assert_eq!((key.matches('{').count(), key.matches('}').count()), (1, 1), "{key}");
    let tag = hash_tag(key).unwrap();
    assert_eq!(key, format!("{prefix}:{{{tag}}}:api:token_bucket"));
    assert!(tag.len() <= MAX_CALLER_KEY_BYTES, "{} bytes: {key}", tag.len());
    tag
}

async fn send(client: &reqwest::Client, base: &str, headers: &[(&str, HeaderValue)]) -> (u16, Option<u64>) {
    let mut req = client.get(format!("{base}/api/items"));
    for (name, value) in headers {
        req = req.header(*name, value.clone());
    }
    let resp = req.send().await.unwrap();
    let remaining = resp.headers().get("ratelimit-remaining").map(|v| v.to_str().unwrap().parse().unwrap());
    (resp.status().as_u16(), remaining)
}

fn text(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap()
}

fn bytes(b: &[u8]) -> HeaderValue {
    HeaderValue::from_bytes(b).unwrap()
}

/// Request `i`'s forged forwarding headers: a fresh address of each family, mapped, with zones and
/// ports, RFC 7239 in any case, garbage, bytes that are not ASCII, and now and then a 10,000-hop chain
/// or a 60 kB value.
fn spoofed(i: usize) -> Vec<(&'static str, HeaderValue)> {
    let (a, b) = (i / 256 % 256, i % 256);
    let xff = |v: HeaderValue| vec![("x-forwarded-for", v)];
    let fwd = |v: HeaderValue| vec![("forwarded", v)];
    if i % 1000 == 999 {
        let chain: Vec<String> =
            (0..10_000).map(|h| format!("198.51.{}.{}", h / 256 % 256, h % 256)).collect();
        return xff(text(&chain.join(", ")));
    }
    if i % 1000 == 500 {
        return fwd(text(&format!("for={}", "9".repeat(60_000))));
    }
    match i % 12 {
        0 => xff(text(&format!("198.51.{a}.{b}"))),
        1 => xff(text(&format!("2001:db8:{i:x}::1"))),
        2 => xff(text(&format!("::ffff:203.0.{a}.{b}"))),
        3 => xff(text(&format!("fe80::{i:x}%eth{b}"))),
        4 => xff(text(&format!("[2001:db8::{i:x}]:{}", 1 + i % 65_000))),
        5 => xff(text(&format!("203.0.{a}.{b}:{}", 1 + i % 65_000))),
        6 => fwd(text(&format!("for=198.51.{a}.{b};proto=https"))),
        7 => fwd(text(&format!("FOR=\"[2001:db8::{i:x}%25eth0]:443\", for=10.0.0.{b}"))),
        8 => xff(bytes(format!("\u{fffd}{i}\u{e9}, 198.51.{a}.{b}").as_bytes())),
        9 => xff(bytes(&[&[0xff, 0xfe][..], i.to_string().as_bytes(), &[0x80]].concat())),
        10 => vec![("x-forwarded-for", text(&format!("garbage-{i}"))), ("forwarded", text("for=unknown"))],
        _ => xff(text(&format!("10.{a}.{b}.1, 198.51.{a}.{b}, ::ffff:10.0.0.{b}"))),
    }
}

/// 10,000 requests from one peer that is not a trusted proxy, each with other forged forwarding
/// headers: one bucket, charged once per request, and one key on the server.
#[tokio::test]
async fn ten_thousand_spoofed_headers_from_an_untrusted_peer_share_one_bucket() {
    const REQUESTS: usize = 10_000;
    let server = Server::builder().single();
    let (layer, prefix) = layer(&server, 20_000);
    // Proxies are configured, but loopback (the peer) is not one of them.
    let layer = layer.trusted_proxies(["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()]);
    let base = serve(app(layer.build().unwrap())).await;
    let client = reqwest::Client::new();
    for i in 0..REQUESTS {
        let (status, remaining) = send(&client, &base, &spoofed(i)).await;
        assert_eq!(status, 200, "request {i}");
        assert_eq!(remaining, Some(20_000 - 1 - i as u64), "request {i}: the one bucket, charged once more");
    }
    let found = keys(&server, &prefix);
    assert_eq!(
        found,
        HashSet::from([format!("{prefix}:{{ip:127.0.0.1}}:api:token_bucket")]),
        "one key for one peer"
    );
}

/// Behind a trusted proxy (loopback here), the forwarding headers are read as docs/client.md says:
/// each row charges the bucket of the address it names, and only those buckets exist.
#[tokio::test]
async fn forwarding_headers_through_a_trusted_proxy_are_read_as_documented() {
    let server = Server::builder().single();
    let (layer, prefix) = layer(&server, 100);
    let layer = layer.trusted_proxies(["127.0.0.0/8".parse().unwrap()]).ipv6_prefix(128);
    let base = serve(app(layer.build().unwrap())).await;
    let client = reqwest::Client::new();
    let proxy = "127.0.0.1";
    let spoofed_then_real = {
        let mut chain: Vec<String> =
            (0..10_000).map(|h| format!("198.51.{}.{}", h / 256 % 256, h % 256)).collect();
        chain.push("203.0.113.7".into());
        chain.join(", ")
    };
    // 10,000 trusted hops; the first untrusted one is beyond MAX_HOPS: never read.
    let deep = |last: &str| {
        let mut chain: Vec<String> =
            (0..10_000).map(|h| format!("127.0.{}.{}", h / 256 % 256, h % 256)).collect();
        chain[10_000 - MAX_HOPS - 1] = "203.0.113.66".into();
        chain[10_000 - MAX_HOPS] = last.into();
        chain.join(",")
    };
    let rows: Vec<(Vec<(&str, HeaderValue)>, &str)> = vec![
        (vec![("x-forwarded-for", text("203.0.113.7"))], "203.0.113.7"),
        (vec![("x-forwarded-for", text("203.0.113.7:8080"))], "203.0.113.7"),
        (vec![("x-forwarded-for", text("::ffff:203.0.113.7"))], "203.0.113.7"),
        (vec![("x-forwarded-for", text("[2001:db8::1]:443"))], "2001:db8::1"),
        (vec![("x-forwarded-for", text("fe80::1%eth0"))], "fe80::1"),
        (vec![("x-forwarded-for", text("2001:db8::1:443"))], "2001:db8::1:443"),
        (vec![("forwarded", text("For=\"[fe80::1%25eth0]:80\";proto=https"))], "fe80::1"),
        (vec![("forwarded", text("for=198.51.100.1, FOR=203.0.113.7"))], "203.0.113.7"),
        (vec![("x-forwarded-for", bytes(b"\xff\xfe, 203.0.113.7"))], "203.0.113.7"),
        (vec![("x-forwarded-for", text(&spoofed_then_real))], "203.0.113.7"),
        // What is not an address ends the reading at the last trusted hop: the proxy.
        (vec![("x-forwarded-for", bytes(b"\xff\xfe"))], proxy),
        (vec![("x-forwarded-for", text("203.0.113.9, garbage"))], proxy),
        (vec![("x-forwarded-for", text("203.0.113.9:99999"))], proxy),
        (vec![("x-forwarded-for", text("[2001:db8::9"))], proxy),
        (vec![("x-forwarded-for", text(""))], proxy),
        (vec![("forwarded", text("for=_hidden")), ("x-forwarded-for", text("203.0.113.9"))], proxy),
        (vec![("forwarded", text("for=unknown"))], proxy),
        (vec![("forwarded", text(&format!("for={}", "1".repeat(60_000))))], proxy),
        (vec![("x-forwarded-for", text(&deep("127.0.99.1")))], "127.0.99.1"),
        (vec![("x-forwarded-for", text(&deep("203.0.113.10")))], "203.0.113.10"),
    ];
    let mut charged: HashMap<&str, u64> = HashMap::new();
    for (headers, expected) in &rows {
        let (status, remaining) = send(&client, &base, headers).await;
        let n = charged.entry(*expected).or_default();
        *n += 1;
        assert_eq!((status, remaining), (200, Some(100 - *n)), "{headers:?} is {expected}");
    }
    let expected: HashSet<String> =
        charged.keys().map(|ip| format!("{prefix}:{{ip:{ip}}}:api:token_bucket")).collect();
    assert_eq!(keys(&server, &prefix), expected);
}

/// Braces in principals and tenants: today `a}x1` and `a}x2` would both be tagged `user:a` (one slot,
/// and a tag that is not the caller). Each caller has its own bucket, each key one tag holding the
/// whole caller, and a principal without braces keeps its key, and its bucket, from before.
#[tokio::test]
async fn braces_in_principals_and_tenants_cannot_cut_or_share_a_hash_tag() {
    let server = Server::builder().single();
    let (layer, prefix) = layer(&server, 5);
    // The bucket `ada` had before the upgrade, 3 tokens spent under the key the layer always used.
    let old_key = format!("{prefix}:{{user:ada}}:api:token_bucket");
    let mut spend = redis::cmd("RL.TOKEN");
    if testkit::lua_engine() {
        // On the Lua library: its function, as the module's command.
        let library = redis_ratelimit_client::lua::LIBRARY;
        let () =
            redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(library).query(&mut server.conn()).unwrap();
        spend = redis::cmd("FCALL");
        spend.arg("rl_token").arg(1);
    }
    let _: Vec<i64> = spend.arg(&old_key).arg(5).arg(0.001).arg(3).query(&mut server.conn()).unwrap();
    let base = serve(with_auth(app(layer.build().unwrap()))).await;
    let client = reqwest::Client::new();
    let callers: &[(&str, &str, &str)] = &[
        ("x-user", "a}x1", "user.esc:a%7Dx1"),
        ("x-user", "a}x2", "user.esc:a%7Dx2"),
        ("x-user", "a", "user:a"),
        ("x-user", "a}", "user.esc:a%7D"),
        ("x-user", "{x}", "user.esc:%7Bx%7D"),
        ("x-user", "x}:api:{user:a", "user.esc:x%7D:api:%7Buser:a"),
        ("x-user", "%7D", "user:%7D"),
        ("x-user", "}", "user.esc:%7D"),
        ("x-tenant", "a}x1", "tenant.esc:a%7Dx1"),
        ("x-tenant", "{x}", "tenant.esc:%7Bx%7D"),
        ("x-tenant", "acme", "tenant:acme"),
    ];
    for (header, id, _) in callers {
        let mut statuses = vec![];
        for _ in 0..6 {
            statuses.push(send(&client, &base, &[(header, text(id))]).await);
        }
        let expected: Vec<(u16, Option<u64>)> = vec![
            (200, Some(4)),
            (200, Some(3)),
            (200, Some(2)),
            (200, Some(1)),
            (200, Some(0)),
            (429, Some(0)),
        ];
        assert_eq!(statuses, expected, "{header}: {id} has a bucket of its own");
    }
    assert_eq!(send(&client, &base, &[("x-user", text("ada"))]).await, (200, Some(1)), "ada's old bucket");
    let found = keys(&server, &prefix);
    let mut expected: HashSet<String> =
        callers.iter().map(|(_, _, part)| format!("{prefix}:{{{part}}}:api:token_bucket")).collect();
    expected.insert(old_key);
    assert_eq!(found, expected);
    let tags: HashSet<&str> = found.iter().map(|k| checked_tag(k, &prefix)).collect();
    assert_eq!(tags.len(), found.len(), "one slot-deciding tag per caller");
}

/// A 60 kB principal was accepted and made a 60 kB key: now a 76-byte tag, the id's SHA-256, one
/// bucket per id (the same id twice shares it, ids differing in their last byte do not).
#[tokio::test]
async fn a_huge_principal_makes_a_bounded_key() {
    let server = Server::builder().single();
    let (layer, prefix) = layer(&server, 2);
    let base = serve(with_auth(app(layer.build().unwrap()))).await;
    let client = reqwest::Client::new();
    let huge = |last: char| format!("{}{last}", "p".repeat(60_000 - 1));
    let (one, two) = (huge('1'), huge('2'));
    let mut got = vec![];
    for id in [&one, &one, &one, &two] {
        got.push(send(&client, &base, &[("x-user", text(id))]).await);
    }
    assert_eq!(got, [(200, Some(1)), (200, Some(0)), (429, Some(0)), (200, Some(1))]);
    let found = keys(&server, &prefix);
    assert_eq!(found.len(), 2);
    for key in &found {
        let tag = checked_tag(key, &prefix);
        let hex = tag.strip_prefix("user.sha256:").unwrap();
        assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
        assert!(key.len() <= prefix.len() + 2 + MAX_CALLER_KEY_BYTES + ":api:token_bucket".len());
    }
    let expected: HashSet<String> = [&one, &two]
        .iter()
        .map(|id| format!("{prefix}:{{{}}}:api:token_bucket", Caller::Principal(id.to_string()).key_part()))
        .collect();
    assert_eq!(found, expected);
}

/// Ids as a custom key closure (`caller_fn`) hands them over, generated: braces, `%`, unicode, the
/// escaped and hashed forms' own markers, around the bound and far over it; principals and tenants,
/// each sent through the real layer, with repeats. Every key is `rl:`..., one tag holding the whole
/// caller, within the bound; one bucket and one key per distinct caller; brace-free ids under the
/// bound keep today's key.
#[test]
fn generated_custom_keys_through_the_real_layer() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = Server::builder().single();
    let id = prop_oneof![
        "[a-z0-9:._-]{0,12}",
        "(\\{|\\}|%|%7B|%7D|\\.esc:|\\.sha256:|user|:|x){0,10}",
        proptest::collection::vec(any::<char>(), 0..60).prop_map(String::from_iter),
        (115usize..135, "[a-z{}]{0,2}").prop_map(|(n, end)| "y".repeat(n) + &end),
        ("[a-z{}]{0,2}", 1_000usize..60_000).prop_map(|(start, n)| start + &"z".repeat(n)),
    ];
    let caller = (proptest::bool::ANY, id);
    let ids = proptest::collection::vec(caller, 1..10);
    let mut runner = TestRunner::new(Config { cases: 24, failure_persistence: None, ..Config::default() });
    runner
        .run(&ids, |mut ids| {
            // A repeat: the same caller again is the same bucket.
            ids.push(ids[0].clone());
            runtime.block_on(async {
                let (layer, prefix) = layer(&server, 100);
                let layer = layer.caller_fn(|parts, _| {
                    let header =
                        |name: &str| parts.headers.get(name).map(|v| v.to_str().unwrap().to_string());
                    let id = String::from_utf8(unhex(&header("x-id").unwrap())).unwrap();
                    if header("x-kind").as_deref() == Some("tenant") {
                        Caller::Tenant(id)
                    } else {
                        Caller::Principal(id)
                    }
                });
                let base = serve(app(layer.build().unwrap())).await;
                let client = reqwest::Client::new();
                let mut seen: HashMap<(bool, String), u64> = HashMap::new();
                for (tenant, id) in &ids {
                    let kind = if *tenant { "tenant" } else { "user" };
                    let headers = [("x-kind", text(kind)), ("x-id", text(&hex(id.as_bytes())))];
                    let n = seen.entry((*tenant, id.clone())).or_default();
                    *n += 1;
                    prop_assert_eq!(
                        send(&client, &base, &headers).await,
                        (200, Some(100 - *n)),
                        "{} {:?}",
                        kind,
                        id
                    );
                }
                let found = keys(&server, &prefix);
                prop_assert_eq!(found.len(), seen.len(), "one key per distinct caller");
                let tags: HashSet<&str> = found.iter().map(|k| checked_tag(k, &prefix)).collect();
                prop_assert_eq!(tags.len(), found.len());
                for (tenant, id) in seen.keys() {
                    let kind = if *tenant { "tenant" } else { "user" };
                    let today = format!("{prefix}:{{{kind}:{id}}}:api:token_bucket");
                    if !id.contains(['{', '}']) && kind.len() + 1 + id.len() <= MAX_CALLER_KEY_BYTES {
                        prop_assert!(found.contains(&today), "{} kept its key", today);
                    } else {
                        prop_assert!(!found.contains(&today));
                    }
                }
                Ok(())
            })
        })
        .unwrap();
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}
