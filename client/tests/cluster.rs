//! The limiter on a real Redis Cluster (3 primaries with a replica each): keys of many callers spread
//! over every primary stay exact, and a route + global check with the caller in a hash tag is one
//! atomic call on the caller's node.

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
