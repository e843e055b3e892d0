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
use support::{failover, wait_until};
use testkit::redis;
use testkit::sentinel::{Sentinels, DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS, SERVICE};

fn limiter(topology: &Sentinels, wait: bool) -> Limiter {
    let urls = topology.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let mut builder = support::builder(FailurePolicy::Closed)
        .deadline(Duration::from_millis(200))
        .breaker(3, Duration::from_millis(500));
    if wait {
        builder = builder.wait_for_replicas(1, Duration::from_millis(100), WaitTimeout::Deny);
    }
    builder.connect_sentinel(&urls, SERVICE).unwrap()
}

/// The primary and replica ports, and the replica's process.
struct Pair {
    old: u16,
    replica: u16,
    replica_pid: u32,
}

fn pair(topology: &mut Sentinels) -> Pair {
    let old = topology.primary_port().expect("the sentinels name a primary");
    let replica = topology.nodes.iter().map(|n| n.port).find(|p| *p != old).unwrap();
    let replica_pid = topology.node(replica).unwrap().pid().unwrap();
    Pair { old, replica, replica_pid }
}

/// Lets replication fall behind (see `failover_under_load`): the replica stopped, 64 MB written.
fn start_lag(topology: &mut Sentinels, pair: &Pair) {
    failover::signal(pair.replica_pid, "STOP");
    let mut p = topology.node(pair.old).unwrap().conn();
    let filler = vec![b'x'; 1 << 20];
    for i in 0..64 {
        let _: () = redis::cmd("SET").arg(format!("filler:{i}")).arg(&filler).query(&mut p).unwrap();
    }
}

/// Kills the primary, resumes a stopped replica, and waits until the sentinels promote it; when it
/// was killed, and the replication lag at that moment.
fn kill_and_fail_over(topology: &mut Sentinels, pair: &Pair, label: &str, lagging: bool) -> (Instant, i64) {
    let lag = failover::lag_bytes(&mut topology.node(pair.old).unwrap().conn());
    let killed_at = Instant::now();
    topology.node(pair.old).unwrap().kill();
    if lagging {
        failover::signal(pair.replica_pid, "CONT");
    }
    let new = tokio::task::block_in_place(|| {
        topology.wait_failover(pair.old, Duration::from_millis(DOWN_AFTER_MS + 3 * FAILOVER_TIMEOUT_MS))
    })
    .expect("the sentinels promote the replica");
    assert_eq!(new, pair.replica);
    eprintln!("{label}: the sentinels named the new primary {:?} after the kill", killed_at.elapsed());
    (killed_at, lag)
}

/// Kills the primary, with `lagging` after 1.5 s of lag.
async fn kill_primary(topology: &mut Sentinels, label: &str, lagging: bool) -> (Instant, i64) {
    let pair = pair(topology);
    if lagging {
        start_lag(topology, &pair);
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    kill_and_fail_over(topology, &pair, label, lagging)
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
    let (killed_at, lag) = kill_primary(topology, label, lagging).await;
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

/// Concurrency limits across a failover behind a lagging replica: once replication lags, workers of
/// two instances take permits of one key (limit 4) and hold each for 6 s, longer than the outage,
/// counting how many are held at once. The leases granted during the lag are lost with the primary,
/// so the new primary grants their slots again while their holders still work: the excess is the
/// most held at once minus the limit. With `wait_for_replicas` those acquisitions are refused (their
/// leases given back), and the limit holds (with `Deny` and no replica after the failover, nothing
/// more is granted).
async fn lease_failover(topology: &mut Sentinels, label: &str, wait: bool) -> (usize, i64) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const LIMIT: u64 = 4;
    let instances = [limiter(topology, wait), limiter(topology, wait)];
    let policy = Policy::concurrency(LIMIT, Duration::from_secs(30)).unwrap();
    let (held, most) = (std::sync::Arc::new(AtomicUsize::new(0)), std::sync::Arc::new(AtomicUsize::new(0)));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Leases are taken only once replication lags: granted by the old primary, never replicated.
    for l in &instances {
        let warm = Policy::token_bucket(1, 1.0).unwrap();
        assert!(
            !l.check("rl:lease-failover:warm", &warm, 0).await.degraded,
            "the limiter reaches the primary"
        );
    }
    let pair = pair(topology);
    start_lag(topology, &pair);
    let mut workers = vec![];
    for limiter in &instances {
        for _ in 0..4 {
            let (limiter, policy, held, most, stop) =
                (limiter.clone(), policy.clone(), held.clone(), most.clone(), stop.clone());
            workers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match limiter.acquire("rl:{lease-failover}:exports", &policy, 1).await {
                        redis_ratelimit_client::Acquired::Granted(permit) => {
                            let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_secs(6)).await;
                            held.fetch_sub(1, Ordering::SeqCst);
                            let _ = permit.release().await;
                        }
                        _ => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(most.load(Ordering::SeqCst) as u64 <= LIMIT, "{label}: before the failover the limit holds");
    let (_, lag) = kill_and_fail_over(topology, &pair, label, true);
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    eprintln!(
        "{label}: at most {most} permits held at once for a limit of {LIMIT} (excess {}); replication lag at the kill {lag} bytes",
        most.saturating_sub(LIMIT as usize)
    );
    (most.saturating_sub(LIMIT as usize), lag)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_lost_in_a_lagging_failover_over_admit_and_waiting_bounds_them() {
    let Some(mut topology) = Sentinels::start() else { return };
    let (excess, lag) = lease_failover(&mut topology, "leases, replica 1.5 s behind", false).await;
    assert!(lag > 1 << 20, "the replica was behind at the kill: {lag} bytes");
    assert!(excess > 0, "the leases granted during the lag were granted again");
    let Some(mut topology) = Sentinels::start() else { return };
    let (excess, _) =
        lease_failover(&mut topology, "leases, replica 1.5 s behind, wait_for_replicas(1)", true).await;
    assert_eq!(excess, 0, "no lease was granted twice");
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
    wait_until("the old primary to be a replica", async || {
        testkit::info_field(&mut demoted, "replication", "role").as_deref() == Some("slave")
    })
    .await;
    let (mut first_redis, mut outages) = (None, 0);
    wait_until("the limiter to re-resolve the primary", async || {
        let d = limiter.check("rl:sentinel:ro", &policy, 1).await;
        if d.degraded {
            outages += 1;
            assert!(!d.allowed, "closed: a READONLY answer is an outage, decided by the policy");
        }
        first_redis = Some(d).filter(|d| !d.degraded);
        first_redis.is_some()
    })
    .await;
    let d = first_redis.unwrap();
    assert!(outages >= 1, "the limiter's first call met the demoted primary's READONLY");
    assert_eq!(d.remaining, 3, "the bucket carried on on the new primary (port {new}): {d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readonly_counts_against_the_breaker_on_a_single_server_too() {
    let Some(primary) = testkit::Server::builder().own() else { return };
    let port = primary.port.to_string();
    let replica = testkit::Server::builder().args(&["--replicaof", "127.0.0.1", &port]).start();
    let limiter = support::builder(FailurePolicy::Closed)
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
