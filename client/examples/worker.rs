//! The workers' example of docs/client.md as a complete program (`cargo run --release -p
//! redis-ratelimit-client --example worker`, with a module-enabled Redis at `REDIS_URL`; run several
//! at once: they share one upstream quota). The region between the `readme:worker` markers is shown
//! in the guide verbatim (`tests/readme.rs`); `tests/examples.rs` runs `drain` against a real server.

// [readme:worker]
use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
use std::error::Error;
use std::time::Duration;

/// Sends `queue` to the upstream in batches of up to 5, as fast as the upstream's quota allows: 20
/// calls a second, bursts of 5, shared by every worker through one key. Workers are served in the
/// order they ask, one Redis call per batch. Returns the batches sent.
pub async fn drain(limiter: &Limiter, queue: &mut Vec<u32>) -> Result<usize, Box<dyn Error>> {
    let upstream = Policy::token_bucket(5, 20.0)?;
    let mut batches = 0;
    while !queue.is_empty() {
        let max = queue.len().min(5) as u64;
        // At least one token, and up to max when the bucket holds them, reserved in one call: it
        // sleeps until they may be used, in turn with the other workers. Never an error: when Redis
        // cannot decide, the failure policy does (`batch.decision.degraded`).
        let batch = limiter.take_within("rl:upstream:crm", &upstream, 1, max, Duration::from_secs(10)).await;
        if batch.taken == 0 {
            // Denied by the failure policy during an outage: try again in a second.
            tokio::time::sleep(batch.decision.retry_after.unwrap_or(Duration::from_secs(1))).await;
            continue;
        }
        let jobs: Vec<u32> = queue.drain(..batch.taken as usize).collect();
        call_upstream(&jobs).await;
        batches += 1;
    }
    Ok(batches)
}

async fn call_upstream(batch: &[u32]) {
    println!("sent {batch:?}");
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    // Three workers share the quota: during an outage each keeps to a third of it.
    let limiter = Limiter::builder(FailurePolicy::LocalFallback { instances: 3 }).connect(&redis)?;
    limiter.verify().await?;
    let mut queue: Vec<u32> = (1..=40).collect();
    let batches = drain(&limiter, &mut queue).await?;
    println!("40 jobs in {batches} batches");
    Ok(())
}
// [/readme:worker]
