//! The limiter on a real Redis Cluster (3 primaries with a replica each): keys of many callers spread
//! over every primary stay exact, and a route + global check with the caller in a hash tag is one
//! atomic call on the caller's node.

mod support;

use redis_ratelimit_client::{Backend, FailurePolicy, Limit, Limiter, Policy};
use support::wait_until;
use testkit::cluster::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_stay_exact_across_the_cluster_and_multi_limit_checks_use_hash_tags() {
    let Some(cluster) = Cluster::start() else { return };
    let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.url().to_string()).collect();
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let limiter = support::builder(FailurePolicy::Closed).connect_cluster(&nodes).await.unwrap();
    let route = Policy::token_bucket(3, 0.001).unwrap();
    let global = Policy::token_bucket(5, 0.001).unwrap();
    let mut primaries_used = std::collections::HashSet::new();
    for client in 0..30 {
        let (a, b, all) =
            (format!("rl:{{c{client}}}:a"), format!("rl:{{c{client}}}:b"), format!("rl:{{c{client}}}:all"));
        primaries_used.insert(cluster.owner(&all).port);
        let mut allowed = 0;
        for key in [&a, &a, &a, &a, &b, &b, &b] {
            let d = limiter.check_all(&[Limit::new(key, &route, 1), Limit::new(&all, &global, 1)]).await;
            assert!(!d.degraded, "{d:?}");
            allowed += usize::from(d.allowed);
        }
        assert_eq!(allowed, 5, "client {client}: 3 on route a, then b until the global 5");
    }
    assert_eq!(primaries_used.len(), 3, "the callers' keys live on every primary");
}

/// A stock cluster (no module) with the Lua library: each primary gets the library on its first call
/// there (FCALL answered "Function not found", loaded, sent again), every call goes to its key's slot,
/// and the limits stay exact; the same through EVALSHA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_stock_cluster_every_node_gets_the_library_on_first_use() {
    let Some(cluster) = Cluster::start_stock() else { return };
    let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.url().to_string()).collect();
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    for (engine, prefix) in [(Backend::Auto, "auto"), (Backend::Scripts, "scripts")] {
        let limiter =
            support::builder(FailurePolicy::Closed).backend(engine).connect_cluster(&nodes).await.unwrap();
        let route = Policy::token_bucket(3, 0.001).unwrap();
        let global = Policy::token_bucket(5, 0.001).unwrap();
        let mut primaries_used = std::collections::HashSet::new();
        for client in 0..12 {
            let tag = format!("{prefix}{client}");
            let (a, all) = (format!("rl:{{{tag}}}:a"), format!("rl:{{{tag}}}:all"));
            primaries_used.insert(cluster.owner(&all).port);
            let allowed = allowed_of_four(&limiter, &a, &all, &route, &global).await;
            assert_eq!(allowed, 3, "{engine:?} client {client}: the route's 3");
        }
        assert_eq!(primaries_used.len(), 3, "every primary was used");
        assert_eq!(limiter.counts().degraded, 0, "{engine:?}: Redis decided every call");
        let info = limiter.verify().await.unwrap();
        assert_ne!(info.engine, Backend::Module, "{info:?}");
    }
}

async fn allowed_of_four(limiter: &Limiter, a: &str, all: &str, route: &Policy, global: &Policy) -> usize {
    let mut allowed = 0;
    for _ in 0..4 {
        let d = limiter.check_all(&[Limit::new(a, route, 1), Limit::new(all, global, 1)]).await;
        assert!(!d.degraded, "{d:?}");
        allowed += usize::from(d.allowed);
    }
    allowed
}

/// What a failover costs the limit on Redis Cluster: two limiter instances load keys of one primary
/// (one hash tag), the primary is killed with SIGKILL, its replica takes over after the cluster's node
/// timeout (2 s). Redis decides again within a bound, degraded decisions follow the policy, buckets
/// carry on; the excess over the limit and the replication lag at the kill are reported. With
/// `lagging`, the replica is stopped and 64 MB of other writes fill the link first (as in
/// sentinel.rs), and the limiters wait for one replica: the excess must be zero; the old primary is
/// restarted after the failover and rejoins as the new primary's replica, so waited decisions can be
/// acknowledged again.
async fn cluster_failover(label: &str, lagging: bool) -> Vec<u64> {
    let Some(mut cluster) = Cluster::start() else { return vec![] };
    let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.url().to_string()).collect();
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let mut instances = vec![];
    for _ in 0..2 {
        let mut builder = support::builder(FailurePolicy::Closed)
            .deadline(std::time::Duration::from_millis(200))
            .breaker(3, std::time::Duration::from_millis(500));
        if lagging {
            let timeout = std::time::Duration::from_millis(100);
            builder = builder.wait_for_replicas(1, timeout, redis_ratelimit_client::WaitTimeout::Deny);
        }
        instances.push(builder.connect_cluster(&nodes).await.unwrap());
    }
    let load = support::failover::start(&instances, |k| format!("rl:{{failover}}:{k}"));
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let owner = cluster.owner("rl:{failover}:0").port;
    let replica = cluster.replica_of(cluster.owner("rl:{failover}:0")).port;
    let replica_pid = cluster.nodes.iter().find(|n| n.port == replica).unwrap().pid().unwrap();
    if lagging {
        support::failover::signal(replica_pid, "STOP");
        let mut p = cluster.nodes.iter().find(|n| n.port == owner).unwrap().conn();
        let filler = vec![b'x'; 1 << 20];
        for i in 0..64 {
            let _: () = testkit::redis::cmd("SET")
                .arg(format!("{{failover}}:filler:{i}"))
                .arg(&filler)
                .query(&mut p)
                .unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    }
    let lag =
        support::failover::lag_bytes(&mut cluster.nodes.iter().find(|n| n.port == owner).unwrap().conn());
    let killed_at = std::time::Instant::now();
    cluster.nodes.iter_mut().find(|n| n.port == owner).unwrap().kill();
    if lagging {
        support::failover::signal(replica_pid, "CONT");
    }
    let promoted = cluster.nodes.iter().find(|n| n.port == replica).unwrap();
    wait_until("the replica to take over", async || testkit::cluster::role(&mut promoted.conn()) == "master")
        .await;
    eprintln!("{label}: the replica took over {:?} after the kill", killed_at.elapsed());
    if lagging {
        // A waited decision needs a replica: the old primary comes back as one (its nodes.conf).
        cluster.nodes.iter_mut().find(|n| n.port == owner).unwrap().start_again();
        let promoted = cluster.nodes.iter().find(|n| n.port == replica).unwrap();
        wait_until("the old primary to rejoin as a replica", async || {
            testkit::info_field(&mut promoted.conn(), "replication", "connected_slaves").as_deref()
                == Some("1")
        })
        .await;
    }
    // Waited decisions come back more slowly (each waits for the returning replica): longer.
    tokio::time::sleep(std::time::Duration::from_secs(if lagging { 8 } else { 4 })).await;
    let (start, seen) = load.stop().await;
    // The node timeout (2 s), the election, and the client's slot refresh, with a margin.
    let bound = std::time::Duration::from_secs(10);
    support::failover::check(label, start, &seen, killed_at, lag, bound)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_under_load_and_what_it_over_admits() {
    cluster_failover("cluster failover, replication in step", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_cluster_waiting_for_the_keys_replica_bounds_the_over_admission_at_zero() {
    let excess = cluster_failover("cluster failover, replica 1.5 s behind, wait_for_replicas(1)", true).await;
    assert_eq!(excess.iter().sum::<u64>(), 0, "no allowed decision's write was lost: {excess:?}");
}
