//! Load across a failover, and what it over-admits: workers on several limiter instances make
//! decisions on keys of known capacity and rate until stopped; afterwards, the requests allowed per
//! key beyond what the limit allows over the span (`capacity + rate * span`).

use redis_ratelimit_client::{Limiter, Policy};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const KEYS: usize = 8;
pub const CAPACITY: u64 = 20;
/// Tokens per second: a few seconds of outage refill a few tokens, so a bucket that carried on is
/// told apart from a fresh one.
pub const RATE: f64 = 2.0;

#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub at: Instant,
    pub key: usize,
    pub allowed: bool,
    pub degraded: bool,
    pub remaining: u64,
}

/// Workers running until `stop`.
pub struct Load {
    pub start: Instant,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

/// Four workers per limiter, each calling every 4 ms on `KEYS` keys named `key(i)`.
pub fn start(limiters: &[Limiter], key: impl Fn(usize) -> String) -> Load {
    let policy = Policy::token_bucket(CAPACITY, RATE).unwrap();
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(key).collect());
    let (seen, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
    let mut workers = vec![];
    for (i, limiter) in limiters.iter().enumerate() {
        for w in 0..4 {
            let (limiter, policy, seen, stop, keys) =
                (limiter.clone(), policy.clone(), seen.clone(), stop.clone(), keys.clone());
            workers.push(tokio::spawn(async move {
                let mut n = i * 4 + w;
                while !stop.load(Ordering::Relaxed) {
                    let key = n % KEYS;
                    n += 1;
                    let d = limiter.check(&keys[key], &policy, 1).await;
                    let s = Seen {
                        at: Instant::now(),
                        key,
                        allowed: d.allowed,
                        degraded: d.degraded,
                        remaining: d.remaining,
                    };
                    seen.lock().unwrap().push(s);
                    tokio::time::sleep(Duration::from_millis(4)).await;
                }
            }));
        }
    }
    Load { start: Instant::now(), seen, stop, workers }
}

impl Load {
    pub async fn stop(self) -> (Instant, Vec<Seen>) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            w.await.unwrap();
        }
        let seen = self.seen.lock().unwrap().clone();
        (self.start, seen)
    }
}

/// Per key, the requests allowed beyond `capacity + rate * span` over the whole run.
pub fn excess(start: Instant, seen: &[Seen]) -> Vec<u64> {
    let end = seen.iter().map(|s| s.at).max().unwrap();
    let allowed_by_limit = (CAPACITY as f64 + RATE * (end - start).as_secs_f64()).ceil();
    (0..KEYS)
        .map(|k| {
            let allowed = seen.iter().filter(|s| s.key == k && s.allowed).count() as f64;
            (allowed - allowed_by_limit).max(0.0) as u64
        })
        .collect()
}

/// The checks every failover run must pass, and its report line: every degraded decision denied
/// (a closed policy), Redis deciding again within `bound` of the kill, each key's first decision
/// afterwards far from full (its bucket carried on). Returns the excess per key.
pub fn check(
    label: &str,
    start: Instant,
    seen: &[Seen],
    killed_at: Instant,
    lag_bytes: i64,
    bound: Duration,
) -> Vec<u64> {
    let degraded = seen.iter().filter(|s| s.degraded).count();
    assert!(
        seen.iter().filter(|s| s.degraded).all(|s| !s.allowed),
        "{label}: every degraded decision is denied"
    );
    // The first decision from Redis after the outage the kill caused.
    let outage_start = seen.iter().filter(|s| s.at > killed_at && s.degraded).map(|s| s.at).min();
    let back = seen
        .iter()
        .filter(|s| outage_start.is_some_and(|o| s.at > o) && !s.degraded)
        .map(|s| s.at)
        .min()
        .expect("decisions from Redis after the failover");
    let outage = back - killed_at;
    assert!(outage < bound, "{label}: Redis decided again {outage:?} after the kill (bound {bound:?})");
    for k in 0..KEYS {
        let first =
            seen.iter().find(|s| s.key == k && s.at >= back && !s.degraded).expect("a decision per key");
        // Carried on: no more tokens than the bucket held before the kill plus what it refilled since;
        // a fresh bucket would hold CAPACITY - 1 after this call. A slow failover refills more, so the
        // bound follows the time it took. A replica that was behind (the lagging runs: 1.5 s of
        // writes held back) carries on from 2 s before the kill.
        let lost = if lag_bytes > 64 << 10 { Duration::from_secs(2) } else { Duration::ZERO };
        let before = seen
            .iter()
            .filter(|s| s.key == k && s.at + lost <= killed_at && !s.degraded)
            .max_by_key(|s| s.at)
            .expect("a decision per key before the kill");
        let refilled = RATE * (first.at - before.at).as_secs_f64();
        let bound = (before.remaining as f64 + refilled).floor() as u64 + 1;
        assert!(
            first.remaining <= bound,
            "{label}: key {k} carried on: {first:?} after {before:?} (at most {bound} tokens)"
        );
    }
    let excess = excess(start, seen);
    let span = (seen.iter().map(|s| s.at).max().unwrap() - start).as_secs_f64();
    eprintln!(
        "{label}: Redis decided again {outage:?} after the kill; {degraded} degraded decisions (all denied); \
         replication lag at the kill {lag_bytes} bytes; over-admitted per key {excess:?}, {} in total \
         ({} allowed over {span:.1} s on {KEYS} keys of capacity {CAPACITY} at {RATE}/s)",
        excess.iter().sum::<u64>(),
        seen.iter().filter(|s| s.allowed).count(),
    );
    excess
}

/// The replication lag of a primary (its offset against its first replica's last acknowledged).
pub fn lag_bytes(primary: &mut testkit::redis::Connection) -> i64 {
    let offset: i64 =
        testkit::info_field(primary, "replication", "master_repl_offset").unwrap().parse().unwrap();
    let slave0 = testkit::info_field(primary, "replication", "slave0").unwrap_or_default();
    let acked: i64 = slave0
        .split(',')
        .find_map(|f| f.strip_prefix("offset="))
        .and_then(|o| o.parse().ok())
        .unwrap_or(offset);
    offset - acked
}

/// Sends `signal` (`STOP`, `CONT`) to a process.
pub fn signal(pid: u32, signal: &str) {
    let status =
        std::process::Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}
