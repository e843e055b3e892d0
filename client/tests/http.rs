//! The HTTP layer through a real listening socket and a real HTTP client: status, every header, the
//! problem body, skipped routes, route + global limits, per-plan policies, trusted proxies, and
//! degraded answers.

mod support;

use axum::routing::get;
use axum::Router;
use redis_ratelimit_client::http::{
    Principal, RateLimitLayer, COST_EXCEEDS_LIMIT, RATE_LIMITED, UNAVAILABLE,
};
use redis_ratelimit_client::{FailurePolicy, Policy};
use reqwest::header::HeaderMap;
use std::net::SocketAddr;
use support::web::{get as get_with, logs, serve};
use support::{closed_port, wait_until};
use testkit::{unique_key, Server};

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/api/items", get(|| async { "ok" }))
        .route("/a", get(|| async { "a" }))
        .route("/b", get(|| async { "b" }))
        .route("/health", get(|| async { "healthy" }))
        .layer(layer)
}

fn layer_on(server: &Server, failure: FailurePolicy) -> RateLimitLayer {
    RateLimitLayer::new(support::builder(failure).connect(server.url()).unwrap())
        .key_prefix(&unique_key("rl"))
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test]
async fn the_seed_sequence_headers_and_problem_body() {
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Open)
        .route("api", "/api", Policy::token_bucket(10, 5.0).unwrap())
        .structured_headers(true);
    let base = serve(app(layer)).await;
    let client = reqwest::Client::new();
    let mut seen = vec![];
    for i in 1..=12 {
        let resp = client.get(format!("{base}/api/items")).send().await.unwrap();
        let h = resp.headers().clone();
        let status = resp.status().as_u16();
        assert_eq!(header(&h, "ratelimit-limit"), Some("10"));
        assert!(header(&h, "ratelimit-reset").is_some());
        assert_eq!(header(&h, "x-ratelimit-degraded"), None);
        let policy = header(&h, "ratelimit-policy").unwrap();
        assert_eq!(policy, "\"api\";q=10;w=2");
        let remaining = header(&h, "ratelimit-remaining").unwrap().to_string();
        assert_eq!(
            header(&h, "ratelimit").unwrap(),
            format!("\"api\";r={remaining};t={}", header(&h, "ratelimit-reset").unwrap())
        );
        let retry = header(&h, "retry-after").map(String::from);
        if status == 429 {
            assert_eq!(header(&h, "content-type"), Some("application/problem+json"));
            let body: serde_json::Value = resp.json().await.unwrap();
            assert_eq!(body["type"], RATE_LIMITED);
            assert_eq!(body["status"], 429);
            assert_eq!(body["limit"], "api");
            assert_eq!(body["retry_after_seconds"], 1);
            assert!(body["detail"].as_str().unwrap().contains("retry in 1 s"));
        } else {
            assert_eq!(resp.text().await.unwrap(), "ok");
        }
        seen.push((i, status, remaining, retry));
    }
    let pick = |i: usize| seen[i - 1].clone();
    assert_eq!(pick(1), (1, 200, "9".into(), None));
    assert_eq!(pick(10), (10, 200, "0".into(), None));
    assert_eq!(pick(11), (11, 429, "0".into(), Some("1".into())));
    assert_eq!(pick(12), (12, 429, "0".into(), Some("1".into())));
}

#[tokio::test]
async fn a_request_that_can_never_fit_gets_a_distinct_answer_without_retry_after() {
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Closed)
        .route("export", "/api", Policy::token_bucket(10, 5.0).unwrap())
        .cost("export", |parts| {
            parts.uri.query().map_or(1, |q| q.trim_start_matches("cost=").parse().unwrap_or(1))
        });
    let base = serve(app(layer)).await;
    let resp = reqwest::get(format!("{base}/api/items?cost=25")).await.unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(header(resp.headers(), "retry-after"), None);
    assert_eq!(header(resp.headers(), "ratelimit-remaining"), Some("10"), "nothing was taken");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["type"], COST_EXCEEDS_LIMIT);
    assert_eq!((body["cost"].as_u64(), body["quota"].as_u64()), (Some(25), Some(10)));
    let ok = reqwest::get(format!("{base}/api/items?cost=4")).await.unwrap();
    assert_eq!(header(ok.headers(), "ratelimit-remaining"), Some("6"));
}

#[tokio::test]
async fn skipped_routes_are_never_limited() {
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Closed)
        .global(Policy::token_bucket(1, 0.001).unwrap())
        .skip("/health");
    let base = serve(app(layer)).await;
    assert_eq!(reqwest::get(format!("{base}/a")).await.unwrap().status(), 200);
    assert_eq!(reqwest::get(format!("{base}/a")).await.unwrap().status(), 429);
    for _ in 0..5 {
        let resp = reqwest::get(format!("{base}/health")).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(header(resp.headers(), "ratelimit-limit"), None);
    }
}

/// A sliding-log route with a global token bucket (docs/client.md's advice for login) limits, in one
/// atomic RL.ALL call: neither degraded nor unlimited, and a denied log takes no global token.
#[tokio::test]
async fn a_sliding_log_route_and_a_global_bucket_limit_together() {
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Open)
        .route("a", "/a", Policy::sliding_log(2, std::time::Duration::from_secs(60)).unwrap())
        .route("b", "/b", Policy::fixed_window(10, std::time::Duration::from_secs(60)).unwrap())
        .global(Policy::token_bucket(4, 0.001).unwrap());
    let base = serve(app(layer)).await;
    let mut statuses = vec![];
    for path in ["a", "a", "a", "b", "b", "b"] {
        let resp = reqwest::get(format!("{base}/{path}")).await.unwrap();
        assert_eq!(header(resp.headers(), "x-ratelimit-degraded"), None, "{path}: decided by Redis");
        statuses.push(resp.status().as_u16());
    }
    // /a: its log allows 2; the 3rd is denied by the log and takes no global token, so /b gets the
    // two left of the global 4.
    assert_eq!(statuses, [200, 200, 429, 200, 200, 429]);
}

#[tokio::test]
async fn a_global_limit_caps_the_sum_over_routes() {
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Closed)
        .route("a", "/a", Policy::token_bucket(3, 0.001).unwrap())
        .route("b", "/b", Policy::token_bucket(3, 0.001).unwrap())
        .global(Policy::token_bucket(5, 0.001).unwrap())
        .structured_headers(true);
    let base = serve(app(layer)).await;
    let mut statuses = vec![];
    for path in ["a", "a", "a", "b", "b", "b"] {
        let resp = reqwest::get(format!("{base}/{path}")).await.unwrap();
        if resp.status() == 429 {
            assert_eq!(
                header(resp.headers(), "ratelimit-limit"),
                Some("5"),
                "the global limit is the one hit"
            );
            assert!(header(resp.headers(), "ratelimit-policy").unwrap().starts_with("\"all\";q=5"));
        }
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
    // Route a alone would deny its 4th request: its own limit, not the global one.
    let resp = reqwest::get(format!("{base}/a")).await.unwrap();
    assert_eq!(resp.status(), 429);
}

#[tokio::test]
async fn per_plan_policies_are_looked_up_per_caller() {
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Closed).route_per_caller("api", "/api", |caller| {
        let gold = caller.to_string().starts_with("user:gold");
        Policy::token_bucket(if gold { 5 } else { 2 }, 0.001).unwrap()
    });
    // The application's authentication layer names the principal; this one trusts a header.
    let app = app(layer).layer(axum::middleware::from_fn(
        |mut req: axum::extract::Request, next: axum::middleware::Next| async move {
            if let Some(user) = req.headers().get("x-user").and_then(|v| v.to_str().ok()) {
                let principal = Principal(user.to_string());
                req.extensions_mut().insert(principal);
            }
            next.run(req).await
        },
    ));
    let base = serve(app).await;
    let client = reqwest::Client::new();
    for (user, capacity) in [("gold-1", 5), ("free-1", 2)] {
        let mut allowed = 0;
        for _ in 0..8 {
            let resp = get_with(&client, &format!("{base}/api/items"), &[("x-user", user)]).await;
            assert_eq!(header(resp.headers(), "ratelimit-limit"), Some(capacity.to_string().as_str()));
            allowed += usize::from(resp.status() == 200);
        }
        assert_eq!(allowed, capacity, "{user}");
    }
}

#[tokio::test]
async fn forwarding_headers_are_believed_only_from_trusted_proxies() {
    let server = Server::builder().single();
    let policy = Policy::token_bucket(2, 0.001).unwrap();
    let client = reqwest::Client::new();

    // No trusted proxy: a client that varies X-Forwarded-For is still one caller (its peer address).
    let base =
        serve(app(layer_on(&server, FailurePolicy::Closed).route("api", "/api", policy.clone()))).await;
    let mut allowed = 0;
    for i in 0..6 {
        let spoof = format!("198.51.100.{i}");
        allowed += usize::from(
            get_with(&client, &format!("{base}/api/items"), &[("x-forwarded-for", &spoof)]).await.status()
                == 200,
        );
    }
    assert_eq!(allowed, 2, "spoofed headers do not buy fresh buckets");

    // Behind a trusted proxy (loopback here): the address the proxy appended counts, not what the
    // client prepended.
    let trusted = layer_on(&server, FailurePolicy::Closed)
        .route("api", "/api", policy)
        .trusted_proxies(["127.0.0.0/8".parse().unwrap()]);
    let base = serve(app(trusted)).await;
    let mut allowed = 0;
    for i in 0..6 {
        let chain = format!("198.51.100.{i}, 203.0.113.7");
        allowed += usize::from(
            get_with(&client, &format!("{base}/api/items"), &[("x-forwarded-for", &chain)]).await.status()
                == 200,
        );
    }
    assert_eq!(allowed, 2, "one client behind the proxy, whatever it prepends");
    let other = get_with(&client, &format!("{base}/api/items"), &[("x-forwarded-for", "203.0.113.8")]).await;
    assert_eq!(other.status(), 200, "another client behind the proxy has its own bucket");
    let forwarded =
        get_with(&client, &format!("{base}/api/items"), &[("forwarded", "for=203.0.113.7")]).await;
    assert_eq!(forwarded.status(), 429, "RFC 7239 Forwarded names the same client");
}

/// Redis stopped under a running application: the degraded answers say only what is known (the
/// limit, not what is left of it), and a closed limiter's denial is an outage, not overuse.
#[tokio::test]
async fn degraded_answers_say_so_and_only_what_is_known() {
    let Some(mut server) = Server::builder().own() else { return };
    let api = || Policy::token_bucket(10, 5.0).unwrap();
    let layer = |failure| {
        RateLimitLayer::new(support::builder(failure).connect(server.url()).unwrap())
            .key_prefix(&unique_key("rl"))
            .route("api", "/api", api())
            .structured_headers(true)
    };
    let open = serve(app(layer(FailurePolicy::Open))).await;
    let closed = serve(app(layer(FailurePolicy::Closed))).await;
    let closed_503 =
        serve(app(layer(FailurePolicy::Closed).outage_status(http::StatusCode::SERVICE_UNAVAILABLE))).await;
    // While Redis is up, every header is there and nothing says degraded.
    for base in [&open, &closed, &closed_503] {
        let resp = reqwest::get(format!("{base}/api/items")).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(header(resp.headers(), "ratelimit-remaining"), Some("9"));
        assert_eq!(header(resp.headers(), "x-ratelimit-degraded"), None);
    }
    server.stop();

    // Open: allowed, flagged, the policy known; remaining and reset were not computed, so not sent.
    let resp = reqwest::get(format!("{open}/api/items")).await.unwrap();
    assert_eq!(resp.status(), 200);
    let h = resp.headers();
    assert_eq!(header(h, "x-ratelimit-degraded"), Some("true"));
    assert_eq!(header(h, "ratelimit-limit"), Some("10"));
    assert_eq!(header(h, "ratelimit-policy"), Some("\"api\";q=10;w=2"));
    for unknown in ["ratelimit-remaining", "ratelimit-reset", "ratelimit"] {
        assert_eq!(header(h, unknown), None, "{unknown} was not computed by Redis");
    }

    // Closed: denied as an outage, 429 by default or 503 when the layer says so.
    for (base, status) in [(&closed, 429), (&closed_503, 503)] {
        let resp = reqwest::get(format!("{base}/api/items")).await.unwrap();
        assert_eq!(resp.status(), status);
        let h = resp.headers().clone();
        assert_eq!(header(&h, "x-ratelimit-degraded"), Some("true"));
        assert_eq!(header(&h, "retry-after"), Some("1"));
        assert_eq!(header(&h, "content-type"), Some("application/problem+json"));
        assert_eq!(header(&h, "ratelimit-remaining"), None);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["type"], UNAVAILABLE);
        assert_eq!(body["status"], status);
        assert_eq!(body["limit"], "api");
        assert!(!body["detail"].as_str().unwrap().contains("exceeded"), "{body}");
        assert!(body.get("remaining").is_none(), "{body}");
    }
}

/// An outage on a route limited only in flight: the closed policy's answer says the limiter is
/// unavailable, without `RateLimit-*` fields that would describe the lease as a rate.
#[tokio::test]
async fn an_outage_on_a_concurrency_route_sends_no_rate_fields() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let layer = RateLimitLayer::new(support::builder(FailurePolicy::Closed).connect(&url).unwrap())
        .concurrency("api", "/api", Policy::concurrency(5, std::time::Duration::from_secs(30)).unwrap())
        .structured_headers(true);
    let base = serve(app(layer)).await;
    let resp = reqwest::get(format!("{base}/api/items")).await.unwrap();
    assert_eq!(resp.status(), 429);
    let h = resp.headers().clone();
    assert_eq!(header(&h, "x-ratelimit-degraded"), Some("true"));
    assert_eq!(header(&h, "retry-after"), Some("1"));
    for name in ["ratelimit-limit", "ratelimit-policy", "ratelimit-remaining", "ratelimit"] {
        assert_eq!(header(&h, name), None, "{name} would describe the lease as a rate");
    }
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["type"], UNAVAILABLE);
}

#[tokio::test]
async fn a_closed_port_is_an_outage_too() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let layer = RateLimitLayer::new(support::builder(FailurePolicy::Closed).connect(&url).unwrap()).route(
        "api",
        "/api",
        Policy::token_bucket(10, 5.0).unwrap(),
    );
    let base = serve(app(layer)).await;
    let resp = reqwest::get(format!("{base}/api/items")).await.unwrap();
    assert_eq!(resp.status(), 429);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["type"], UNAVAILABLE);
}

/// Plain hyper, no axum: a tower `service_fn` behind the layer, the peer address given as `PeerAddr`.
#[tokio::test]
async fn works_with_plain_hyper() {
    use http_body_util::Full;
    use hyper::body::{Bytes, Incoming};
    use redis_ratelimit_client::http::PeerAddr;
    use tower::{Layer, ServiceExt};

    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Closed).global(Policy::token_bucket(2, 0.001).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else { return };
            let handler = tower::service_fn(|_req: http::Request<Incoming>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(Full::<Bytes>::from("hello")))
            });
            let limited = layer.layer(handler).map_request(move |mut req: http::Request<Incoming>| {
                req.extensions_mut().insert(PeerAddr(peer));
                req
            });
            let service = hyper_util::service::TowerToHyperService::new(limited);
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    });
    let client = reqwest::Client::new();
    let mut statuses = vec![];
    for _ in 0..3 {
        let resp = client.get(format!("http://{addr}/")).send().await.unwrap();
        statuses
            .push((resp.status().as_u16(), header(resp.headers(), "ratelimit-remaining").map(String::from)));
    }
    assert_eq!(statuses, [(200, Some("1".into())), (200, Some("0".into())), (429, Some("0".into()))]);
}

/// Route prefixes match whole path segments: `/apiary` is not under `/api`.
#[tokio::test]
async fn route_prefixes_match_whole_segments() {
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Closed).route(
        "api",
        "/api",
        Policy::token_bucket(2, 0.001).unwrap(),
    );
    let app = Router::new()
        .route("/api", get(|| async { "api" }))
        .route("/api/items", get(|| async { "items" }))
        .route("/apiary", get(|| async { "bees" }))
        .layer(layer);
    let base = serve(app).await;
    for _ in 0..5 {
        let resp = reqwest::get(format!("{base}/apiary")).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(header(resp.headers(), "ratelimit-limit"), None, "/apiary is not limited as /api");
    }
    let statuses: Vec<u16> = statuses_of(&base, &["/api", "/api/items", "/api"]).await;
    assert_eq!(statuses, [200, 200, 429], "/api and /api/items share the route's bucket");
}

async fn statuses_of(base: &str, paths: &[&str]) -> Vec<u16> {
    let mut out = vec![];
    for path in paths {
        out.push(reqwest::get(format!("{base}{path}")).await.unwrap().status().as_u16());
    }
    out
}

/// IPv6 callers count per /64 (configurable), IPv4-mapped addresses as IPv4: through a trusted proxy
/// that forwards them.
#[tokio::test]
async fn ipv6_callers_are_grouped_by_prefix_and_mapped_ipv4_is_ipv4() {
    let server = Server::builder().single();
    let client = reqwest::Client::new();
    let policy = Policy::token_bucket(2, 0.001).unwrap();
    let proxied = |layer: RateLimitLayer| {
        layer.route("api", "/api", policy.clone()).trusted_proxies(["127.0.0.0/8".parse().unwrap()])
    };
    let allowed = |base: String, from: Vec<&'static str>| {
        let client = client.clone();
        async move {
            let mut n = 0;
            for ip in from {
                let resp = get_with(&client, &format!("{base}/api/items"), &[("x-forwarded-for", ip)]).await;
                n += usize::from(resp.status() == 200);
            }
            n
        }
    };
    let one_64 = vec!["2001:db8:1:2::a", "2001:db8:1:2::b", "2001:db8:1:2:ffff::1", "2001:db8:1:2::c"];

    let base = serve(app(proxied(layer_on(&server, FailurePolicy::Closed)))).await;
    assert_eq!(allowed(base.clone(), one_64.clone()).await, 2, "one /64 is one caller");
    assert_eq!(allowed(base.clone(), vec!["2001:db8:1:3::a"]).await, 1, "the next /64 is another");
    // IPv4-mapped: the same as the IPv4 address, and distinct IPv4 addresses stay distinct.
    assert_eq!(
        allowed(base.clone(), vec!["::ffff:203.0.113.7", "203.0.113.7", "::ffff:203.0.113.7"]).await,
        2
    );
    assert_eq!(allowed(base, vec!["::ffff:203.0.113.8"]).await, 1);

    // A /128 grouping counts every address alone; /48 groups wider.
    let base = serve(app(proxied(layer_on(&server, FailurePolicy::Closed).ipv6_prefix(128)))).await;
    assert_eq!(allowed(base, one_64.clone()).await, 4);
    let base = serve(app(proxied(layer_on(&server, FailurePolicy::Closed).ipv6_prefix(48)))).await;
    assert_eq!(allowed(base, vec!["2001:db8:1:2::a", "2001:db8:1:3::a", "2001:db8:1:4::a"]).await, 2);
}

/// A dual-stack listener (`[::]`) sees its IPv4 clients as `::ffff:a.b.c.d`: they are keyed by their
/// IPv4 address, not lumped into `::ffff:0:0/64`.
#[tokio::test]
async fn a_dual_stack_listener_keys_ipv4_clients_by_their_ipv4_address() {
    let server = Server::builder().single();
    let prefix = unique_key("rl");
    let layer = RateLimitLayer::new(support::builder(FailurePolicy::Closed).connect(server.url()).unwrap())
        .key_prefix(&prefix)
        .route("api", "/api", Policy::token_bucket(5, 0.001).unwrap());
    let Ok(listener) = tokio::net::TcpListener::bind("[::]:0").await else {
        testkit::skip("no IPv6 on this machine");
        return;
    };
    let port = listener.local_addr().unwrap().port();
    let app = app(layer);
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
    });
    let resp = reqwest::get(format!("http://127.0.0.1:{port}/api/items")).await.unwrap();
    assert_eq!(resp.status(), 200);
    let key = format!("{prefix}:{{ip:127.0.0.1}}:api:token_bucket");
    let exists: bool = testkit::redis::cmd("EXISTS").arg(&key).query(&mut server.conn()).unwrap();
    assert!(exists, "{key}");
}

/// What docs/client.md says: a path no route matches, a 404 included, counts against the global limit.
#[tokio::test]
async fn unrouted_paths_count_against_the_global_limit() {
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Closed)
        .route("api", "/api", Policy::token_bucket(10, 0.001).unwrap())
        .global(Policy::token_bucket(2, 0.001).unwrap());
    let base = serve(app(layer)).await;
    assert_eq!(statuses_of(&base, &["/nowhere", "/nowhere"]).await, [404, 404]);
    assert_eq!(statuses_of(&base, &["/api/items"]).await, [429], "the 404s spent the global budget");
}

/// Served without ConnectInfo, every caller is `unknown` and shares one bucket: said once, loudly.
#[tokio::test]
async fn a_server_without_connect_info_is_reported_once() {
    let logs = logs();
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Closed).route(
        "api",
        "/api",
        Policy::token_bucket(2, 0.001).unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = app(layer.build().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = reqwest::Client::new();
    let mut statuses = vec![];
    for _ in 0..3 {
        statuses.push(client.get(format!("http://{addr}/api/items")).send().await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429], "all callers in one bucket");
    let lines = logs.lines_with("without a peer address");
    assert_eq!(lines.len(), 1, "said once: {lines:?}");
    assert!(
        lines[0].contains("ERROR") && lines[0].contains(":{unknown}"),
        "loudly, naming the shared key: {lines:?}"
    );
}

/// A layer used without `build` still works, and its mistake is logged once at error level.
#[tokio::test]
async fn an_unbuilt_misconfigured_layer_says_what_is_wrong_once() {
    let logs = logs();
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Closed)
        .route("api", "/api", Policy::token_bucket(10, 0.001).unwrap())
        .cost("apii", |_| 5);
    let base = serve(app(layer)).await;
    let resp = reqwest::get(format!("{base}/api/items")).await.unwrap();
    assert_eq!(
        header(resp.headers(), "ratelimit-remaining"),
        Some("9"),
        "the misspelt cost applies to nothing"
    );
    assert_eq!(logs.lines_with("cost for route 'apii': there is no route of that name").len(), 1);
}

/// The application shapes the denial itself (its status, its JSON); the layer still sends the rate
/// limit headers and Retry-After, and what the hook leaves to the default stays the default.
#[tokio::test]
async fn an_application_can_shape_its_own_denial_response() {
    use redis_ratelimit_client::http::DenialKind;
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Closed)
        .route("api", "/api", Policy::token_bucket(1, 0.001).unwrap())
        .cost("api", |parts| if parts.uri.query() == Some("huge") { 50 } else { 1 })
        .on_denial(|denial| match denial.kind() {
            DenialKind::RateLimited => http::Response::builder()
                .status(http::StatusCode::SERVICE_UNAVAILABLE)
                .header("content-type", "application/json")
                .body(serde_json::json!({"error": "slow down", "limit": denial.limit(), "route": denial.route()}).to_string())
                .unwrap(),
            _ => denial.default_response(),
        })
        .build()
        .unwrap();
    let base = serve(app(layer)).await;
    assert_eq!(reqwest::get(format!("{base}/api/items")).await.unwrap().status(), 200);
    let resp = reqwest::get(format!("{base}/api/items")).await.unwrap();
    assert_eq!(resp.status(), 503);
    let h = resp.headers().clone();
    assert_eq!(header(&h, "content-type"), Some("application/json"));
    assert_eq!(header(&h, "ratelimit-limit"), Some("1"));
    assert_eq!(header(&h, "ratelimit-remaining"), Some("0"));
    assert!(header(&h, "retry-after").is_some(), "added by the layer");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body, serde_json::json!({"error": "slow down", "limit": "api", "route": "api"}));
    // Left to the default: the layer's own answer, unchanged.
    let never = reqwest::get(format!("{base}/api/items?huge")).await.unwrap();
    assert_eq!(never.status(), 429);
    assert_eq!(header(never.headers(), "retry-after"), None);
    let body: serde_json::Value = never.json().await.unwrap();
    assert_eq!(body["type"], COST_EXCEEDS_LIMIT);
}

/// A concurrency denial shaped by the application: the hook sees the in-flight limit, and the
/// layer adds Retry-After but no `RateLimit-*` fields (they describe the route's rate policy, which
/// did not deny).
#[tokio::test]
async fn an_application_can_shape_its_own_concurrency_denial() {
    use redis_ratelimit_client::http::DenialKind;
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Closed)
        .route("slow", "/slow", Policy::token_bucket(100, 100.0).unwrap())
        .concurrency("slow", "/slow", Policy::concurrency(1, std::time::Duration::from_secs(30)).unwrap())
        .on_denial(|denial| match denial.kind() {
            DenialKind::ConcurrencyLimited => http::Response::builder()
                .status(http::StatusCode::SERVICE_UNAVAILABLE)
                .header("content-type", "application/json")
                .body(
                    serde_json::json!({
                        "busy": denial.limit(),
                        "in_flight": denial.in_flight_limit(),
                        "free": denial.decision().remaining,
                    })
                    .to_string(),
                )
                .unwrap(),
            _ => denial.default_response(),
        })
        .build()
        .unwrap();
    let base = serve(slow_app(layer)).await;
    let client = reqwest::Client::new();
    let mut holder = client.get(format!("{base}/slow/stream")).send().await.unwrap();
    assert_eq!(holder.status(), 200);
    assert_eq!(holder.chunk().await.unwrap().unwrap(), "first chunk");
    let denied = client.get(format!("{base}/slow/quick")).send().await.unwrap();
    assert_eq!(denied.status(), 503);
    let h = denied.headers().clone();
    let retry_after: u64 = header(&h, "retry-after").expect("added by the layer").parse().unwrap();
    assert!((1..=30).contains(&retry_after), "at most the lease: {retry_after}");
    for name in ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-policy", "ratelimit"]
    {
        assert_eq!(header(&h, name), None, "{name} would describe the lease as a rate");
    }
    let body: serde_json::Value = denied.json().await.unwrap();
    assert_eq!(body, serde_json::json!({"busy": "slow", "in_flight": 1, "free": 0}));
    drop(holder);
}

/// Debug and accessors, as tower's middleware have them.
#[tokio::test]
async fn the_layer_and_its_service_show_what_they_hold() {
    use tower::Layer;
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let limiter = support::builder(FailurePolicy::Open).name("edge").connect(&url).unwrap();
    let layer = RateLimitLayer::new(limiter)
        .route("api", "/api", Policy::token_bucket(10, 5.0).unwrap())
        .route("api-export", "/api/export", Policy::token_bucket(2, 0.1).unwrap())
        .build()
        .unwrap();
    assert_eq!(layer.routes().collect::<Vec<_>>(), [("api-export", "/api/export"), ("api", "/api")]);
    assert_eq!(layer.limiter().failure_policy(), FailurePolicy::Open);
    let debug = format!("{layer:?}");
    assert!(debug.contains("\"api-export\"") && debug.contains("name: \"edge\""), "{debug}");
    let service = layer.layer(tower::service_fn(|_: http::Request<String>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    }));
    assert!(format!("{:?}", service.limiter()).contains("edge"));
}

/// A body that sends one chunk, then never ends: a slow download.
struct Slow {
    sent: bool,
}

impl http_body::Body for Slow {
    type Data = hyper::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.sent {
            return std::task::Poll::Pending;
        }
        self.sent = true;
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data("first chunk".into()))))
    }
}

/// `/slow/stream` holds its body open after the first chunk; `/slow/quick` answers at once.
fn slow_app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/slow/stream", get(|| async { axum::body::Body::new(Slow { sent: false }) }))
        .route("/slow/quick", get(|| async { "quick" }))
        .layer(layer)
}

/// True when a GET of `url` is served (200).
async fn served(client: &reqwest::Client, url: &str) -> bool {
    client.get(url).send().await.unwrap().status() == 200
}

#[tokio::test]
async fn a_concurrency_slot_is_held_until_the_body_is_gone_and_a_client_that_disconnects_frees_it() {
    use redis_ratelimit_client::http::CONCURRENCY_LIMITED;
    let server = Server::builder().single();
    let layer = layer_on(&server, FailurePolicy::Closed)
        .route("slow", "/slow", Policy::token_bucket(100, 100.0).unwrap())
        .concurrency("slow", "/slow", Policy::concurrency(1, std::time::Duration::from_secs(60)).unwrap());
    let base = serve(slow_app(layer)).await;
    let client = reqwest::Client::new();
    let mut streaming = client.get(format!("{base}/slow/stream")).send().await.unwrap();
    assert_eq!(streaming.status(), 200);
    assert_eq!(header(streaming.headers(), "ratelimit-limit"), Some("100"), "the rate policy's fields");
    assert_eq!(streaming.chunk().await.unwrap().unwrap(), "first chunk");
    // The handler has returned; its body is still being sent: the one slot is held.
    let denied = client.get(format!("{base}/slow/quick")).send().await.unwrap();
    assert_eq!(denied.status(), 429);
    let retry_after: u64 = header(denied.headers(), "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after));
    let body: serde_json::Value = denied.json().await.unwrap();
    assert_eq!(body["type"], CONCURRENCY_LIMITED);
    assert_eq!((body["limit"].as_str(), body["in_flight_limit"].as_u64()), (Some("slow"), Some(1)));
    // The client goes away mid-body: the server drops the body, and the permit with it.
    drop(streaming);
    let url = format!("{base}/slow/quick");
    wait_until("the disconnected client's slot to be freed", async || served(&client, &url).await).await;
}

#[tokio::test]
async fn per_caller_and_global_concurrency_limits_hold_slots_per_plan_and_over_all_routes() {
    use redis_ratelimit_client::http::CONCURRENCY_LIMITED;
    let server = Server::builder().single();
    let lease = std::time::Duration::from_secs(60);
    let layer = layer_on(&server, FailurePolicy::Closed)
        .concurrency_per_caller("jobs", "/jobs", move |caller| {
            let gold = caller.to_string().contains("gold");
            Policy::concurrency(if gold { 2 } else { 1 }, lease).unwrap()
        })
        .global_concurrency(Policy::concurrency(3, lease).unwrap());
    let stream = || async { axum::body::Body::new(Slow { sent: false }) };
    let app = Router::new()
        .route("/jobs/stream", get(stream))
        .route("/other/stream", get(stream))
        .route("/jobs/quick", get(|| async { "quick" }))
        .route("/other/quick", get(|| async { "quick" }))
        .layer(layer);
    let base = serve(support::web::with_auth(app)).await;
    let client = reqwest::Client::new();
    let (free, gold) = (unique_key("free"), unique_key("gold"));
    let open = |path: &str, user: &str| {
        let (client, url, user) = (client.clone(), format!("{base}{path}"), user.to_string());
        async move {
            let mut resp = get_with(&client, &url, &[("x-user", &user)]).await;
            if resp.status() == 200 && url.ends_with("stream") {
                assert_eq!(resp.chunk().await.unwrap().unwrap(), "first chunk");
            }
            resp
        }
    };
    async fn denied_by(resp: reqwest::Response) -> (u16, Option<String>, Option<u64>) {
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        if status == 429 {
            assert_eq!(body["type"], CONCURRENCY_LIMITED);
        }
        (status, body["limit"].as_str().map(String::from), body["in_flight_limit"].as_u64())
    }
    // The free plan holds one job at a time.
    let free_job = open("/jobs/stream", &free).await;
    assert_eq!(free_job.status(), 200);
    assert_eq!(denied_by(open("/jobs/quick", &free).await).await, (429, Some("jobs".into()), Some(1)));
    // The gold plan holds two; a third on the same route is its plan's denial.
    let gold_jobs = [open("/jobs/stream", &gold).await, open("/jobs/stream", &gold).await];
    assert!(gold_jobs.iter().all(|r| r.status() == 200));
    assert_eq!(denied_by(open("/jobs/quick", &gold).await).await, (429, Some("jobs".into()), Some(2)));
    // Over all routes a caller holds at most 3: a third slot elsewhere, then the global limit.
    let gold_other = open("/other/stream", &gold).await;
    assert_eq!(gold_other.status(), 200);
    assert_eq!(denied_by(open("/other/quick", &gold).await).await, (429, Some("all".into()), Some(3)));
    // Another caller is not held back by these.
    assert_eq!(open("/other/quick", &free).await.status(), 200);
    // The slots are held until the bodies are gone.
    drop((free_job, gold_jobs, gold_other));
    wait_until("dropped bodies to free their slots, per plan and over all routes", async || {
        let (a, b) = (open("/jobs/quick", &free).await.status(), open("/other/quick", &gold).await.status());
        a == 200 && b == 200
    })
    .await;
}

/// A handler that panics drops the permit with its future: the slot is free again within
/// milliseconds, not when the 60 s lease ends. The lease key has its own suffix, beside the rate key.
#[tokio::test]
async fn a_panicking_handler_frees_its_slot_at_once_and_lease_keys_have_their_own_suffix() {
    let server = Server::builder().single();
    let prefix = unique_key("rl");
    let layer = RateLimitLayer::new(support::builder(FailurePolicy::Closed).connect(server.url()).unwrap())
        .key_prefix(&prefix)
        .route("work", "/work", Policy::token_bucket(100, 100.0).unwrap())
        .concurrency("work", "/work", Policy::concurrency(1, std::time::Duration::from_secs(60)).unwrap());
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let waiter = std::sync::Arc::clone(&gate);
    let app = Router::new()
        .route(
            "/work/panic",
            get(|| async {
                if std::hint::black_box(true) {
                    panic!("a bug in the handler");
                }
                "never"
            }),
        )
        .route(
            "/work/wait",
            get(move || async move {
                waiter.notified().await;
                "done"
            }),
        )
        .route("/work/quick", get(|| async { "quick" }))
        .layer(layer);
    let base = serve(app).await;
    let client = reqwest::Client::new();
    let waiting = tokio::spawn(client.get(format!("{base}/work/wait")).send());
    let mut keys: Vec<String> = vec![];
    wait_until("the waiting request's lease", async || {
        keys = testkit::redis::cmd("KEYS").arg(format!("{prefix}*")).query(&mut server.conn()).unwrap();
        keys.iter().any(|k| k.ends_with(":concurrency"))
    })
    .await;
    keys.sort();
    assert_eq!(keys.len(), 2, "{keys:?}");
    // The route's rate limit and its concurrency limit: one name, each kind on its own key.
    let route = keys[0].strip_suffix(":concurrency").expect("the lease key sorts first");
    assert!(route.ends_with(":work") && keys[1] == format!("{route}:token_bucket"), "{keys:?}");
    assert_eq!(client.get(format!("{base}/work/quick")).send().await.unwrap().status(), 429, "held");
    gate.notify_one();
    assert_eq!(waiting.await.unwrap().unwrap().status(), 200);
    // The handler panics while it holds the one slot (a 429 means the last holder's background
    // release has not landed yet: the panicking handler did not run; try again).
    wait_until("the panicking handler to run", async || {
        match client.get(format!("{base}/work/panic")).send().await {
            Ok(r) if r.status() == 429 => false,
            Ok(r) => {
                assert_eq!(r.status(), 500, "a panic is no answer or a 500");
                true
            }
            Err(_) => true,
        }
    })
    .await;
    let url = format!("{base}/work/quick");
    let what = "the panicking handler's slot to be freed long before its lease ends";
    wait_until(what, async || served(&client, &url).await).await;
}
