//! The lab scenarios of a distributed limiter (burst, refill, isolation, races, HTTP, outages), whole, against a throwaway module-enabled redis-server: two limiter instances stand
//! for two application servers sharing one Redis (scenarios 1-4), the HTTP middleware on a real
//! socket (5), and Redis unreachable, stopped and hung, with fail open and fail closed, the breaker
//! and recovery (6), and a concurrency limit on slow requests (7); then scenarios 1-4 again on a
//! stock redis-server, where the client chooses the Lua library. Run with `make demo`.

use axum::extract::Path;
use axum::routing::get;
use axum::Router;
use redis_ratelimit_client::http::{limit_key, Caller, RateLimitLayer};
use redis_ratelimit_client::{FailurePolicy, Limiter, Policy};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use testkit::redis;
use testkit::{info_field, Server};

const DEADLINE: Duration = Duration::from_millis(100);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::builder().start();
    let version = info_field(&mut server.conn(), "server", "redis_version").unwrap_or_default();
    println!("redis-server {version} on 127.0.0.1:{} with the ratelimit module\n", server.port);

    // Two application instances share one Redis. Capacity 10, refill 5 tokens a second.
    let policy = Policy::token_bucket(10, 5.0)?;
    let inst_a = Limiter::builder(FailurePolicy::Open).name("a").connect(server.url())?;
    let inst_b = Limiter::builder(FailurePolicy::Open).name("b").connect(server.url())?;
    let instances = [&inst_a, &inst_b];
    // The start-up check: the module answers, and which version it is.
    let module = inst_a.verify().await?;
    let version = module.version.map_or_else(|| "of unknown version".to_string(), |v| v.to_string());
    println!("ratelimit module {version} answers {}\n", module.commands.join(", "));

    lab(&instances, &policy).await?;
    http_scenario(&inst_a, &policy).await?;
    concurrency_scenario(&server).await?;
    outage_scenario(&policy).await?;

    // Scenarios 1-4 again on a server without the module: the Lua library, chosen by the client.
    let stock = Server::builder().stock().start();
    let version = info_field(&mut stock.conn(), "server", "redis_version").unwrap_or_default();
    println!("\nredis-server {version} on 127.0.0.1:{} without the module", stock.port);
    let lua_a = Limiter::builder(FailurePolicy::Open).name("a-lua").connect(stock.url())?;
    let lua_b = Limiter::builder(FailurePolicy::Open).name("b-lua").connect(stock.url())?;
    let engine = lua_a.verify().await?;
    println!("engine: {}\n", engine.why);
    lab(&[&lua_a, &lua_b], &policy).await?;
    Ok(())
}

/// Scenarios 1-4: two instances sharing one Redis, one bucket of capacity 10 refilled 5 a second.
async fn lab(instances: &[&Limiter; 2], policy: &Policy) -> Result<(), Box<dyn std::error::Error>> {
    let inst_a = instances[0];
    // 1. A burst of 12 requests for one key, alternating between the instances.
    let (mut allowed, mut denied) = (0, 0);
    for i in 0..12 {
        let d = instances[i % 2].check("rl:user:ada", policy, 1).await;
        if d.allowed {
            allowed += 1;
        } else {
            denied += 1;
            if denied == 1 {
                // Rounded to 100 ms, so the printed line does not depend on the machine's speed.
                let ms = d.retry_after.unwrap_or_default().as_millis();
                println!("first denial: remaining={} retry_after={}ms", d.remaining, (ms + 50) / 100 * 100);
            }
        }
    }
    println!("burst of 12 across two instances: {allowed} allowed, {denied} denied");

    // 2. Tokens come back at the refill rate.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut allowed = 0;
    for _ in 0..8 {
        allowed += usize::from(inst_a.check("rl:user:ada", policy, 1).await.allowed);
    }
    println!("after one second at 5 tokens/s: {allowed} of 8 allowed");

    // 3. Keys are independent.
    let d = inst_a.check("rl:user:bob", policy, 1).await;
    println!("another key is untouched: allowed={} remaining={}", d.allowed, d.remaining);

    // 4. 200 tasks race for one fresh key, half on each instance.
    let racers: Vec<_> = (0..200)
        .map(|i| {
            let (limiter, policy) = (instances[i % 2].clone(), policy.clone());
            tokio::spawn(async move { limiter.check("rl:user:race", &policy, 1).await.allowed })
        })
        .collect();
    let mut ok = 0;
    for r in racers {
        ok += usize::from(r.await?);
    }
    println!("200 concurrent requests, capacity 10: {ok} allowed");

    Ok(())
}

/// Scenario 7. 20 concurrent slow requests from one client on a route limited to 5 in flight: at most
/// 5 inside the handler at once (counted there), the others 429; when they finish every slot is free;
/// a holder that dies without releasing frees its slot when its lease ends.
async fn concurrency_scenario(server: &Server) -> Result<(), Box<dyn std::error::Error>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    // Fails closed, with a deadline a busy machine does not reach: every answer here is Redis'.
    let limiter = &Limiter::builder(FailurePolicy::Closed)
        .name("jobs")
        .deadline(Duration::from_secs(2))
        .connect(server.url())?;
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let layer = RateLimitLayer::new(limiter.clone())
        .concurrency("export", "/export", Policy::concurrency(5, Duration::from_secs(10))?)
        .caller_fn(|parts, ip| {
            let test_ip = parts.headers.get("x-test-ip").and_then(|v| v.to_str().ok()?.parse().ok());
            test_ip.or(ip).map_or(Caller::Unknown, Caller::Ip)
        })
        .build()?;
    let (handler_inside, handler_most) = (inside.clone(), most.clone());
    let app = Router::new()
        .route(
            "/export",
            get(move || {
                let (inside, most) = (handler_inside.clone(), handler_most.clone());
                async move {
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    "exported"
                }
            }),
        )
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/export", listener.local_addr()?);
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
    });
    let client = reqwest::Client::new();
    let requests: Vec<_> = (0..20)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let resp = client.get(&url).header("x-test-ip", "198.51.100.9").send().await?;
                let status = resp.status().as_u16();
                resp.bytes().await?;
                Ok::<u16, reqwest::Error>(status)
            })
        })
        .collect();
    let (mut ok, mut limited) = (0, 0);
    for r in requests {
        match r.await?? {
            200 => ok += 1,
            _ => limited += 1,
        }
    }
    let lease_key = "rl:{ip:198.51.100.9}:export:concurrency";
    // Each permit is released in the background when its body is gone: give the last ones a moment.
    let mut left: i64 = 1;
    for _ in 0..200 {
        left = redis::cmd("EXISTS").arg(lease_key).query(&mut server.conn())?;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "20 concurrent slow requests, 5 in flight allowed: {ok} served, {limited} got 429, at most {} inside at once; slots held after: {left}",
        most.load(Ordering::SeqCst)
    );
    // A holder that dies holding its slot (it acquired and never released nor renewed).
    let mut con = server.conn();
    let _: Vec<i64> = redis::cmd("RL.ACQUIRE")
        .arg("rl:{job:nightly}:lease")
        .arg(1)
        .arg("2")
        .arg("crashed-worker")
        .query(&mut con)?;
    let policy = Policy::concurrency(1, Duration::from_secs(2))?;
    let while_held = limiter.acquire("rl:{job:nightly}:lease", &policy, 1).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let after = limiter.acquire("rl:{job:nightly}:lease", &policy, 1).await;
    println!(
        "a holder killed without releasing: acquire while its lease runs -> allowed={}; after the lease (2 s) -> allowed={}",
        while_held.decision().allowed,
        after.decision().allowed
    );
    // The scenario's claims, checked: the demo fails when one does not hold.
    let most = most.load(Ordering::SeqCst);
    if most > 5 || ok == 0 || ok + limited != 20 || left != 0 {
        return Err(format!(
            "scenario 7: {most} inside at once, {ok} served, {limited} limited, {left} held after"
        )
        .into());
    }
    if while_held.decision().allowed || !after.decision().allowed {
        return Err("scenario 7: the dead holder's slot was not held for its lease, then freed".into());
    }
    if let Some(permit) = after.permit() {
        permit.release().await?;
    }
    Ok(())
}

/// Scenario 5. The HTTP middleware and its headers, on a real socket, keyed by an
/// IP-like header; then the admin endpoint answers "why is this client limited?".
async fn http_scenario(limiter: &Limiter, policy: &Policy) -> Result<(), Box<dyn std::error::Error>> {
    let layer = RateLimitLayer::new(limiter.clone())
        .route("api", "/", policy.clone())
        .skip("/admin/")
        .caller_fn(|parts, ip| {
            let test_ip = parts.headers.get("x-test-ip").and_then(|v| v.to_str().ok()?.parse().ok());
            test_ip.or(ip).map_or(Caller::Unknown, Caller::Ip)
        })
        .build()?;
    let admin = limiter.clone();
    let admin_policy = policy.clone();
    // Counters of every decision, exported for Prometheus at /metrics.
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/admin/metrics", get(move || std::future::ready(prometheus.render())))
        .route(
            "/admin/ratelimit/{ip}",
            get(move |Path(ip): Path<String>| {
                let (limiter, policy) = (admin.clone(), admin_policy.clone());
                // The client's bucket as RL.INSPECT decodes it, and its recent denials from RL.TOP.
                async move {
                    axum::Json(
                        limiter.report(&limit_key(&format!("rl:{{ip:{ip}}}"), "api", &policy), &policy).await,
                    )
                }
            }),
        )
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
    });
    let client = reqwest::Client::new();
    for i in 1..=12 {
        let resp = client.get(&url).header("x-test-ip", "203.0.113.7").send().await?;
        if [1, 10, 11, 12].contains(&i) {
            let h =
                |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
            println!(
                "request {i:2} -> {} limit={} remaining={:?} retry-after={:?}",
                resp.status().as_u16(),
                h("ratelimit-limit"),
                h("ratelimit-remaining"),
                h("retry-after")
            );
        }
    }
    let view = client.get(format!("{url}admin/ratelimit/203.0.113.7")).send().await?.text().await?;
    println!("GET /admin/ratelimit/203.0.113.7 -> {view}");
    let scraped = client.get(format!("{url}admin/metrics")).send().await?.text().await?;
    for line in scraped.lines().filter(|l| l.starts_with("ratelimit_http_requests_total")) {
        println!("GET /admin/metrics -> {line}");
    }
    Ok(())
}

/// Scenario 6. Redis unreachable: stopped (a closed port) and hung (CLIENT PAUSE), fail open and
/// fail closed; then the breaker, and recovery.
async fn outage_scenario(policy: &Policy) -> Result<(), Box<dyn std::error::Error>> {
    let closed =
        format!("redis://127.0.0.1:{}/", std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port());
    let hung = Server::builder().start();
    for (what, url) in [("stopped", closed.as_str()), ("hung", hung.url())] {
        for failure in [FailurePolicy::Open, FailurePolicy::Closed] {
            let limiter = Limiter::builder(failure).deadline(DEADLINE).connect(url)?;
            // Connect while the server is well, then make it stop answering.
            if what == "hung" {
                limiter.check("rl:warm", policy, 0).await;
                pause(&hung, 2000)?;
            }
            let start = Instant::now();
            let d = limiter.check("rl:user:ada", policy, 1).await;
            let open = failure == FailurePolicy::Open;
            println!(
                "redis {what:<7} failOpen={open:<5} -> allowed={:<5} degraded={} in {} ms (deadline {} ms)",
                d.allowed,
                d.degraded,
                start.elapsed().as_millis(),
                DEADLINE.as_millis()
            );
            unpause(&hung)?;
        }
    }

    let cooldown = Duration::from_secs(1);
    let limiter =
        Limiter::builder(FailurePolicy::Open).deadline(DEADLINE).breaker(3, cooldown).connect(hung.url())?;
    limiter.check("rl:breaker", policy, 0).await;
    pause(&hung, 60_000)?;
    for _ in 0..3 {
        limiter.check("rl:breaker", policy, 1).await;
    }
    let start = Instant::now();
    for _ in 0..100 {
        limiter.check("rl:breaker", policy, 1).await;
    }
    println!(
        "breaker open after 3 timeouts: 100 more requests answered in {:.2} ms in all, {} of them sent to Redis",
        start.elapsed().as_secs_f64() * 1000.0,
        100 - limiter.counts().short_circuited
    );
    unpause(&hung)?;
    tokio::time::sleep(cooldown).await;
    let d = limiter.check("rl:breaker", policy, 1).await;
    println!(
        "redis back: after the {} s cool-down one probe -> allowed={} degraded={}; breaker open={}",
        cooldown.as_secs(),
        d.allowed,
        d.degraded,
        limiter.breaker_open()
    );
    Ok(())
}

fn pause(server: &Server, ms: u64) -> redis::RedisResult<()> {
    redis::cmd("CLIENT").arg("PAUSE").arg(ms).arg("WRITE").query(&mut server.conn())
}

fn unpause(server: &Server) -> redis::RedisResult<()> {
    redis::cmd("CLIENT").arg("UNPAUSE").query(&mut server.conn())
}
