//! The extension's concurrency limits through Envoy's API: a lease taken by a descriptor ending in
//! `rls_lease=<id>` (RL.ACQUIRE, in RL.ALL beside the request's rate limits), held until a descriptor
//! ending in `rls_release=<id>` (RL.RELEASE) or until its lease (one `unit`) ends. On the module and on
//! a stock server (the Lua library).

mod support;

use std::time::Duration;
use support::{descriptor, domain, Rls};
use testkit::Server;

const CONFIG: &str = r#"
domain: {D}
descriptors:
  - key: exports
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: concurrency}
  - key: short
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: concurrency}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10}
"#;

fn take<'a>(key: &'a str, value: &'a str, id: &'a str) -> [(&'a str, &'a str); 2] {
    [(key, value), ("rls_lease", id)]
}

fn give<'a>(key: &'a str, value: &'a str, id: &'a str) -> [(&'a str, &'a str); 2] {
    [(key, value), ("rls_release", id)]
}

async fn leases(server: &Server) {
    let d = domain("leases");
    let mut rls = Rls::start(server.url(), &CONFIG.replace("{D}", &d), &[]).await;
    // Two in flight, the third waits for a release.
    let r = rls.ask(&d, &[&take("exports", "t1", "a")], 0).await.unwrap();
    assert_eq!((r.ok(), r.status(0), r.limit(0)), (true, (false, 1), Some(2)));
    assert_eq!(rls.ask(&d, &[&take("exports", "t1", "b")], 0).await.unwrap().status(0), (false, 0));
    assert!(rls.ask(&d, &[&take("exports", "t1", "c")], 0).await.unwrap().over());
    // Another value: its own leases.
    assert!(rls.ask(&d, &[&take("exports", "t2", "c")], 0).await.unwrap().ok());
    // A release: OK, and the slot is free again; a release of an id that holds nothing is OK too.
    let r = rls.ask(&d, &[&give("exports", "t1", "a")], 0).await.unwrap();
    assert!(r.ok() && r.limit(0).is_none(), "{r:?}");
    assert!(rls.ask(&d, &[&give("exports", "t1", "never-held")], 0).await.unwrap().ok());
    assert!(rls.ask(&d, &[&take("exports", "t1", "c")], 0).await.unwrap().ok());
    assert!(rls.ask(&d, &[&take("exports", "t1", "e")], 0).await.unwrap().over(), "b and c hold both");
    // Released twice: the second gives nothing back.
    rls.ask(&d, &[&give("exports", "t1", "b")], 0).await.unwrap();
    rls.ask(&d, &[&give("exports", "t1", "b")], 0).await.unwrap();
    assert!(rls.ask(&d, &[&take("exports", "t1", "f")], 0).await.unwrap().ok());
    assert!(rls.ask(&d, &[&take("exports", "t1", "g")], 0).await.unwrap().over());

    // hits_addend is the lease's weight: 2 take both slots.
    assert!(rls.ask(&d, &[&take("exports", "t3", "h")], 2).await.unwrap().ok());
    assert!(rls.ask(&d, &[&take("exports", "t3", "i")], 0).await.unwrap().over());

    // In one RL.ALL with the request's rate limits: a full concurrency limit denies the request and
    // the address is not charged; once there is room both are taken.
    let ip: &[(&str, &str)] = &[("remote_address", "10.0.0.1")];
    let r = rls.ask(&d, &[ip, &take("exports", "t1", "j")], 0).await.unwrap();
    assert!(r.over() && r.status(1).0, "{r:?}");
    rls.ask(&d, &[&give("exports", "t1", "c")], 0).await.unwrap();
    assert!(rls.ask(&d, &[ip, &take("exports", "t1", "j")], 0).await.unwrap().ok(), "the address kept its 1");
    assert!(rls.ask(&d, &[ip], 0).await.unwrap().over());
    // The release Envoy sends at the end of the stream may carry the other descriptors too: they
    // are not charged again... unless they are limits of their own (the tenant is counted).
    let tenant: &[(&str, &str)] = &[("tenant", "x")];
    rls.ask(&d, &[tenant, &give("exports", "t1", "j")], 0).await.unwrap();
    assert!(rls.ask(&d, &[&take("exports", "t1", "k")], 0).await.unwrap().ok(), "j released");

    // The safety net: a lease never released ends after its unit.
    assert!(rls.ask(&d, &[&take("short", "s", "l")], 0).await.unwrap().ok());
    assert!(rls.ask(&d, &[&take("short", "s", "m")], 0).await.unwrap().over());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(rls.ask(&d, &[&take("short", "s", "m")], 0).await.unwrap().ok(), "l's lease ended");

    // Not expressible: no lease id, or two ids in one request.
    let e = rls.ask(&d, &[&[("exports", "t1")]], 0).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("rls_lease"), "{}", e.message());
    let e = rls.ask(&d, &[&take("exports", "t4", "n"), &take("short", "t4", "o")], 0).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // Per descriptor (envoyproxy/ratelimit's combination), each with its own id.
    let mut per =
        Rls::start(server.url(), &CONFIG.replace("{D}", &d), &[("RLS_COMBINE", "per_descriptor")]).await;
    let r = per.ask(&d, &[&take("exports", "t5", "p"), &take("short", "t5", "q")], 0).await.unwrap();
    assert!(r.ok(), "{r:?}");
    assert!(per.ask(&d, &[&take("short", "t5", "r")], 0).await.unwrap().over());
    per.ask(&d, &[&give("short", "t5", "q")], 0).await.unwrap();
    assert!(per.ask(&d, &[&take("short", "t5", "r")], 0).await.unwrap().ok());
    // A lease entry on a limit that is not a concurrency limit: decided as usual.
    let mut leased_rate = descriptor(&take("tenant", "y", "s"));
    leased_rate.hits_addend = Some(10);
    let request = redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::RateLimitRequest {
        domain: d.clone(),
        descriptors: vec![leased_rate],
        hits_addend: 0,
    };
    assert_eq!(rls.send(request).await.unwrap().status(0), (false, 0));
}

#[tokio::test]
async fn leases_on_the_module() {
    let Some(server) = Server::builder().own() else { return };
    leases(&server).await;
}

#[tokio::test]
async fn leases_on_a_stock_server_through_the_library() {
    let Some(mut server) = Server::builder().stock().own() else { return };
    leases(&server).await;
    // Redis stopped: the failure policy answers the acquire (over_limit: denied; ok: allowed).
    let d = domain("down");
    let mut closed =
        Rls::start(server.url(), &CONFIG.replace("{D}", &d), &[("RLS_FAILURE_MODE", "over_limit")]).await;
    let mut open = Rls::start(server.url(), &CONFIG.replace("{D}", &d), &[("RLS_FAILURE_MODE", "ok")]).await;
    server.stop();
    assert!(closed.ask(&d, &[&take("exports", "t", "a")], 0).await.unwrap().over());
    assert!(open.ask(&d, &[&take("exports", "t", "a")], 0).await.unwrap().ok());
    assert!(open.ask(&d, &[&give("exports", "t", "a")], 0).await.unwrap().ok(), "a release answers OK");
}
