//! High volume (docs/high-volume.md): one hot key checked by two limiter instances ("app instances",
//! each its own connection) under concurrency, per call beside the pre-check and batched units; many
//! keys with a Zipf spread; a hot key on a 3-primary cluster. Calls are the server's own count
//! (INFO commandstats); a check's time is measured around `check` in the caller.

use crate::{commandstat, machine};
use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::cluster::Cluster;
use testkit::redis;
use testkit::Server;

const INSTANCES: usize = 2;
const TASKS: usize = 32;
const BATCH: u64 = 16;

#[derive(Clone, Copy)]
struct Mode {
    name: &'static str,
    precheck: bool,
    batch: bool,
}

const MODES: [Mode; 4] = [
    Mode { name: "per call", precheck: false, batch: false },
    Mode { name: "pre-check", precheck: true, batch: false },
    Mode { name: "batch 16", precheck: false, batch: true },
    Mode { name: "batch 16 + pre-check", precheck: true, batch: true },
];

struct Run {
    decisions: u64,
    admitted: u64,
    local: u64,
    calls: u64,
    seconds: f64,
    p50_us: f64,
    p99_us: f64,
    /// The p99 of the checks decided here (local decisions).
    local_p99_us: f64,
    /// Units still held by the instances when the load stopped (before `close`).
    held: u64,
}

fn limiter(url: &str, precheck: bool) -> Limiter {
    Limiter::builder(FailurePolicy::Closed)
        .deadline(Duration::from_secs(2))
        .local_precheck(precheck)
        .connect(url)
        .expect("a limiter")
}

fn rl_calls(con: &mut redis::Connection) -> u64 {
    ["rl.token", "rl.refund"].iter().map(|c| commandstat(con, c, "calls").unwrap_or(0.0) as u64).sum()
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p) as usize] as f64 / 1000.0
}

/// `INSTANCES` limiters, `TASKS` tasks each, checking keys from `keys` for `seconds`: as fast as they
/// can (`per_second` None: a closed loop at saturation), or paced at `per_second` checks per instance
/// (an open load, as traffic arrives).
async fn load(
    limiters: &[Limiter],
    policy: &Policy,
    keys: Arc<dyn Fn() -> String + Send + Sync>,
    seconds: f64,
    per_second: Option<u64>,
) -> (u64, u64, f64, Vec<u32>, Vec<u32>) {
    let stop = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = vec![];
    for l in limiters {
        for _ in 0..TASKS {
            let (l, policy, stop, admitted, keys) =
                (l.clone(), policy.clone(), stop.clone(), admitted.clone(), keys.clone());
            tasks.push(tokio::spawn(async move {
                let (mut times, mut local) = (Vec::with_capacity(100_000), vec![]);
                // Paced tasks start at random points of their period: arrivals spread, not in step.
                let period = per_second.map(|r| Duration::from_secs_f64(TASKS as f64 / r as f64));
                if let Some(p) = period {
                    tokio::time::sleep(p.mul_f64(fastrand::f64())).await;
                }
                let mut pace = period.map(|p| {
                    let mut i = tokio::time::interval(p);
                    i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                    i
                });
                while !stop.load(Relaxed) {
                    if let Some(p) = pace.as_mut() {
                        p.tick().await;
                    }
                    let key = keys();
                    let t = Instant::now();
                    let d = l.check(&key, &policy, 1).await;
                    let took = t.elapsed().as_nanos().min(u32::MAX as u128) as u32;
                    times.push(took);
                    if d.local {
                        local.push(took);
                    }
                    assert!(!d.degraded, "{d:?}");
                    admitted.fetch_add(u64::from(d.allowed), Relaxed);
                    tokio::task::yield_now().await;
                }
                (times, local)
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Relaxed);
    let (mut times, mut local) = (vec![], vec![]);
    for t in tasks {
        let (all, here) = t.await.unwrap();
        times.extend(all);
        local.extend(here);
    }
    let elapsed = started.elapsed().as_secs_f64();
    times.sort_unstable();
    local.sort_unstable();
    (times.len() as u64, admitted.load(Relaxed), elapsed, times, local)
}

async fn run(
    url: &str,
    mode: Mode,
    policy: &Policy,
    keys: Arc<dyn Fn() -> String + Send + Sync>,
    (seconds, per_second): (f64, Option<u64>),
    held_of: &[String],
) -> Run {
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let policy = if mode.batch {
        policy.clone().batched(BATCH, Duration::from_secs(1)).unwrap()
    } else {
        policy.clone()
    };
    let limiters: Vec<Limiter> = (0..INSTANCES).map(|_| limiter(url, mode.precheck)).collect();
    let before = rl_calls(&mut con);
    let (decisions, admitted, elapsed, times, local_times) =
        load(&limiters, &policy, keys, seconds, per_second).await;
    let held = limiters.iter().map(|l| held_of.iter().map(|k| l.held(k, &policy)).sum::<u64>()).sum();
    let calls = rl_calls(&mut con) - before;
    let local = limiters.iter().map(|l| l.counts().local).sum();
    for l in &limiters {
        l.close().await.expect("held units given back");
    }
    Run {
        decisions,
        admitted,
        local,
        calls,
        seconds: elapsed,
        p50_us: percentile(&times, 0.50),
        p99_us: percentile(&times, 0.99),
        local_p99_us: percentile(&local_times, 0.99),
        held,
    }
}

fn row(out: &mut String, name: &str, r: &Run, bound: Option<f64>) {
    let bound = bound.map_or("-".into(), |b| format!("{b:.0}"));
    let _ = writeln!(
        out,
        "| {name} | {} | {:.0} | {:.3} | {:.0}% | {:.1} | {:.1} | {} | {} | {bound} | {} |",
        r.decisions,
        r.decisions as f64 / r.seconds,
        r.calls as f64 / r.decisions.max(1) as f64,
        100.0 * r.local as f64 / r.decisions.max(1) as f64,
        r.p50_us,
        r.p99_us,
        if r.local == 0 { "-".to_string() } else { format!("{:.1}", r.local_p99_us) },
        r.admitted,
        r.held,
    );
}

const HEADER: &str = "| mode | decisions | per s | Redis calls per decision | local | p50 us | p99 us | p99 us of local decisions | admitted | limit over the run | held at the end |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |";

/// A Zipf(s) sampler over `n` ranks (inverse of the cumulative weights).
fn zipf(n: usize, s: f64) -> impl Fn() -> usize + Send + Sync {
    let mut cumulative = Vec::with_capacity(n);
    let mut total = 0.0;
    for rank in 1..=n {
        total += 1.0 / (rank as f64).powf(s);
        cumulative.push(total);
    }
    move || {
        let x = fastrand::f64() * total;
        cumulative.partition_point(|c| *c < x).min(n - 1)
    }
}

pub fn report(scale: f64) -> String {
    let seconds = (3.0 * scale).max(1.0);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut out = String::new();
    let _ = writeln!(out, "# High volume: the pre-check and batched units\n");
    let _ = writeln!(
        out,
        "{INSTANCES} limiter instances (each its own connection, as two app instances), {TASKS} tasks each \
         checking in a loop for {seconds:.0} s per row, on one module server ({}); calls are the server's \
         count of RL.TOKEN and RL.REFUND; a check's time is measured around `check`; `held at the end` is \
         the units the instances held when the load stopped (given back by `close`). Reproduce with \
         `cargo run --release -p bench --bin rl-bench volume` (part of `make bench`). The rules and bounds: \
         [High volume](high-volume.md).\n",
        machine()
    );
    let server = Server::builder().args(&["--appendonly", "no"]).start();
    let url = server.url().to_string();
    // Under the limit: a bucket that never runs out (every decision could be local).
    let open = Policy::token_bucket(100_000, 1_000_000.0).unwrap();
    // Over the limit: 1,000 tokens, 2,000 a second, far below the demand.
    let (capacity, rate) = (1_000u64, 2_000.0);
    let tight = Policy::token_bucket(capacity, rate).unwrap();
    for (title, policy, bounded, pace) in [
        ("One hot key at 10,000 checks a second per instance, under its limit", &open, false, Some(10_000)),
        ("One hot key at saturation (each task checks again at once), under its limit", &open, false, None),
        ("One hot key at saturation, far over its limit (capacity 1,000, 2,000/s)", &tight, true, None),
    ] {
        let _ = writeln!(out, "## {title}\n\n{HEADER}");
        for mode in MODES {
            let key = format!("rl:bench:hot:{}", fastrand::u64(..));
            let keys: Arc<dyn Fn() -> String + Send + Sync> = {
                let key = key.clone();
                Arc::new(move || key.clone())
            };
            let r = rt.block_on(run(&url, mode, policy, keys, (seconds, pace), std::slice::from_ref(&key)));
            let bound = bounded.then_some(capacity as f64 + rate * r.seconds);
            if let Some(b) = bound {
                assert!(r.admitted as f64 <= b + 1.0, "{}: admitted {} above {b}", mode.name, r.admitted);
            }
            row(&mut out, mode.name, &r, bound);
        }
        let _ = writeln!(out);
    }
    // Many keys, Zipf-spread: 10,000 callers, each a bucket of 1,000 at 100/s.
    let n = 10_000;
    let _ = writeln!(
        out,
        "## 10,000 keys with a Zipf (s = 1.1) spread, each a bucket of 1,000 at 100/s, at saturation\n\n\
         `held at the end`: the units left idle in the instances when the load stopped, over all keys (the \
         bound is {INSTANCES} x 15 per key; an idle key's units go back when its lease ends).\n\n{HEADER}"
    );
    let prefix = format!("rl:bench:zipf:{}:", fastrand::u64(..));
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    let per_key = Policy::token_bucket(1_000, 100.0).unwrap();
    for mode in [MODES[0], MODES[2], MODES[3]] {
        let (pick, names2) = (zipf(n, 1.1), names.clone());
        let keys: Arc<dyn Fn() -> String + Send + Sync> = Arc::new(move || names2[pick()].clone());
        let r = rt.block_on(run(&url, mode, &per_key, keys, (seconds, None), &names));
        row(&mut out, mode.name, &r, None);
    }
    let _ = writeln!(out);
    drop(server);
    // A hot key on a 3-primary cluster: the shard that owns it.
    if let Some(cluster) = Cluster::start() {
        let _ = writeln!(
            out,
            "## One hot key on a 3-primary cluster\n\nThe owner shard's RL.TOKEN and RL.REFUND per second \
             (its own count), {INSTANCES} instances x {TASKS} tasks, bucket under its limit.\n\n\
             | mode | decisions per s | owner shard's calls per s | calls per decision |\n| --- | ---: | ---: | ---: |"
        );
        let urls: Vec<String> = cluster.primaries().iter().map(|s| s.url().to_string()).collect();
        for mode in [MODES[0], MODES[2]] {
            let key = format!("rl:{{bench:hot:{}}}", fastrand::u64(..));
            let owner = cluster.owner(&key);
            let mut con = owner.conn();
            let before = rl_calls(&mut con);
            let policy = if mode.batch {
                open.clone().batched(BATCH, Duration::from_secs(1)).unwrap()
            } else {
                open.clone()
            };
            let (decisions, elapsed) = rt.block_on(async {
                let mut limiters = vec![];
                for _ in 0..INSTANCES {
                    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
                    limiters.push(
                        Limiter::builder(FailurePolicy::Closed)
                            .deadline(Duration::from_secs(2))
                            .connect_cluster(&nodes)
                            .await
                            .expect("a cluster limiter"),
                    );
                }
                let k = key.clone();
                let (decisions, _, elapsed, _, _) =
                    load(&limiters, &policy, Arc::new(move || k.clone()), seconds, None).await;
                for l in &limiters {
                    l.close().await.expect("held units given back");
                }
                (decisions, elapsed)
            });
            let calls = rl_calls(&mut con) - before;
            let _ = writeln!(
                out,
                "| {} | {:.0} | {:.0} | {:.3} |",
                mode.name,
                decisions as f64 / elapsed,
                calls as f64 / elapsed,
                calls as f64 / decisions.max(1) as f64
            );
        }
        let _ = writeln!(out);
    }
    out
}
