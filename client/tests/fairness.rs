//! Three worker processes at saturation on one shared quota for 30 s, waiting by reservation
//! (`until_ready`): one Redis call per grant, equal shares, and the aggregate within the bucket's
//! bound at every instant, as the workers measured it. The workers are this test binary run again
//! (`worker_process`), each a process of its own with its own limiter and connection.

mod support;

#[allow(dead_code)] // its main is the program's; the test runs saturate and fairness
#[path = "../examples/saturate.rs"]
mod saturate;

use redis_ratelimit_client::FailurePolicy;
use saturate::{fairness, Mode};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::calls_of;
use testkit::Server;

const WORKER_URL: &str = "FAIRNESS_WORKER_URL";
const RUN: Duration = Duration::from_secs(30);

/// A worker, when this binary is run as one (see below); nothing otherwise.
#[tokio::test]
async fn worker_process() {
    let Ok(url) = std::env::var(WORKER_URL) else { return };
    let limiter = support::builder(FailurePolicy::Closed).connect(&url).unwrap();
    for grant in saturate::saturate(&limiter, "rl:fair:shared", Mode::Reserve, RUN).await {
        println!("grant {grant}");
    }
}

#[test]
fn three_worker_processes_share_one_quota_fairly_with_one_call_per_grant() {
    let Some(server) = Server::builder().own() else { return };
    let me = std::env::current_exe().unwrap();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            Command::new(&me)
                .args(["--exact", "worker_process", "--nocapture", "--test-threads", "1"])
                .env(WORKER_URL, server.url())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let grants: Vec<Vec<i64>> = workers
        .into_iter()
        .map(|w| {
            let out = w.wait_with_output().unwrap();
            assert!(out.status.success(), "a worker failed");
            let text = String::from_utf8(out.stdout).unwrap();
            text.lines().filter_map(|l| l.strip_prefix("grant ")).map(|t| t.parse().unwrap()).collect()
        })
        .collect();
    let made = calls_of(&server, &["rl.reserve", "rl.token"]);
    let f = fairness(&grants, made, Duration::from_secs(10));
    let shares: Vec<usize> = grants.iter().map(Vec::len).collect();
    eprintln!("{f:?}, shares {shares:?}");
    // About capacity + rate x 30 s, all of it used.
    assert!(f.grants >= 550, "the quota was used: {f:?}");
    assert!(f.calls_per_grant <= 1.05, "one call per grant: {f:?}");
    assert!(f.worst_share_spread <= 0.10, "every worker within 10% of a third over 10 s: {f:?} {shares:?}");
    // The workers note a grant when they wake for it, a little after its instant: half a token
    // (25 ms at 20/s) of scheduling delay is allowed.
    assert!(f.worst_excess <= 0.5, "the aggregate stays within capacity + rate x time: {f:?}");
}
