//! Workers at saturation on one shared upstream quota (20 calls a second, bursts of 5): each asks for
//! one call at a time, as fast as the quota allows, and notes when it may make it. Run several at
//! once (`cargo run --release -p redis-ratelimit-client --example saturate -- reserve 30`, with a
//! module-enabled Redis at `REDIS_URL`): each prints one `grant <unix ns>` line per call it was
//! given. `reserve` waits with `Limiter::until_ready` (one reservation per grant); `poll` with the
//! loop it replaced (check, sleep `retry_after` plus jitter, check again). `client/tests/fairness.rs`
//! runs three as processes and checks their shares; `make bench` compares the two ways.

use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The shared quota.
pub const CAPACITY: u64 = 5;
pub const RATE: f64 = 20.0;

/// How a worker waits for the quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `until_ready`: one reservation per grant, slept.
    Reserve,
    /// Check, sleep the denial's `retry_after` plus up to a tenth more, check again.
    Poll,
}

impl Mode {
    pub fn parse(text: &str) -> Option<Mode> {
        match text {
            "reserve" => Some(Mode::Reserve),
            "poll" => Some(Mode::Poll),
            _ => None,
        }
    }
}

/// Takes one call of the quota at `key` after another for `run_for`; the instants (Unix ns) at which
/// each was usable.
pub async fn saturate(limiter: &Limiter, key: &str, mode: Mode, run_for: Duration) -> Vec<i64> {
    let quota = Policy::token_bucket(CAPACITY, RATE).expect("a valid quota");
    let end = tokio::time::Instant::now() + run_for;
    let mut grants = vec![];
    while tokio::time::Instant::now() < end {
        let allowed = match mode {
            Mode::Reserve => limiter.until_ready(key, &quota, 1, Duration::from_secs(10)).await.allowed,
            Mode::Poll => poll(limiter, key, &quota).await,
        };
        if allowed {
            grants.push(unix_ns());
        }
    }
    grants
}

/// The polling loop `until_ready` was before reservations.
async fn poll(limiter: &Limiter, key: &str, quota: &Policy) -> bool {
    loop {
        let d = limiter.check(key, quota, 1).await;
        let Some(retry_after) = d.retry_after.filter(|_| !d.allowed && !d.degraded) else {
            return d.allowed;
        };
        let spread = (retry_after / 10).max(Duration::from_millis(1));
        let jitter = Duration::from_nanos(fastrand::u64(0..=spread.as_nanos() as u64));
        tokio::time::sleep(retry_after + jitter).await;
    }
}

fn unix_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// What a run of several workers shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Fairness {
    pub grants: usize,
    /// Redis calls made per grant.
    pub calls_per_grant: f64,
    /// The largest distance of a worker's share from an equal share, over windows of `window`, as a
    /// fraction of the equal share (0.1: within 10%).
    pub worst_share_spread: f64,
    /// The most grants seen in any interval beyond the bucket's bound for it (capacity + rate x its
    /// length): 0 when the aggregate kept within the bound at every instant.
    pub worst_excess: f64,
}

/// Measures a run: each worker's grant instants, the Redis calls they made in all, the windows the
/// shares are compared over (whole windows from the first grant; the last, partial one is left out).
pub fn fairness(workers: &[Vec<i64>], calls: u64, window: Duration) -> Fairness {
    let mut all: Vec<i64> = workers.iter().flatten().copied().collect();
    all.sort_unstable();
    let grants = all.len();
    let (start, end) = (all.first().copied().unwrap_or(0), all.last().copied().unwrap_or(0));
    let window_ns = window.as_nanos() as i64;
    let mut worst_share_spread: f64 = 0.0;
    let mut from = start;
    while from + window_ns <= end {
        let shares: Vec<usize> = workers
            .iter()
            .map(|w| w.iter().filter(|t| (from..from + window_ns).contains(t)).count())
            .collect();
        let equal = shares.iter().sum::<usize>() as f64 / workers.len() as f64;
        for s in shares {
            worst_share_spread = worst_share_spread.max((s as f64 - equal).abs() / equal.max(1.0));
        }
        from += window_ns;
    }
    // Every interval between two grants holds at most capacity + rate x its length.
    let mut worst_excess: f64 = 0.0;
    for (i, first) in all.iter().enumerate() {
        for (n, last) in all[i..].iter().enumerate() {
            let bound = CAPACITY as f64 + RATE * (last - first) as f64 / 1e9;
            worst_excess = worst_excess.max((n + 1) as f64 - bound);
        }
    }
    Fairness {
        grants,
        calls_per_grant: calls as f64 / grants.max(1) as f64,
        worst_share_spread,
        worst_excess,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mode =
        args.next().as_deref().and_then(Mode::parse).ok_or("usage: saturate reserve|poll [seconds]")?;
    let seconds: u64 = args.next().map_or(Ok(30), |s| s.parse())?;
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let limiter = Limiter::builder(FailurePolicy::Closed).connect(&redis)?;
    limiter.verify().await?;
    for grant in saturate(&limiter, "rl:upstream:shared", mode, Duration::from_secs(seconds)).await {
        println!("grant {grant}");
    }
    Ok(())
}
