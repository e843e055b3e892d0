//! The limiter behind Redis Sentinel, and what a failover costs the limit. A module-enabled primary
//! and replica and three sentinels on loopback (`testkit::sentinel`: down after 1 s, failover timeout
//! 5 s); two limiter instances put a steady load on keys of known capacity and rate
//! (`support::failover`); the primary is killed with SIGKILL. The decisions must come from the
//! promoted replica within a bounded time, every degraded decision in between must follow the failure
//! policy, and the buckets must carry on from the replicated state. The tests report what the
//! failover over-admitted (requests allowed beyond what the limit allows over the span) and the
//! replication lag at the kill; with `wait_for_replicas` on, the excess must be zero.

mod support;

use redis_ratelimit_client::{FailurePolicy, Limiter, Policy, WaitTimeout};
use std::time::{Duration, Instant};
use support::failover;
use testkit::redis;
use testkit::sentinel::{Sentinels, DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS, SERVICE};

fn limiter(topology: &Sentinels, wait: bool) -> Limiter {
    let urls = topology.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let mut builder = Limiter::builder(FailurePolicy::Closed)
        .deadline(Duration::from_millis(200))
        .breaker(3, Duration::from_millis(500));
    if wait {
        builder = builder.wait_for_replicas(1, Duration::from_millis(100), WaitTimeout::Deny);
    }
    builder.connect_sentinel(&urls, SERVICE).unwrap()
}

/// Two limiter instances under load; the primary is killed after 2 s, and the load goes on until 4 s
/// after the sentinels name a new primary. With `lagging`, replication falls behind first, as on a
/// loaded network: the replica is stopped (SIGSTOP) and 64 MB of other writes fill the link and its
/// socket buffers (loopback autotunes them to tens of MB), so the decisions of the next 1.5 s sit in
/// the primary's output buffer when it dies; the replica resumes (SIGCONT) just after the kill.
/// Returns the excess per key.
async fn failover_under_load(
    topology: &mut Sentinels,
    label: &str,
    wait: bool,
    lagging: bool,
) -> (Vec<u64>, i64) {
    let instances = [limiter(topology, wait), limiter(topology, wait)];
    let warm = Policy::token_bucket(1, 1.0).unwrap();
    for l in &instances {
        assert!(
            !l.check(&format!("rl:{label}:warm"), &warm, 0).await.degraded,
            "the limiter reaches the primary"
        );
    }
    let prefix = format!("rl:{}", label.replace(' ', "-"));
    let load = failover::start(&instances, |k| format!("{prefix}:{{k}}:{k}"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let old = topology.primary_port().expect("the sentinels name a primary");
    let replica_port = topology.nodes.iter().map(|n| n.port).find(|p| *p != old).unwrap();
    let replica_pid = topology.node(replica_port).unwrap().pid().unwrap();
    if lagging {
        failover::signal(replica_pid, "STOP");
        let mut p = topology.node(old).unwrap().conn();
        let filler = vec![b'x'; 1 << 20];
        for i in 0..64 {
            let _: () = redis::cmd("SET").arg(format!("filler:{i}")).arg(&filler).query(&mut p).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let lag = failover::lag_bytes(&mut topology.node(old).unwrap().conn());
    let killed_at = Instant::now();
    topology.node(old).unwrap().kill();
    if lagging {
        failover::signal(replica_pid, "CONT");
    }
    let new = tokio::task::block_in_place(|| {
        topology.wait_failover(old, Duration::from_millis(DOWN_AFTER_MS + 3 * FAILOVER_TIMEOUT_MS))
    })
    .expect("the sentinels promote the replica");
    assert_eq!(new, replica_port);
    eprintln!("{label}: the sentinels named the new primary {:?} after the kill", killed_at.elapsed());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (start, seen) = load.stop().await;
    // Sentinel's down-after plus its failover, with a margin for the limiter's breaker.
    let bound = Duration::from_millis(DOWN_AFTER_MS + FAILOVER_TIMEOUT_MS + 2000);
    (failover::check(label, start, &seen, killed_at, lag, bound), lag)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_followed_and_what_it_over_admits_is_measured() {
    let Some(mut topology) = Sentinels::start() else { return };
    failover_under_load(&mut topology, "sentinel failover, replication in step", false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_behind_a_lagging_replica_over_admits_what_it_lost() {
    let Some(mut topology) = Sentinels::start() else { return };
    let (excess, lag) =
        failover_under_load(&mut topology, "sentinel failover, replica 1.5 s behind", false, true).await;
    assert!(lag > 1 << 20, "the replica was behind at the kill: {lag} bytes");
    assert!(excess.iter().sum::<u64>() > 0, "the lost writes' tokens came back: {excess:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_replica_bounds_the_over_admission_at_zero() {
    let Some(mut topology) = Sentinels::start() else { return };
    let label = "sentinel failover, replica 1.5 s behind, wait_for_replicas(1)";
    let (excess, lag) = failover_under_load(&mut topology, label, true, true).await;
    assert!(lag > 1 << 20, "the replica was behind at the kill: {lag} bytes");
    assert_eq!(excess.iter().sum::<u64>(), 0, "no allowed decision's write was lost: {excess:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_answering_readonly_is_an_outage_that_re_resolves() {
    let Some(mut topology) = Sentinels::start() else { return };
    let limiter = limiter(&topology, false);
    let policy = Policy::token_bucket(5, 0.01).unwrap();
    assert!(!limiter.check("rl:sentinel:ro", &policy, 1).await.degraded);
    let old = topology.primary_port().unwrap();
    // A manual failover: the old primary becomes a replica (and answers READONLY to writes).
    let mut sentinel = redis::Client::open(topology.urls()[0].as_str()).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("SENTINEL").arg("FAILOVER").arg(SERVICE).query(&mut sentinel).unwrap();
    let new = tokio::task::block_in_place(|| topology.wait_failover(old, Duration::from_secs(20))).unwrap();
    // Sentinel reconfigures the old primary as a replica only after several of its info periods; do
    // what it will do now, so the limiter meets a demoted primary at once.
    let mut demoted = topology.node(old).unwrap().conn();
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(new).query(&mut demoted).unwrap();
    testkit::wait_until("the old primary to be a replica", || {
        testkit::info_field(&mut demoted, "replication", "role").as_deref() == Some("slave")
    });
    let started = Instant::now();
    let (mut first_redis, mut outages) = (None, 0);
    while started.elapsed() < Duration::from_secs(10) {
        let d = limiter.check("rl:sentinel:ro", &policy, 1).await;
        if !d.degraded {
            first_redis = Some(d);
            break;
        }
        outages += 1;
        assert!(!d.allowed, "closed: a READONLY answer is an outage, decided by the policy");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let d = first_redis.expect("the limiter re-resolved the primary");
    assert!(outages >= 1, "the limiter's first call met the demoted primary's READONLY");
    assert_eq!(d.remaining, 3, "the bucket carried on on the new primary (port {new}): {d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readonly_counts_against_the_breaker_on_a_single_server_too() {
    let Some(primary) = testkit::Server::builder().own() else { return };
    let port = primary.port.to_string();
    let replica = testkit::Server::builder().args(&["--replicaof", "127.0.0.1", &port]).start();
    let limiter = Limiter::builder(FailurePolicy::Closed)
        .breaker(3, Duration::from_secs(30))
        .connect(replica.url())
        .unwrap();
    let policy = Policy::token_bucket(5, 1.0).unwrap();
    for _ in 0..3 {
        let d = limiter.check("rl:ro", &policy, 1).await;
        assert!(d.degraded && !d.allowed, "a replica cannot decide: {d:?}");
    }
    assert!(limiter.breaker_open(), "three READONLY answers in a row open the breaker");
}
