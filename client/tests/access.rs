//! Allow and deny lists through a real socket, a real HTTP client and a real server: denied callers
//! get 403 without a call to Redis (the server's own count), allowed ones are not limited, by
//! principal, tenant and IPv4 and IPv6 network, and the lists change while the layer runs.

mod support;

use axum::routing::get;
use axum::Router;
use redis_ratelimit_client::http::{AccessLists, RateLimitLayer, DENIED};
use redis_ratelimit_client::{FailurePolicy, Policy};
use support::calls;
use support::web::{get as get_with, header, prometheus, series, serve, with_auth};
use testkit::{unique_key, Server};

/// A route of capacity 1 (so a second request tells a limited caller from an unlimited one), behind
/// the test's authentication and a trusted loopback proxy (so `x-forwarded-for` names the address).
async fn serve_limited(server: &Server, route: &str, lists: &AccessLists) -> String {
    let limiter = support::builder(FailurePolicy::Closed).connect(server.url()).unwrap();
    let layer = RateLimitLayer::new(limiter)
        .key_prefix(&unique_key("rl"))
        .route(route, "/api", Policy::token_bucket(1, 0.001).unwrap())
        .trusted_proxies(["127.0.0.0/8".parse().unwrap()])
        .access_lists(lists.clone())
        .build()
        .unwrap();
    let app = Router::new().route("/api/items", get(|| async { "ok" })).layer(layer);
    format!("{}/api/items", serve(with_auth(app)).await)
}

fn counter(route: &str, outcome: &str) -> f64 {
    series(&format!(
        r#"ratelimit_http_requests_total{{route="{route}",limit="{route}",outcome="{outcome}"}}"#
    ))
}

/// The statuses of `n` requests with these headers.
async fn statuses(url: &str, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
    let client = reqwest::Client::new();
    let mut out = vec![];
    for _ in 0..n {
        out.push(get_with(&client, url, headers).await.status().as_u16());
    }
    out
}

#[tokio::test]
async fn denied_callers_get_403_of_their_own_type_without_a_call_to_redis() {
    prometheus();
    // Counts the server's calls: needs a server of its own.
    let Some(server) = Server::builder().own() else { return };
    let lists = AccessLists::new();
    lists.deny_principal("mallory");
    lists.deny_tenant("spam-inc");
    lists.deny_network("203.0.113.0/24".parse().unwrap());
    lists.deny_network("2001:db8:bad::/48".parse().unwrap());
    let url = serve_limited(&server, "deny", &lists).await;
    let client = reqwest::Client::new();
    let before = calls(&server, "rl.token");
    let denied: [&[(&str, &str)]; 5] = [
        &[("x-user", "mallory")],
        &[("x-tenant", "spam-inc")],
        &[("x-forwarded-for", "203.0.113.9")],
        &[("x-forwarded-for", "2001:db8:bad:1::7")],
        // The deny list wins over everything: a fine principal from a denied network.
        &[("x-user", "ada"), ("x-forwarded-for", "::ffff:203.0.113.10")],
    ];
    for headers in denied {
        let resp = get_with(&client, &url, headers).await;
        assert_eq!(resp.status(), 403, "{headers:?}");
        assert_eq!(header(&resp, "content-type"), Some("application/problem+json"));
        for name in ["retry-after", "ratelimit-limit", "ratelimit-remaining"] {
            assert_eq!(header(&resp, name), None, "{headers:?}: a 403 is not a rate limit");
        }
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["type"], DENIED);
        assert_eq!((body["status"].as_u64(), body["title"].as_str()), (Some(403), Some("Forbidden")));
    }
    assert_eq!(calls(&server, "rl.token") - before, 0, "no denied request reached Redis");
    assert_eq!(counter("deny", "denylisted"), 5.0);
    // Callers near them are limited as usual, through Redis.
    for headers in [&[("x-forwarded-for", "203.0.114.9")][..], &[("x-forwarded-for", "2001:db8:bae::7")]] {
        assert_eq!(statuses(&url, headers, 2).await, [200, 429], "{headers:?}");
    }
    assert_eq!(calls(&server, "rl.token") - before, 4);
}

#[tokio::test]
async fn allowed_callers_skip_limiting_and_are_counted() {
    prometheus();
    let Some(server) = Server::builder().own() else { return };
    let lists = AccessLists::new();
    lists.allow_principal("batch-importer");
    lists.allow_tenant("partner");
    lists.allow_network("10.0.0.0/8".parse().unwrap());
    lists.allow_network("2001:db8:1::/48".parse().unwrap());
    let url = serve_limited(&server, "allow", &lists).await;
    let client = reqwest::Client::new();
    let before = calls(&server, "rl.token");
    let allowed: [&[(&str, &str)]; 4] = [
        &[("x-user", "batch-importer")],
        &[("x-tenant", "partner"), ("x-user", "someone-at-partner")],
        &[("x-forwarded-for", "10.20.30.40")],
        &[("x-forwarded-for", "2001:db8:1:2::3")],
    ];
    for headers in allowed {
        for i in 0..3 {
            let resp = get_with(&client, &url, headers).await;
            assert_eq!(resp.status(), 200, "{headers:?} request {i}: over capacity 1, not limited");
            assert_eq!(header(&resp, "ratelimit-limit"), None, "{headers:?}: no limit applied");
        }
    }
    assert_eq!(calls(&server, "rl.token") - before, 0, "allowed callers cost no Redis call");
    assert_eq!(counter("allow", "allowlisted"), 12.0);
    assert_eq!(statuses(&url, &[("x-forwarded-for", "11.0.0.1")], 2).await, [200, 429], "others are limited");
}

#[tokio::test]
async fn the_lists_change_while_the_layer_runs() {
    prometheus();
    let server = Server::builder().single();
    let lists = AccessLists::new();
    let url = serve_limited(&server, "live", &lists).await;
    let ada = [("x-user", "ada")];
    assert_eq!(statuses(&url, &ada, 2).await, [200, 429], "limited");
    lists.allow_principal("ada");
    assert_eq!(statuses(&url, &ada, 2).await, [200, 200], "allowed: not limited");
    lists.deny_principal("ada");
    assert_eq!(statuses(&url, &ada, 2).await, [403, 403], "denied: taken off the allow list too");
    lists.remove_principal("ada");
    assert_eq!(statuses(&url, &ada, 1).await, [429], "limited again, by the bucket she spent");
    let net = "127.0.0.0/8".parse().unwrap();
    lists.deny_network(net);
    assert_eq!(statuses(&url, &[], 1).await, [403], "the proxy's own address, with no header");
    lists.remove_network(net);
    assert_eq!(statuses(&url, &[], 2).await, [200, 429]);
}
