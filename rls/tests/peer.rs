//! Side by side with envoyproxy/ratelimit itself (not run by `make test`: it needs its binary, built
//! from a fetched snapshot by `rls/scripts/peer.sh test`, which runs this with `--ignored`). Both on
//! the same Redis with the same configuration directory, the same request sequences, the answers
//! compared: code, limit and remaining of every descriptor (not `duration_until_reset`: its windows
//! are aligned to the clock, ours start at the first request; rls/README.md). Hour windows, and a
//! sequence that crossed an hour is run again, so its window edge does not decide.

mod support;

use redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use std::time::{SystemTime, UNIX_EPOCH};
use support::peer::{self, Peer};
use support::{descriptor, domain, Rls};
use testkit::Server;
use tonic::transport::Channel;

const CONFIG: &str = r#"
domain: {D}
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3}
    descriptors:
      - key: path
        value: /login
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: route
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: dry
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: plan
    value: basic
    rate_limit: {unit: hour, requests_per_unit: 2, name: basic}
  - key: plan
    value: gold
    rate_limit: {unit: hour, requests_per_unit: 10, replaces: [{name: basic}]}
  - key: quota1
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
"#;

type Step = (&'static [&'static [(&'static str, &'static str)]], u32);

/// The sequences: each feature, then two descriptors where one denies (where the combinations differ).
const STEPS: &[Step] = &[
    (&[&[("remote_address", "10.0.0.1")]], 0),
    (&[&[("remote_address", "10.0.0.1")]], 0),
    (&[&[("remote_address", "10.0.0.1")]], 2),
    (&[&[("remote_address", "10.0.0.1")]], 0),
    (&[&[("remote_address", "10.0.0.2"), ("path", "/login")]], 0),
    (&[&[("remote_address", "10.0.0.2"), ("path", "/login")]], 0),
    (&[&[("remote_address", "10.0.0.2"), ("path", "/other")]], 0),
    (&[&[("tenant", "a")]], 3),
    (&[&[("tenant", "a")]], 3),
    (&[&[("tenant", "a")]], 2),
    (&[&[("route", "/api/items")]], 0),
    (&[&[("route", "/api/users")]], 0),
    (&[&[("route", "/api/items")]], 0),
    (&[&[("route", "/apx")]], 0),
    (&[&[("free", "x")]], 0),
    (&[&[("blocked", "x")]], 0),
    (&[&[("dry", "x")]], 0),
    (&[&[("dry", "x")]], 0),
    (&[&[("plan", "basic")], &[("plan", "gold")]], 0),
    (&[&[("plan", "basic")]], 0),
    (&[&[("plan", "basic")]], 0),
    (&[&[("plan", "basic")]], 0),
    (&[&[("unknown", "x")]], 0),
    // An address at its limit beside a tenant with room.
    (&[&[("remote_address", "10.0.0.1")], &[("tenant", "b")]], 0),
    (&[&[("remote_address", "10.0.0.1")], &[("tenant", "b")]], 0),
    (&[&[("tenant", "b")]], 0),
    // quota_mode: over the limit only when every quota descriptor of the request is.
    (&[&[("quota1", "a")]], 0),
    (&[&[("quota1", "a")]], 0),
    (&[&[("quota1", "a")], &[("quota2", "a")]], 0),
    (&[&[("quota1", "a")], &[("quota2", "a")]], 0),
    (&[&[("quota1", "b")], &[("tenant", "c")]], 0),
];

/// Where a request's cost does not fit in what is left (hits_addend 2 with 1 left, 3 with 2 left):
/// envoyproxy/ratelimit counts the denied hits (the counter passes the limit, remaining 0, and the next
/// request that would have fitted is over too); here a denied request is charged nothing (remaining
/// is what is left, and the next request fits).
const DENIED_NOT_COUNTED: &[usize] = &[2, 3, 8, 9];

/// Where the all-or-nothing combination answers differently: the requests with a denying descriptor
/// beside one with room (that one is not charged, and has no limit in its status), and the read after.
const POLLUTED: &[usize] = &[23, 24, 25];

/// What is compared of a reply.
/// (code, limit as (requests_per_unit, unit), remaining) of one descriptor.
type Status = (i32, Option<(u32, i32)>, u32);

fn normal(r: &RateLimitResponse) -> (i32, Vec<Status>) {
    let statuses = r
        .statuses
        .iter()
        .map(|s| (s.code, s.current_limit.as_ref().map(|l| (l.requests_per_unit, l.unit)), s.limit_remaining))
        .collect();
    (r.overall_code, statuses)
}

async fn ask(client: &mut RateLimitServiceClient<Channel>, d: &str, step: &Step) -> RateLimitResponse {
    let request = RateLimitRequest {
        domain: d.to_string(),
        descriptors: step.0.iter().map(|e| descriptor(e)).collect(),
        hits_addend: step.1,
    };
    client.should_rate_limit(request).await.unwrap().into_inner()
}

fn hour() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() / 3600
}

/// Runs STEPS against both on a fresh domain; the steps where they differ, with both answers.
async fn differences(server: &Server, binary: &std::path::Path, combine: &str) -> Vec<(usize, String)> {
    loop {
        let d = domain("peer");
        let mut ours =
            Rls::start(server.url(), &CONFIG.replace("{D}", &d), &[("RLS_COMBINE", combine)]).await;
        let theirs = Peer::start(binary, &format!("127.0.0.1:{}", server.port), &ours.dir, &[]).await;
        let mut their_client = theirs.client().await;
        let started = hour();
        let mut found = vec![];
        for (i, step) in STEPS.iter().enumerate() {
            let a = ask(&mut ours.client, &d, step).await;
            let b = ask(&mut their_client, &d, step).await;
            if normal(&a) != normal(&b) {
                found.push((i, format!("ours {:?}\ntheirs {:?}", normal(&a), normal(&b))));
            }
        }
        if hour() == started {
            return found;
        }
        eprintln!("an hour began during the sequence: again");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs envoyproxy/ratelimit's binary: rls/scripts/peer.sh test"]
async fn the_same_answers_as_envoyproxy_ratelimit() {
    let Some(binary) = peer::binary() else { return };
    let Some(server) = Server::builder().own() else { return };
    // Its combination: every answer equal but where a denied request's cost is counted there.
    let found = differences(&server, &binary, "per_descriptor").await;
    for (i, what) in &found {
        eprintln!("per_descriptor, step {i} (documented difference):\n{what}");
    }
    let steps: Vec<usize> = found.iter().map(|(i, _)| *i).collect();
    assert_eq!(steps, DENIED_NOT_COUNTED, "RLS_COMBINE=per_descriptor: {found:#?}");
    // All or nothing: also where a denied request's other descriptor is not charged.
    let found = differences(&server, &binary, "atomic").await;
    for (i, what) in &found {
        eprintln!("atomic, step {i} (documented difference):\n{what}");
    }
    let steps: Vec<usize> = found.iter().map(|(i, _)| *i).collect();
    assert_eq!(steps, [DENIED_NOT_COUNTED, POLLUTED].concat(), "{found:#?}");
}
