//! Token budgets over Envoy's two calls (Envoy AI Gateway's request-path call and its
//! `apply_on_stream_done` call), over real gRPC and HTTP against a real server (the module, or the Lua
//! library with `RL_TEST_ENGINE=lua`): the
//! first call (a cost of at most 1) holds the rule's `estimate` under the request id, and a retry of
//! it takes nothing; the second (the usage, above 1) settles the usage once; without a request id
//! nothing changes.

mod support;

use redis_ratelimit_rls::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use serde_json::{json, Value};
use support::{descriptor, domain, Reply, Rls};
use testkit::{redis, Server};

const CONFIG: &str = r#"
domain: {D}
descriptors:
  - key: model
    rate_limit: {unit: minute, requests_per_unit: 10000, estimate: 1000}
  - key: small
    rate_limit: {unit: minute, requests_per_unit: 1500, estimate: 1000}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
"#;

fn with_cost(entries: &[(&str, &str)], cost: u64) -> RateLimitDescriptor {
    RateLimitDescriptor { hits_addend: Some(cost), ..descriptor(entries) }
}

async fn ask(rls: &mut Rls, d: &str, descriptors: Vec<RateLimitDescriptor>) -> Reply {
    rls.send(RateLimitRequest { domain: d.into(), descriptors, hits_addend: 0 }).await.unwrap()
}

/// What `entries`' limit has left (a descriptor of cost 0: a peek).
async fn left(rls: &mut Rls, d: &str, entries: &[(&str, &str)]) -> u32 {
    ask(rls, d, vec![with_cost(entries, 0)]).await.status(0).1
}

fn exists(server: &Server, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(&mut server.conn()).unwrap() == 1
}

#[tokio::test]
async fn the_first_call_holds_the_estimate_and_the_second_settles_the_usage_once() {
    let server = Server::builder().single();
    let d = domain("holds");
    let mut rls = Rls::start(server.url(), &CONFIG.replace("{D}", &d), &[]).await;
    let model: &[(&str, &str)] = &[("model", "gpt")];
    let call = |id: &str, cost: u64| with_cost(&[("model", "gpt"), ("request_id", id)], cost);
    // Before the request: hits_addend 0 holds the estimate.
    let r = ask(&mut rls, &d, vec![call("r1", 0)]).await;
    assert!(r.ok() && r.status(0) == (false, 9000), "{r:?}");
    assert_eq!(left(&mut rls, &d, model).await, 9000);
    assert!(exists(&server, &format!("rl:holds:{{rls.{d}}}:r1")), "the hold's own key");
    // On the stream's end: hits_addend is the usage; the unused estimate goes back.
    let r = ask(&mut rls, &d, vec![call("r1", 1212)]).await;
    assert!(r.ok(), "{r:?}");
    assert_eq!(left(&mut rls, &d, model).await, 10000 - 1212);
    // Envoy retrying the second call: counted once.
    assert!(ask(&mut rls, &d, vec![call("r1", 1212)]).await.ok());
    assert_eq!(left(&mut rls, &d, model).await, 10000 - 1212);
    // A request sending 1 before (the request-level hits_addend) and a usage of 0 after: the second
    // call costs at most 1, so it is read as the first again (RL.HOLD, which takes nothing twice); the
    // hold stays open and ends by RLS_HOLD_ABANDON (CHARGE, the default: it stays charged).
    let r = rls
        .send(RateLimitRequest {
            domain: d.clone(),
            descriptors: vec![descriptor(&[("model", "gpt"), ("request_id", "r2")])],
            hits_addend: 1,
        })
        .await
        .unwrap();
    assert_eq!(r.status(0), (false, 10000 - 1212 - 1000));
    assert!(ask(&mut rls, &d, vec![call("r2", 0)]).await.ok());
    assert_eq!(left(&mut rls, &d, model).await, 10000 - 1212 - 1000);
    assert!(exists(&server, &format!("rl:holds:{{rls.{d}}}:r2")), "still held");
    // Without a request id: charged as always.
    let r = ask(&mut rls, &d, vec![with_cost(model, 5)]).await;
    assert_eq!(r.status(0), (false, 10000 - 1212 - 1000 - 5));
    // A second call whose hold is gone (never made, or ended): its usage charged as without holds.
    let r = ask(&mut rls, &d, vec![call("never-held", 300)]).await;
    assert_eq!(r.status(0), (false, 10000 - 1212 - 1000 - 5 - 300));
}

#[tokio::test]
async fn a_retried_first_call_takes_nothing_and_leaves_the_hold_open_for_the_usage_call() {
    let server = Server::builder().single();
    let d = domain("holds");
    let mut rls = Rls::start(server.url(), &CONFIG.replace("{D}", &d), &[]).await;
    let model: &[(&str, &str)] = &[("model", "gpt")];
    let call = |cost: u64| with_cost(&[("model", "gpt"), ("request_id", "t1")], cost);
    let r = ask(&mut rls, &d, vec![call(0)]).await;
    assert!(r.ok() && r.status(0) == (false, 9000), "{r:?}");
    // Envoy retrying the request-path call (with 0 or 1): it replies as the first and takes nothing.
    for cost in [0, 1, 0] {
        let r = ask(&mut rls, &d, vec![call(cost)]).await;
        assert!(r.ok() && r.status(0) == (false, 9000), "{r:?}");
        assert_eq!(left(&mut rls, &d, model).await, 9000);
    }
    // The hold is still open: the stream-done call settles it, once.
    let r = ask(&mut rls, &d, vec![call(700)]).await;
    assert!(r.ok(), "{r:?}");
    assert_eq!(left(&mut rls, &d, model).await, 10000 - 700);
    assert!(ask(&mut rls, &d, vec![call(700)]).await.ok());
    assert_eq!(left(&mut rls, &d, model).await, 10000 - 700);
    // A request-path call after the settle (a late retry) still takes nothing.
    assert!(ask(&mut rls, &d, vec![call(0)]).await.ok());
    assert_eq!(left(&mut rls, &d, model).await, 10000 - 700);
}

#[tokio::test]
async fn a_denied_hold_takes_nothing_and_the_request_s_other_limits_are_in_the_same_atomic_call() {
    let server = Server::builder().single();
    let d = domain("holds");
    let mut rls = Rls::start(server.url(), &CONFIG.replace("{D}", &d), &[]).await;
    let small: &[(&str, &str)] = &[("small", "m")];
    let call = |id: &str, user: &str| {
        vec![with_cost(&[("small", "m"), ("request_id", id)], 0), with_cost(&[("user", user)], 1)]
    };
    let r = ask(&mut rls, &d, call("a1", "ada")).await;
    // One atomic call: the reply describes its most restrictive limit (the user's).
    assert!(r.ok() && r.status(1) == (false, 0), "{r:?}");
    assert_eq!(left(&mut rls, &d, small).await, 500);
    // The estimate does not fit: denied, and neither limit is charged.
    let r = ask(&mut rls, &d, call("a2", "bob")).await;
    assert!(r.over() && r.status(0).0, "{r:?}");
    assert!(!exists(&server, &format!("rl:holds:{{rls.{d}}}:a2")), "a denial records nothing");
    assert_eq!((left(&mut rls, &d, small).await, left(&mut rls, &d, &[("user", "bob")]).await), (500, 1));
    // a1 settles small; the user limit stays charged 1 (it is not held).
    assert!(ask(&mut rls, &d, vec![with_cost(&[("small", "m"), ("request_id", "a1")], 200)]).await.ok());
    assert_eq!((left(&mut rls, &d, small).await, left(&mut rls, &d, &[("user", "ada")]).await), (1300, 0));
    // The user limit denying: nothing held.
    let r = ask(&mut rls, &d, call("a3", "ada")).await;
    assert!(r.over() && r.status(1).0 && !r.status(0).0, "{r:?}");
    assert_eq!(left(&mut rls, &d, small).await, 1300);
    assert!(!exists(&server, &format!("rl:holds:{{rls.{d}}}:a3")));
    // Two request ids in one request: refused.
    let two = vec![
        with_cost(&[("small", "m"), ("request_id", "x")], 0),
        with_cost(&[("model", "m"), ("request_id", "y")], 0),
    ];
    let err =
        rls.send(RateLimitRequest { domain: d.clone(), descriptors: two, hits_addend: 0 }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn over_http_json_with_a_configured_entry_name() {
    let server = Server::builder().single();
    let d = domain("holds");
    let mut rls =
        Rls::start(server.url(), &CONFIG.replace("{D}", &d), &[("RLS_HOLD_ENTRY", "x-request-id")]).await;
    let http = reqwest::Client::new();
    let body = |cost: u64| -> Value {
        json!({"domain": d, "descriptors": [{"entries": [{"key": "x-request-id", "value": "h1"}, {"key": "model", "value": "g"}], "hits_addend": cost}]})
    };
    for (cost, remaining) in [(0, 9000), (40, 9960)] {
        let r = http.post(format!("{}/json", rls.http)).body(body(cost).to_string()).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let _: Value = r.json().await.unwrap();
        assert_eq!(left(&mut rls, &d, &[("model", "g")]).await, remaining);
    }
    // The default entry name is now an ordinary entry: no rule matches it.
    let r = ask(&mut rls, &d, vec![with_cost(&[("model", "g"), ("request_id", "h2")], 0)]).await;
    assert!(r.ok() && r.limit(0).is_none());
}
