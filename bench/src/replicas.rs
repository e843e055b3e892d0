//! What `wait_for_replicas` costs a decision: a primary with one replica on loopback, the client
//! crate's limiter with and without `wait_for_replicas(1, 100 ms)`, 16 tasks making decisions on
//! random keys (each allowed, so each writes and waits), interleaved runs; latency per decision as
//! the application sees it (p50, p99) and decisions per second. Writes docs/bench-replicas.md.

use redis_ratelimit_client::{FailurePolicy, Limiter, Policy, WaitTimeout};
use std::fmt::Write as _;
use std::time::{Duration, Instant};
use testkit::{info_field, wait_until, Server};

const TASKS: usize = 16;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn run_once(limiter: &Limiter, per_task: usize, prefix: &str) -> (Vec<Duration>, Duration) {
    let policy = Policy::token_bucket(1_000_000, 1.0).expect("a valid policy");
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (limiter, policy, prefix) = (limiter.clone(), policy.clone(), prefix.to_string());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_task);
                for i in 0..per_task {
                    let key = format!("{prefix}:{}", (t * per_task + i) % 10_000);
                    let at = Instant::now();
                    let d = limiter.check(&key, &policy, 1).await;
                    latencies.push(at.elapsed());
                    assert!(d.allowed && !d.degraded, "a decision from Redis: {d:?}");
                }
                latencies
            })
        })
        .collect();
    let mut all = vec![];
    for t in tasks {
        all.extend(t.await.expect("a bench task panicked"));
    }
    (all, started.elapsed())
}

/// Runs the comparison; returns it as Markdown.
pub fn run(scale: f64) -> String {
    let primary = Server::builder().args(&["--appendonly", "no", "--repl-diskless-sync-delay", "0"]).start();
    let port = primary.port.to_string();
    let replica = Server::builder().args(&["--replicaof", "127.0.0.1", &port]).start();
    let mut con = replica.conn();
    wait_until("the replica's link", || {
        info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up")
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    // The connection manager spawns its task on the current runtime.
    let _inside = runtime.enter();
    let per_task = ((2_000.0 * scale) as usize).max(50);
    let repeat = 5;
    let build = |wait: bool| {
        let builder = Limiter::builder(FailurePolicy::Closed).deadline(Duration::from_millis(500));
        let builder = if wait {
            builder.wait_for_replicas(1, Duration::from_millis(100), WaitTimeout::Deny)
        } else {
            builder
        };
        builder.connect(primary.url()).expect("a limiter")
    };
    let variants = [("without waiting", build(false)), ("wait_for_replicas(1, 100 ms)", build(true))];
    // Right after the initial sync the replica has not acknowledged anything yet: wait until a waited
    // decision is acknowledged.
    runtime.block_on(async {
        let policy = Policy::token_bucket(1_000_000, 1.0).expect("a valid policy");
        let deadline = Instant::now() + Duration::from_secs(10);
        while variants[1].1.check("bench:wait:warm", &policy, 1).await.degraded {
            assert!(Instant::now() < deadline, "the replica never acknowledged a write");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut latencies: Vec<Vec<Duration>> = variants.iter().map(|_| vec![]).collect();
    let mut rates: Vec<Vec<f64>> = variants.iter().map(|_| vec![]).collect();
    runtime.block_on(async {
        for round in 0..repeat {
            for (i, (_, limiter)) in variants.iter().enumerate() {
                let (l, took) = run_once(limiter, per_task, &format!("bench:wait:{round}:{i}")).await;
                rates[i].push(l.len() as f64 / took.as_secs_f64());
                latencies[i].extend(l);
            }
        }
    });
    let mut out = String::new();
    let _ = writeln!(out, "# Waiting for replicas\n");
    let _ = writeln!(out, "A primary and one replica on loopback; the client crate's limiter, {TASKS} tasks, {per_task} allowed decisions each per run on random keys, {repeat} interleaved runs; latency as the application sees each decision.\n");
    let _ = writeln!(out, "| limiter | decisions/s (median run) | p50 | p99 |\n| --- | ---: | ---: | ---: |");
    for ((name, _), (mut l, mut r)) in variants.iter().zip(latencies.into_iter().zip(rates)) {
        l.sort();
        r.sort_by(f64::total_cmp);
        let (p50, p99) = (percentile(&l, 0.5), percentile(&l, 0.99));
        let _ = writeln!(out, "| {name} | {:.0} | {p50:.2?} | {p99:.2?} |", r[r.len() / 2]);
        eprintln!("{name:<32} {:>8.0} decisions/s  p50 {p50:.2?}  p99 {p99:.2?}", r[r.len() / 2]);
    }
    out
}
