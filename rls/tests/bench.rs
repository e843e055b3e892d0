//! ShouldRateLimit throughput and p99 at a fixed concurrency: this service on the module and on the
//! Lua library against envoyproxy/ratelimit on the same Redis, interleaved rounds, the median written
//! to docs/bench-rls.md. Not run by `make test`: `rls/scripts/peer.sh bench` (which builds
//! envoyproxy/ratelimit from a fetched snapshot) runs it with `--ignored`.

mod support;

use redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis_ratelimit_rls::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::peer::{self, Peer};
use support::{descriptor, domain, Rls};
use testkit::Server;

const TASKS: usize = 32;
const CONNECTIONS: usize = 4;
const ROUND: Duration = Duration::from_secs(3);
const ROUNDS: usize = 3;

fn config(d: &str) -> String {
    format!(
        "domain: {d}\ndescriptors:\n  - key: remote_address\n    rate_limit: {{unit: hour, requests_per_unit: 1000000000}}\n  - key: tenant\n    rate_limit: {{unit: hour, requests_per_unit: 1000000000}}\n"
    )
}

/// One round against `addr`: (requests per second, p50, p99).
async fn round(addr: SocketAddr, d: &str) -> (f64, Duration, Duration) {
    let mut channels = vec![];
    for _ in 0..CONNECTIONS {
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}")).unwrap();
        channels.push(channel.connect().await.unwrap());
    }
    let end = Instant::now() + ROUND;
    let mut tasks = vec![];
    for t in 0..TASKS {
        let mut client = RateLimitServiceClient::new(channels[t % CONNECTIONS].clone());
        let d = d.to_string();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(20_000);
            let mut n = 0u64;
            while Instant::now() < end {
                let ip = format!("10.0.{t}.{}", n % 200);
                let request = RateLimitRequest {
                    domain: d.clone(),
                    descriptors: vec![descriptor(&[("remote_address", &ip)]), descriptor(&[("tenant", "t")])],
                    hits_addend: 1,
                };
                let start = Instant::now();
                let r = client.should_rate_limit(request).await;
                latencies.push(start.elapsed());
                assert_eq!(r.map(|r| r.into_inner().overall_code).ok(), Some(1), "every request OK");
                n += 1;
            }
            latencies
        }));
    }
    let mut all = vec![];
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    (all.len() as f64 / ROUND.as_secs_f64(), at(0.50), at(0.99))
}

/// This service's own binary, a process of its own as envoyproxy/ratelimit's is (not inside the load
/// generator's runtime), reading `dir/config`; killed when dropped.
struct Ours {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Drop for Ours {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn ours(redis: &str, dir: &std::path::Path) -> Ours {
    let (grpc, http) = (free_port(), free_port());
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_redis-ratelimit-rls"))
        .env_clear()
        .envs([
            ("REDIS_URL", redis.to_string()),
            ("RUNTIME_ROOT", dir.display().to_string()),
            ("GRPC_HOST", "127.0.0.1".into()),
            ("GRPC_PORT", grpc.to_string()),
            ("HOST", "127.0.0.1".into()),
            ("PORT", http.to_string()),
            ("RLS_DEADLINE_MS", "2000".into()),
            ("LOG_LEVEL", "warn".into()),
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ours = Ours { child, addr: format!("127.0.0.1:{grpc}").parse().unwrap() };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !matches!(reqwest::get(format!("http://127.0.0.1:{http}/healthcheck")).await, Ok(r) if r.status() == 200)
    {
        assert!(Instant::now() < deadline, "the service did not become healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ours
}

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: rls/scripts/peer.sh bench"]
async fn bench_against_envoyproxy_ratelimit() {
    let Some(binary) = peer::binary() else { return };
    let Some(module) = Server::builder().own() else { return };
    let Some(stock) = Server::builder().stock().own() else { return };
    let deadline = [("RLS_DEADLINE_MS", "2000")];
    // The in-process services only write the configuration directories both read.
    let d_module = domain("bench-module");
    let ours_module = Rls::start(module.url(), &config(&d_module), &deadline).await;
    let bin_module = ours(module.url(), &ours_module.dir).await;
    let theirs_module =
        Peer::start(&binary, &format!("127.0.0.1:{}", module.port), &ours_module.dir, &[]).await;
    let d_stock = domain("bench-stock");
    let ours_stock = Rls::start(stock.url(), &config(&d_stock), &deadline).await;
    let bin_stock = ours(stock.url(), &ours_stock.dir).await;
    let theirs_stock = Peer::start(&binary, &format!("127.0.0.1:{}", stock.port), &ours_stock.dir, &[]).await;
    // envoyproxy/ratelimit's implicit pipelining (REDIS_PIPELINE_WINDOW / LIMIT), as its README
    // suggests for throughput.
    let theirs_pipelined = Peer::start(
        &binary,
        &format!("127.0.0.1:{}", module.port),
        &ours_module.dir,
        &[("REDIS_PIPELINE_WINDOW", "150us"), ("REDIS_PIPELINE_LIMIT", "8")],
    )
    .await;
    let targets: Vec<(&str, SocketAddr, &str)> = vec![
        ("this service, module (RL.ALL)", bin_module.addr, &d_module),
        ("envoyproxy/ratelimit, same Redis", theirs_module.grpc, &d_module),
        ("envoyproxy/ratelimit, pipelined (150us, 8)", theirs_pipelined.grpc, &d_module),
        ("this service, Lua library (stock Redis)", bin_stock.addr, &d_stock),
        ("envoyproxy/ratelimit, that stock Redis", theirs_stock.grpc, &d_stock),
    ];
    // Warm-up, then interleaved rounds.
    for (_, addr, d) in &targets {
        let _ = tokio::time::timeout(Duration::from_secs(5), round(*addr, d)).await;
    }
    let mut results: Vec<Vec<(f64, Duration, Duration)>> = vec![vec![]; targets.len()];
    for _ in 0..ROUNDS {
        for (i, (_, addr, d)) in targets.iter().enumerate() {
            results[i].push(round(*addr, d).await);
        }
    }
    let rows: Vec<(f64, Duration, Duration)> = results
        .iter()
        .map(|r| {
            (
                median(r.iter().map(|x| x.0).collect()),
                median(r.iter().map(|x| x.1).collect()),
                median(r.iter().map(|x| x.2).collect()),
            )
        })
        .collect();
    let mut page =
        String::from("<!-- generated by rls/tests/bench.rs (rls/scripts/peer.sh bench); do not edit -->\n");
    page.push_str("# The rate limit service against envoyproxy/ratelimit\n\n");
    page.push_str(&format!(
        "`ShouldRateLimit` at a fixed concurrency: {TASKS} tasks over {CONNECTIONS} gRPC connections (tonic), each request two descriptors (an address of 200 per task, one tenant), every answer OK; {ROUNDS} interleaved rounds of {} s per target after a warm-up, the median of each column. Both services are processes of their own (this one the release binary), on the same Redis (one redis-server 7.0 with the module, one stock), the same configuration file, their default settings (this service: `RLS_COMBINE=atomic`, one RL.ALL per request; envoyproxy/ratelimit: one INCRBY and EXPIRE per descriptor, without and with its implicit pipelining). envoyproxy/ratelimit built from its repository at the commit in `~/.cache/redis-ratelimit/rls-peer/commit`.\n\n",
        ROUND.as_secs()
    ));
    page.push_str("Measured on the 2-core development machine, shared with other agents' builds and tests while it ran; the load generator, the services and Redis on the same 2 cores. The ratios are what to read; the absolute numbers move with the machine's load.\n\n");
    page.push_str("| target | requests/s | p50 ms | p99 ms |\n| --- | ---: | ---: | ---: |\n");
    for ((name, _, _), (rps, p50, p99)) in targets.iter().zip(&rows) {
        page.push_str(&format!("| {name} | {rps:.0} | {} | {} |\n", ms(*p50), ms(*p99)));
    }
    let ratio = |a: usize, b: usize| rows[a].0 / rows[b].0;
    page.push_str(&format!(
        "\nGoals (issue 37): on the module at least 2x envoyproxy/ratelimit's requests/s with a lower p99; on the Lua library at least 1.0x.\n\n- module: {:.2}x its requests/s on the same Redis (p99 {} against {} ms); {:.2}x its pipelined configuration (p99 {} ms): {}\n- library: {:.2}x its requests/s on the stock Redis (p99 {} against {} ms): {}\n",
        ratio(0, 1),
        ms(rows[0].2),
        ms(rows[1].2),
        ratio(0, 2),
        ms(rows[2].2),
        if ratio(0, 1) >= 2.0 && rows[0].2 < rows[1].2 { "met" } else { "not met" },
        ratio(3, 4),
        ms(rows[3].2),
        ms(rows[4].2),
        if ratio(3, 4) >= 1.0 { "met" } else { "not met" },
    ));
    println!("{page}");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/bench-rls.md");
    std::fs::write(path, page).unwrap();
}
