//! Workers waiting for one shared quota (20/s, bursts of 5): three processes at saturation, each
//! taking one call at a time, waiting by reservation (`until_ready`) or by the polling loop it
//! replaced (check, sleep `retry_after` plus jitter, check again), one after the other on one
//! server: Redis calls per grant (the server's own count), and how far the workers' shares spread.
//! The workers are this binary run again (`rl-bench worker <mode> <url> <seconds>`), and the loop
//! and the measure are `client/examples/saturate.rs`'s.

#[allow(dead_code)] // its main is the program's
#[path = "../../client/examples/saturate.rs"]
mod saturate;

use crate::commandstat;
use redis_ratelimit_client::{FailurePolicy, Limiter};
use saturate::{fairness, Mode};
use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;
use testkit::Server;

const WORKERS: usize = 3;
const KEY: &str = "rl:bench:shared";

/// `rl-bench worker <mode> <url> <seconds>`: one worker; prints `grant <unix ns>` per grant.
pub fn worker(args: &[String]) {
    let [mode, url, seconds] = args else { panic!("usage: rl-bench worker reserve|poll <url> <seconds>") };
    let mode = Mode::parse(mode).expect("reserve or poll");
    let run_for = Duration::from_secs(seconds.parse().expect("seconds"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let limiter = Limiter::builder(FailurePolicy::Closed).connect(url).expect("a limiter");
        for grant in saturate::saturate(&limiter, KEY, mode, run_for).await {
            println!("grant {grant}");
        }
    });
}

/// Both ways side by side, `seconds` each.
pub fn run(scale: f64) -> String {
    let seconds = ((20.0 * scale) as u64).max(5);
    let mut out = String::new();
    let _ = writeln!(out, "# Workers: waiting by reservation and by polling\n");
    let _ = writeln!(
        out,
        "{WORKERS} worker processes at saturation on one token bucket (capacity {}, {}/s) for {seconds} s each \
         way, one grant at a time; calls are the server's count of RL.RESERVE and RL.TOKEN; the spread is \
         the largest distance of a worker's share from a third over 5 s windows. Reproduce with \
         `cargo run --release -p bench --bin rl-bench workers`.\n",
        saturate::CAPACITY,
        saturate::RATE
    );
    let _ = writeln!(
        out,
        "| waiting | grants | calls | calls per grant | share spread | shares | beyond the bound |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: | --- | ---: |");
    for (mode, name) in
        [("poll", "polling (check, sleep retry_after + jitter)"), ("reserve", "reservation (`until_ready`)")]
    {
        let server = Server::builder().args(&["--appendonly", "no"]).start();
        let me = std::env::current_exe().unwrap();
        let workers: Vec<_> = (0..WORKERS)
            .map(|_| {
                Command::new(&me)
                    .args(["worker", mode, server.url(), &seconds.to_string()])
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("a worker process")
            })
            .collect();
        let grants: Vec<Vec<i64>> = workers
            .into_iter()
            .map(|w| {
                let out = w.wait_with_output().expect("a worker's output");
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                text.lines().filter_map(|l| l.strip_prefix("grant ")).filter_map(|t| t.parse().ok()).collect()
            })
            .collect();
        let mut con = server.conn();
        let calls: f64 =
            ["rl.reserve", "rl.token"].iter().filter_map(|c| commandstat(&mut con, c, "calls")).sum();
        let f = fairness(&grants, calls as u64, Duration::from_secs(5));
        let shares: Vec<String> = grants.iter().map(|g| g.len().to_string()).collect();
        let _ = writeln!(
            out,
            "| {name} | {} | {calls:.0} | {:.2} | {:.0}% | {} | {:.1} |",
            f.grants,
            f.calls_per_grant,
            f.worst_share_spread * 100.0,
            shares.join(" / "),
            f.worst_excess
        );
    }
    out
}
