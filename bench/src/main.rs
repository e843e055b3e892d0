//! `make bench`: throughput, latency and memory of the module's commands against the Lua scripts they replace (`lua.rs`)
//! and the cheapest plain Redis commands, on one throwaway module-enabled redis-server.
//!
//! Writes `docs/benchmarks.md` (the tables) and `docs/bench.png` (the chart), and prints the tables.
//! Environment: `RL_BENCH_SCALE` (default 1.0) multiplies the request counts.

mod chart;
mod engines;
mod leases;
mod loadgen;
mod lua;
mod memory;
mod peers;
mod peers_twin;
mod replicas;
mod volume;
mod workers;

use loadgen::{Load, Measured};
use std::fmt::Write as _;
use std::process::Command;
use testkit::redis;
use testkit::{info_field, Server};

const CLIENTS: usize = 50;
const KEYSPACE: u64 = 100_000;

/// How a scenario is driven.
enum Driver {
    /// redis-benchmark with this command line; `{key}` becomes the key, `{sha:token}` / `{sha:slide}`
    /// the loaded scripts.
    Benchmark(&'static str),
    /// The built-in load generator, for requests of several commands.
    LoadGen(loadgen::Request),
}

struct Scenario {
    family: &'static str,
    name: &'static str,
    driver: Driver,
    /// Module settings for this scenario (CONFIG SET before it, back to the defaults after).
    config: &'static [(&'static str, &'static str)],
}

/// The module's defaults, restored after a scenario that changed them.
const DEFAULTS: &[(&str, &str)] = &[("ratelimit.class-stats", "yes")];
const CLASS_STATS_OFF: &[(&str, &str)] = &[("ratelimit.class-stats", "no")];

const MULTI_FIXED: loadgen::Request =
    &[&["MULTI"], &["INCR", "{key}"], &["PEXPIRE", "{key}", "60000", "NX"], &["EXEC"]];

fn scenarios() -> Vec<Scenario> {
    use Driver::*;
    vec![
        Scenario { family: "token", name: "INCR (floor)", driver: Benchmark("INCR {key}"), config: &[] },
        Scenario {
            family: "token",
            name: "RL.TOKEN",
            driver: Benchmark("RL.TOKEN {key} 10 5 1"),
            config: &[],
        },
        Scenario {
            family: "token",
            name: "RL.TOKEN (class stats off)",
            driver: Benchmark("RL.TOKEN {key} 10 5 1"),
            config: CLASS_STATS_OFF,
        },
        Scenario {
            family: "token",
            name: "Lua token bucket",
            driver: Benchmark("EVALSHA {sha:token} 1 {key} 10 5 1"),
            config: &[],
        },
        Scenario {
            family: "slide",
            name: "RL.SLIDE",
            driver: Benchmark("RL.SLIDE {key} 100 60 {id}"),
            config: &[],
        },
        Scenario {
            family: "slide",
            name: "Lua sliding log",
            driver: Benchmark("EVALSHA {sha:slide} 1 {key} 100 60 {id}"),
            config: &[],
        },
        Scenario {
            family: "slide",
            name: "RL.SLIDECOUNT",
            driver: Benchmark("RL.SLIDECOUNT {key} 100 60"),
            config: &[],
        },
        Scenario {
            family: "fixed",
            name: "RL.FIXED",
            driver: LoadGen(&[&["RL.FIXED", "{key}", "100", "60"]]),
            config: &[],
        },
        Scenario {
            family: "fixed",
            name: "MULTI INCR PEXPIRE NX EXEC",
            driver: LoadGen(MULTI_FIXED),
            config: &[],
        },
        Scenario {
            family: "fixed",
            name: "INCR (floor, load generator)",
            driver: LoadGen(&[&["INCR", "{key}"]]),
            config: &[],
        },
    ]
}

struct Row {
    family: &'static str,
    name: &'static str,
    pipeline: usize,
    random: bool,
    result: Measured,
}

fn redis_benchmark(port: u16, command: &str, pipeline: usize, random: bool, requests: usize) -> Measured {
    let mut args: Vec<String> = vec![
        "-p".into(),
        port.to_string(),
        "-c".into(),
        CLIENTS.to_string(),
        "-n".into(),
        requests.to_string(),
        "-P".into(),
        pipeline.to_string(),
        "--csv".into(),
    ];
    if random {
        args.extend(["-r".to_string(), KEYSPACE.to_string()]);
    }
    args.extend(command.split(' ').map(String::from));
    let out = Command::new("redis-benchmark")
        .args(&args)
        .output()
        .expect("redis-benchmark is missing (make bench installs redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    let line =
        text.lines().rev().find(|l| l.starts_with('"') && !l.starts_with("\"test\"")).unwrap_or_else(|| {
            panic!("no result from redis-benchmark {args:?}: {text} {}", String::from_utf8_lossy(&out.stderr))
        });
    let fields: Vec<f64> =
        line.split("\",\"").skip(1).map(|f| f.trim_matches('"').parse().unwrap_or(f64::NAN)).collect();
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    Measured { rps: fields[0], p50_ms: fields[3], p99_ms: fields[5], us_per_call: f64::NAN }
}

impl Scenario {
    /// The command whose server time per call is reported (the first of the request).
    fn command(&self) -> String {
        let first = match &self.driver {
            Driver::Benchmark(template) => template.split(' ').next(),
            Driver::LoadGen(request) => request.first().and_then(|c| c.first()).copied(),
        };
        first.unwrap_or("").to_lowercase()
    }
}

fn configure(con: &mut redis::Connection, settings: &[(&str, &str)]) {
    for (name, value) in settings {
        let _: () =
            redis::cmd("CONFIG").arg("SET").arg(*name).arg(*value).query(con).expect("CONFIG SET failed");
    }
}

/// usec_per_call of `command` in INFO commandstats since the last CONFIG RESETSTAT.
fn us_per_call(con: &mut redis::Connection, command: String) -> f64 {
    commandstat(con, &command, "usec_per_call").unwrap_or(f64::NAN)
}

/// One field (`usec`, `usec_per_call`, `calls`) of `command` in INFO commandstats; None when the
/// command was not called since the last CONFIG RESETSTAT.
pub(crate) fn commandstat(con: &mut redis::Connection, command: &str, field: &str) -> Option<f64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap_or_default();
    let (prefix, field) = (format!("cmdstat_{command}:"), format!("{field}="));
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').find_map(|f| f.strip_prefix(field.as_str())))
        .and_then(|v| v.trim().parse().ok())
}

fn expand(template: &str, random: bool, shas: &[(&str, String)]) -> String {
    let mut s = template.replace("{key}", if random { "bench:__rand_int__" } else { "bench:hot" });
    s = s.replace("{id}", if random { "__rand_int__" } else { "req" });
    for (name, sha) in shas {
        s = s.replace(&format!("{{sha:{name}}}"), sha);
    }
    s
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {cpu}")
}

fn ratio(rows: &[Row], a: &str, b: &str, pipeline: usize, random: bool) -> Option<f64> {
    let find = |name: &str| {
        rows.iter()
            .find(|r| r.name == name && r.pipeline == pipeline && r.random == random)
            .map(|r| r.result.rps)
    };
    Some(find(a)? / find(b)?)
}

fn write_doc(name: &str, text: &str) {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    std::fs::create_dir_all(&docs).expect("cannot create docs/");
    std::fs::write(docs.join(name), text).unwrap_or_else(|e| panic!("cannot write docs/{name}: {e}"));
}

fn main() {
    let scale: f64 = std::env::var("RL_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let args: Vec<String> = std::env::args().collect();
    // `rl-bench worker ...`: one worker process of the workers' comparison.
    if args.get(1).map(String::as_str) == Some("worker") {
        return workers::worker(&args[2..]);
    }
    // `rl-bench engines`: only the Lua library beside the scripts and the module.
    if args.get(1).map(String::as_str) == Some("engines") {
        let report = engines::run(scale);
        println!("{report}");
        write_doc("bench-engines.md", &report);
        return;
    }
    // `rl-bench workers`: only the workers' comparison.
    if args.get(1).map(String::as_str) == Some("workers") {
        let report = workers::run(scale);
        println!("{report}");
        write_doc("bench-workers.md", &report);
        return;
    }
    // `rl-bench leases`: only the concurrency limits beside the Lua semaphore.
    if std::env::args().nth(1).as_deref() == Some("leases") {
        let report = leases::run(scale);
        println!("{report}");
        write_doc("bench-leases.md", &report);
        return;
    }
    // `rl-bench replicas`: only what waiting for replicas costs a decision.
    if std::env::args().nth(1).as_deref() == Some("replicas") {
        let report = replicas::run(scale);
        println!("{report}");
        write_doc("bench-replicas.md", &report);
        return;
    }
    // `rl-bench volume`: only the pre-check and batched units.
    if std::env::args().nth(1).as_deref() == Some("volume") {
        let report = volume::report(scale);
        println!("{report}");
        write_doc("bench-volume.md", &report);
        return;
    }
    // `rl-bench peers`: only the side-by-side table.
    if std::env::args().nth(1).as_deref() == Some("peers") {
        let report = peers::run(scale);
        println!("{report}");
        write_doc("bench-peers.md", &report);
        return;
    }
    let server = Server::builder().args(&["--appendonly", "no"]).start();
    let mut con = server.conn();
    let version = info_field(&mut con, "server", "redis_version").unwrap_or_default();
    let shas: Vec<(&str, String)> = [("token", lua::TOKEN_BUCKET), ("slide", lua::SLIDING_LOG)]
        .iter()
        .map(|(name, body)| {
            (*name, redis::cmd("SCRIPT").arg("LOAD").arg(*body).query(&mut con).expect("SCRIPT LOAD failed"))
        })
        .collect();
    // `rl-bench memory`: only the memory figures (RL_REDIS_SERVER and RL_MODULE choose the server and
    // the module, to compare servers and releases).
    if std::env::args().nth(1).as_deref() == Some("memory") {
        println!("{version}");
        for m in memory::measure(&mut con, &shas) {
            println!("{}: {:.1} B per {}", m.what, m.bytes, m.per);
        }
        return;
    }
    let mut rows = Vec::new();
    // Each configuration runs REPEAT times, the scenarios interleaved so that drift on this shared
    // machine touches them all alike; the median run is reported.
    let repeat: usize =
        std::env::var("RL_BENCH_REPEAT").ok().and_then(|s| s.parse().ok()).unwrap_or(3).max(1);
    for pipeline in [16, 1] {
        for random in [true, false] {
            let mut runs: Vec<Vec<Measured>> = scenarios().iter().map(|_| Vec::new()).collect();
            for _ in 0..repeat {
                for (s, results) in scenarios().iter().zip(runs.iter_mut()) {
                    let base = if pipeline == 16 { 400_000.0 } else { 60_000.0 };
                    let requests = ((base * scale) as usize).max(CLIENTS * pipeline);
                    let _: () = redis::cmd("FLUSHALL").query(&mut con).expect("FLUSHALL failed");
                    configure(&mut con, s.config);
                    let _: () = redis::cmd("CONFIG")
                        .arg("RESETSTAT")
                        .query(&mut con)
                        .expect("CONFIG RESETSTAT failed");
                    let mut result = match &s.driver {
                        Driver::Benchmark(template) => {
                            let command = expand(template, random, &shas);
                            redis_benchmark(server.port, &command, pipeline, random, requests)
                        }
                        Driver::LoadGen(request) => {
                            let keyspace = random.then_some(KEYSPACE);
                            Load {
                                port: server.port,
                                clients: CLIENTS,
                                requests,
                                pipeline,
                                keyspace,
                                vars: vec![],
                            }
                            .run(request)
                        }
                    };
                    result.us_per_call = us_per_call(&mut con, s.command());
                    configure(&mut con, DEFAULTS);
                    results.push(result);
                }
            }
            for (s, mut results) in scenarios().into_iter().zip(runs) {
                results.sort_by(|a, b| a.rps.total_cmp(&b.rps));
                let result = results.swap_remove(results.len() / 2);
                let keys = if random { "random" } else { "hot" };
                eprintln!(
                    "{:<30} P{pipeline:<2} {keys:<6} {:>10.0} req/s (median of {repeat})",
                    s.name, result.rps
                );
                rows.push(Row { family: s.family, name: s.name, pipeline, random, result });
            }
        }
    }
    let memory = memory::measure(&mut con, &shas);
    let report = report(&rows, &memory, &version);
    println!("{report}");
    write_doc("benchmarks.md", &report);
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let title = format!("redis-ratelimit on Redis {version}, {}: 50 clients, random keys", machine());
    match chart::draw(
        &docs.join("bench.png"),
        &title,
        &rows.iter().map(|r| (r.name, r.pipeline, r.random, r.result.rps)).collect::<Vec<_>>(),
    ) {
        Ok(()) => eprintln!("wrote docs/benchmarks.md and docs/bench.png"),
        Err(e) => eprintln!("wrote docs/benchmarks.md; no chart: {e}"),
    }
    drop(con);
    drop(server);
    let leases = leases::run(scale);
    println!("{leases}");
    write_doc("bench-leases.md", &leases);
    let peers = peers::run(scale);
    println!("{peers}");
    write_doc("bench-peers.md", &peers);
    let replicas = replicas::run(scale);
    println!("{replicas}");
    write_doc("bench-replicas.md", &replicas);
    let workers = workers::run(scale);
    println!("{workers}");
    write_doc("bench-workers.md", &workers);
    let engines = engines::run(scale);
    println!("{engines}");
    write_doc("bench-engines.md", &engines);
    let volume = volume::report(scale);
    println!("{volume}");
    write_doc("bench-volume.md", &volume);
}

fn report(rows: &[Row], memory: &[memory::Memory], version: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Benchmarks\n");
    let _ = writeln!(
        out,
        "Redis {version}, {}; {CLIENTS} clients; random keys over {KEYSPACE} keys or one hot key.",
        machine()
    );
    let _ = writeln!(out, "Reproduce with `make bench` (about six minutes). Each figure is the median of 3 interleaved runs (RL_BENCH_REPEAT).");
    let _ = writeln!(out, "Parameters: RL.TOKEN / Lua bucket capacity 10, rate 5/s, cost 1;");
    let _ = writeln!(out, "RL.SLIDE / Lua log / RL.SLIDECOUNT / RL.FIXED limit 100 per 60 s. redis-benchmark drives single commands;");
    let _ = writeln!(out, "the built-in load generator drives MULTI blocks (and RL.FIXED and INCR beside them, so they compare like with like).\n");
    let _ = writeln!(out, "## Throughput and latency\n");
    let _ = writeln!(out, "| family | command | pipeline | keys | req/s | p50 ms | p99 ms | us/call |");
    let _ = writeln!(out, "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |");
    for r in rows {
        let keys = if r.random { "random" } else { "hot" };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {keys} | {:.0} | {:.3} | {:.3} | {:.2} |",
            r.family,
            r.name,
            r.pipeline,
            r.result.rps,
            r.result.p50_ms,
            r.result.p99_ms,
            r.result.us_per_call
        );
    }
    let _ = writeln!(out, "\n## Ratios (pipeline 16, random keys unless said)\n");
    let _ = writeln!(out, "| comparison | ratio | target |");
    let _ = writeln!(out, "| --- | ---: | --- |");
    let targets = [
        ("RL.TOKEN / Lua token bucket", "RL.TOKEN", "Lua token bucket", ">= 2.5"),
        ("RL.TOKEN / INCR", "RL.TOKEN", "INCR (floor)", ">= 0.5"),
        ("RL.TOKEN class stats on / off", "RL.TOKEN", "RL.TOKEN (class stats off)", ">= 0.95"),
        ("RL.SLIDE / Lua sliding log", "RL.SLIDE", "Lua sliding log", ">= 2"),
        ("RL.FIXED / MULTI INCR PEXPIRE", "RL.FIXED", "MULTI INCR PEXPIRE NX EXEC", ""),
        ("RL.FIXED / INCR (load generator)", "RL.FIXED", "INCR (floor, load generator)", ""),
    ];
    for (label, a, b, target) in targets {
        for (random, suffix) in [(true, ""), (false, ", hot key")] {
            if let Some(x) = ratio(rows, a, b, 16, random) {
                let _ = writeln!(out, "| {label}{suffix} | {x:.2} | {} |", if random { target } else { "" });
            }
        }
    }
    let us = |name: &str, random: bool| {
        rows.iter()
            .find(|r| r.name == name && r.pipeline == 16 && r.random == random)
            .map(|r| r.result.us_per_call)
    };
    for (random, suffix) in [(true, ""), (false, ", hot key")] {
        if let (Some(on), Some(off)) = (us("RL.TOKEN", random), us("RL.TOKEN (class stats off)", random)) {
            let _ = writeln!(
                out,
                "| RL.TOKEN server time per call, class stats off / on{suffix} | {:.2} | >= 0.95 |",
                off / on
            );
        }
    }
    let _ = writeln!(out, "\n## Memory\n");
    let _ = writeln!(
        out,
        "used_memory delta divided by the count, 14-character key names, every key with its TTL.\n"
    );
    let _ = writeln!(out, "| what | bytes | per | vs the Lua script | target |");
    let _ = writeln!(out, "| --- | ---: | --- | ---: | --- |");
    for m in memory {
        let vs = m.baseline.map_or(String::new(), |b| format!("{:.2}", m.bytes / b));
        let _ = writeln!(out, "| {} | {:.1} | {} | {vs} | {} |", m.what, m.bytes, m.per, m.target);
    }
    out
}
