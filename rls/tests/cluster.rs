//! The service on a real Redis Cluster (3 primaries with a replica each, the module on every node), one
//! cluster for every case: how keys are hashed (RLS_HASH_TAG), one RL.ALL per request where a request's
//! keys share a slot, and what happens where they cannot.

mod support;

use redis::Commands;
use redis_ratelimit_client::{FailurePolicy, Limit, Limiter, Policy};
use redis_ratelimit_rls::limits::Algorithm;
use redis_ratelimit_rls::plan::{key, keyslot, HashTag};
use std::collections::HashSet;
use std::time::Duration;
use support::{descriptor, domain, sample, Rls};
use testkit::cluster::Cluster;

fn config(d: &str) -> String {
    format!(
        "domain: {d}\ndescriptors:\n  - key: remote_address\n    rate_limit: {{unit: minute, requests_per_unit: 3}}\n  - key: tenant\n    rate_limit: {{unit: minute, requests_per_unit: 5}}\n"
    )
}

fn fixed(d: &str, entries: &[(&str, &str)], hash: HashTag) -> String {
    key(d, Algorithm::FixedWindow, &descriptor(entries), hash)
}

/// Five requests, each an address (3 a minute) and a tenant (5): how much of the tenant's quota is left.
async fn tenant_left_after_five(rls: &mut Rls, d: &str, ip: &str, tenant: &str) -> u32 {
    let both: &[&[(&str, &str)]] = &[&[("remote_address", ip)], &[("tenant", tenant)]];
    let mut allowed = 0;
    for _ in 0..5 {
        allowed += u32::from(rls.ask(d, both, 0).await.unwrap().ok());
    }
    assert_eq!(allowed, 3, "the address's limit");
    rls.ask(d, &[&[("tenant", tenant)]], 0).await.unwrap().status(0).1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_hashed_by_domain_or_descriptor_on_a_cluster() {
    let Some(cluster) = Cluster::start() else { return };
    let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.url().to_string()).collect();
    let url = nodes.join(",");
    let mut con = cluster.nodes[0].conn();

    // Our slot is Redis' own.
    for k in
        ["rl:{rls.edge}:fixed_window:remote_address=10.0.0.1", "rl:{rls.e:tenant=t}:fixed_window", "plain"]
    {
        let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(k).query(&mut con).unwrap();
        assert_eq!(keyslot(k), slot, "{k}");
    }

    // RLS_HASH_TAG=domain (the default): every key of a domain in its domain's slot, every request one
    // RL.ALL (a denied request charges none: the tenant keeps 2 of 5); the domains over every primary.
    let d = domain("cluster");
    let mut rls = Rls::start(
        &url,
        &config(&d),
        &[("REDIS_TYPE", "cluster"), ("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
    )
    .await;
    assert_eq!(tenant_left_after_five(&mut rls, &d, "10.0.0.1", "t").await, 1, "3 charged, then 1 more");
    let a = fixed(&d, &[("remote_address", "10.0.0.1")], HashTag::Domain);
    let t = fixed(&d, &[("tenant", "t")], HashTag::Domain);
    assert_eq!(keyslot(&a), keyslot(&t));
    let owner = cluster.owner(&a);
    let exists: u32 = redis::cmd("EXISTS").arg(&a).arg(&t).query(&mut owner.conn()).unwrap();
    assert_eq!(exists, 2, "both keys on the domain's primary");
    let mut primaries = HashSet::new();
    for i in 0..24 {
        let other = format!("{d}-{i}");
        primaries.insert(cluster.owner(&fixed(&other, &[("tenant", "t")], HashTag::Domain)).port);
    }
    assert_eq!(primaries.len(), 3, "domains spread over the primaries");
    let health = reqwest::get(format!("{}/healthcheck", rls.http)).await.unwrap();
    assert_eq!(health.status().as_u16(), 200);

    // RLS_HASH_TAG=descriptor: each descriptor in its own slot. Where a request's two keys fall in
    // different slots they cannot be one call: RL.ALL over them is refused by Redis (CROSSSLOT) ...
    let d = domain("per-descriptor");
    let slot_of = |entries: &[(&str, &str)]| keyslot(&fixed(&d, entries, HashTag::Descriptor));
    let tenant_where = |ip: &str, same: bool| {
        (0..)
            .map(|n| format!("t{n}"))
            .find(|t| (slot_of(&[("tenant", t)]) == slot_of(&[("remote_address", ip)])) == same)
            .unwrap()
    };
    let (apart, together) = (tenant_where("10.0.0.8", false), tenant_where("10.0.0.9", true));
    let ip_key = fixed(&d, &[("remote_address", "10.0.0.8")], HashTag::Descriptor);
    let nodes_str: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let limiter = Limiter::builder(FailurePolicy::Open)
        .deadline(Duration::from_secs(2))
        .connect_cluster(&nodes_str)
        .await
        .unwrap();
    let policy = Policy::fixed_window(3, Duration::from_secs(60)).unwrap();
    let apart_key = fixed(&d, &[("tenant", &apart)], HashTag::Descriptor);
    let refused = limiter
        .check_strict(&[Limit::new(&ip_key, &policy, 1), Limit::new(&apart_key, &policy, 1)])
        .await
        .unwrap_err();
    assert!(refused.to_string().to_ascii_uppercase().contains("CROSSSLOT"), "{refused}");
    // ... so the service decides such a request descriptor by descriptor (every one charged, as
    // envoyproxy/ratelimit does: the tenant pays for the 2 denied requests too), and counts it.
    let mut rls =
        Rls::start(&url, &config(&d), &[("REDIS_TYPE", "cluster"), ("RLS_HASH_TAG", "descriptor")]).await;
    assert_eq!(tenant_left_after_five(&mut rls, &d, "10.0.0.8", &apart).await, 0, "5 charged, then 1 more");
    let page = reqwest::get(format!("{}/metrics", rls.http)).await.unwrap().text().await.unwrap();
    assert_eq!(sample(&page, "ratelimit_service_cross_slot_requests_total"), 5, "{page}");
    // A tenant whose key shares the address's slot: one RL.ALL again, all or nothing.
    assert_eq!(tenant_left_after_five(&mut rls, &d, "10.0.0.9", &together).await, 1);
    let page = reqwest::get(format!("{}/metrics", rls.http)).await.unwrap().text().await.unwrap();
    assert_eq!(sample(&page, "ratelimit_service_cross_slot_requests_total"), 5);
    // The keys are where their own slots say.
    let owner = cluster.owner(&apart_key);
    let held: bool = owner.conn().exists(&apart_key).unwrap();
    assert!(held);
}
