//! `make bench`, part two: what the HTTP middleware costs. A trivial axum handler served bare and
//! behind `RateLimitLayer` (one RL.TOKEN per request on a local module-enabled redis-server, random
//! callers over 100,000 keys), loaded by wrk with 50 connections; median of 3 interleaved runs.
//! Writes `docs/bench-middleware.md` and prints it.

use axum::routing::get;
use axum::Router;
use redis_ratelimit_client::http::{Caller, RateLimitLayer};
use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
use std::net::SocketAddr;
use std::process::Command;
use testkit::Server;

const CONNECTIONS: usize = 50;

/// wrk picks a random caller per request.
const RANDOM_CALLER: &str = r#"
request = function()
  return wrk.format("GET", "/", { ["x-user"] = tostring(math.random(1, 100000)) })
end
"#;

struct Run {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// This process's CPU time per request (the application: wrk and Redis are other processes), us.
    user_us: f64,
    system_us: f64,
}

/// This process's user and system CPU time so far, in microseconds (getrusage).
fn cpu_us() -> (f64, f64) {
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is always valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    (us(usage.ru_utime), us(usage.ru_stime))
}

fn app(limited: Option<Limiter>) -> Router {
    let router = Router::new().route("/", get(|| async { "ok" }));
    match limited {
        None => router,
        Some(limiter) => router.layer(
            RateLimitLayer::new(limiter)
                .route("api", "/", Policy::token_bucket(1000, 1000.0).expect("a valid policy"))
                .caller_fn(|parts, _| {
                    let user =
                        parts.headers.get("x-user").and_then(|v| v.to_str().ok()).unwrap_or("anonymous");
                    Caller::Principal(user.to_string())
                }),
        ),
    }
}

fn serve(runtime: &tokio::runtime::Runtime, app: Router) -> SocketAddr {
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let addr = listener.local_addr().expect("an address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    })
}

fn wrk(addr: SocketAddr, script: &std::path::Path, seconds: u64) -> Run {
    let (user_before, system_before) = cpu_us();
    let out = Command::new("wrk")
        .args(["-t2", &format!("-c{CONNECTIONS}"), &format!("-d{seconds}s"), "--latency", "-s"])
        .arg(script)
        .arg(format!("http://{addr}/"))
        .output()
        .expect("wrk is missing (make bench installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {prefix} in wrk output: {text}"))
    };
    let ms = |s: &str| {
        let (number, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
        let n: f64 = number.parse().unwrap_or(f64::NAN);
        match unit {
            "us" => n / 1000.0,
            "s" => n * 1000.0,
            _ => n,
        }
    };
    let (user, system) = cpu_us();
    let requests: f64 = text
        .lines()
        .find_map(|l| l.trim().split_once(" requests in").map(|(n, _)| n.trim().parse().unwrap_or(f64::NAN)))
        .unwrap_or(f64::NAN);
    Run {
        rps: field("Requests/sec:").parse().unwrap_or(f64::NAN),
        p50_ms: ms(field("50%")),
        p99_ms: ms(field("99%")),
        user_us: (user - user_before) / requests,
        system_us: (system - system_before) / requests,
    }
}

fn median(mut runs: Vec<Run>) -> Run {
    runs.sort_by(|a, b| a.rps.total_cmp(&b.rps));
    runs.swap_remove(runs.len() / 2)
}

/// One runtime configuration's medians: bare, limited, the layer without the round trip, and Redis'
/// commands per socket read.
fn measure(server: &Server, workers: usize, seconds: u64, script: &std::path::Path) -> (Run, Run, Run, f64) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a runtime");
    let limiter = runtime
        .block_on(async { Limiter::builder(FailurePolicy::Open).connect(server.url()).expect("a limiter") });
    let bare = serve(&runtime, app(None));
    let limited = serve(&runtime, app(Some(limiter.clone())));
    // The layer's own cost without the round trip: Redis unreachable, the breaker open, failing open.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a port");
    let offline = runtime.block_on(async {
        Limiter::builder(FailurePolicy::Open)
            .breaker(1, std::time::Duration::from_secs(3600))
            .connect(&format!("redis://{closed}/"))
            .expect("a limiter")
    });
    let offline_addr = serve(&runtime, app(Some(offline)));
    let mut con = server.conn();
    let mut stat = |name: &str| {
        testkit::info_field(&mut con, "stats", name).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN)
    };
    let (commands_before, reads_before) = (stat("total_commands_processed"), stat("total_reads_processed"));
    let (mut bare_runs, mut limited_runs, mut offline_runs) = (vec![], vec![], vec![]);
    for _ in 0..3 {
        bare_runs.push(wrk(bare, script, seconds));
        limited_runs.push(wrk(limited, script, seconds));
        offline_runs.push(wrk(offline_addr, script, seconds));
    }
    let per_read =
        (stat("total_commands_processed") - commands_before) / (stat("total_reads_processed") - reads_before);
    runtime.shutdown_background();
    (median(bare_runs), median(limited_runs), median(offline_runs), per_read)
}

fn main() {
    let seconds: u64 = std::env::var("RL_BENCH_HTTP_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let server = Server::builder().args(&["--appendonly", "no"]).start();
    let script = std::env::temp_dir().join(format!("rl-bench-{}.lua", std::process::id()));
    std::fs::write(&script, RANDOM_CALLER).expect("a temp file");
    let mut report = format!(
        "# The HTTP middleware's cost\n\n\
         A trivial axum handler, bare and behind `RateLimitLayer` (one RL.TOKEN per request, random callers over \
         100,000 keys, all allowed), wrk with {CONNECTIONS} connections and 2 threads for {seconds} s, median of 3 \
         interleaved runs; server, Redis and wrk share this machine ({}). The application's tokio runtime with 2 \
         worker threads, then with 1.\n",
        cores()
    );
    for workers in [2, 1] {
        let (bare, limited, offline, per_read) = measure(&server, workers, seconds, &script);
        report += &format!(
            "\n## {workers} worker thread(s)\n\n\
             | handler | requests/s | p50 | p99 | app CPU per request: user | system |\n| --- | ---: | ---: | ---: | ---: | ---: |\n\
             | bare | {:.0} | {:.2} ms | {:.2} ms | {:.1} us | {:.1} us |\n\
             | with the rate limit layer | {:.0} | {:.2} ms | {:.2} ms | {:.1} us | {:.1} us |\n\
             | the layer without the round trip (breaker open, failing open) | {:.0} | {:.2} ms | {:.2} ms | {:.1} us | {:.1} us |\n\n\
             With the layer: **{:.0}%** of the bare handler's throughput (target >= 70%); it adds {:.2} ms at p50 \
             and {:.2} ms at p99. Redis read {per_read:.1} commands per socket read (the client's multiplexed \
             connection pipelines concurrent requests).\n",
            bare.rps,
            bare.p50_ms,
            bare.p99_ms,
            bare.user_us,
            bare.system_us,
            limited.rps,
            limited.p50_ms,
            limited.p99_ms,
            limited.user_us,
            limited.system_us,
            offline.rps,
            offline.p50_ms,
            offline.p99_ms,
            offline.user_us,
            offline.system_us,
            100.0 * limited.rps / bare.rps,
            limited.p50_ms - bare.p50_ms,
            limited.p99_ms - bare.p99_ms,
        );
    }
    let _ = std::fs::remove_file(&script);
    println!("{report}");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/bench-middleware.md");
    std::fs::write(&path, report).expect("cannot write docs/bench-middleware.md");
}

fn cores() -> String {
    format!("{} cores", std::thread::available_parallelism().map_or(0, |n| n.get()))
}
