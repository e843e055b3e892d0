//! The limiter on a real Redis Cluster (3 primaries with a replica each): keys of many callers spread
//! over every primary stay exact, and a route + global check with the caller in a hash tag is one
//! atomic call on the caller's node.

mod support;

use redis_ratelimit_client::{FailurePolicy, Limit, Limiter, Policy};
use testkit::cluster::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_stay_exact_across_the_cluster_and_multi_limit_checks_use_hash_tags() {
    let Some(cluster) = Cluster::start() else { return };
    let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.url().to_string()).collect();
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let limiter = Limiter::builder(FailurePolicy::Closed).connect_cluster(&nodes).await.unwrap();
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

/// What a failover costs the limit on Redis Cluster: two limiter instances load keys of one primary
/// (one hash tag), the primary is killed with SIGKILL, its replica takes over after the cluster's node
/// timeout (2 s). Redis decides again within a bound, degraded decisions follow the policy, buckets
/// carry on; the excess over the limit and the replication lag at the kill are reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_under_load_and_what_it_over_admits() {
    let Some(mut cluster) = Cluster::start() else { return };
    let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.url().to_string()).collect();
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let mut instances = vec![];
    for _ in 0..2 {
        let builder = Limiter::builder(FailurePolicy::Closed)
            .deadline(std::time::Duration::from_millis(200))
            .breaker(3, std::time::Duration::from_millis(500));
        instances.push(builder.connect_cluster(&nodes).await.unwrap());
    }
    let load = support::failover::start(&instances, |k| format!("rl:{{failover}}:{k}"));
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let owner = cluster.owner("rl:{failover}:0").port;
    let replica = cluster.replica_of(cluster.owner("rl:{failover}:0")).port;
    let lag = support::failover::lag_bytes(&mut cluster.owner("rl:{failover}:0").conn());
    let killed_at = std::time::Instant::now();
    cluster.nodes.iter_mut().find(|n| n.port == owner).unwrap().kill();
    let promoted = cluster.nodes.iter().find(|n| n.port == replica).unwrap();
    tokio::task::block_in_place(|| {
        testkit::wait_until("the replica to take over", || {
            testkit::cluster::role(&mut promoted.conn()) == "master"
        })
    });
    eprintln!("cluster failover: the replica took over {:?} after the kill", killed_at.elapsed());
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let (start, seen) = load.stop().await;
    // The node timeout (2 s), the election, and the client's slot refresh, with a margin.
    let bound = std::time::Duration::from_secs(10);
    support::failover::check("cluster failover, replication in step", start, &seen, killed_at, lag, bound);
}
