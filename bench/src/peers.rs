//! `make bench`, side by side with the other GCRA implementations in one server process: Redis' core
//! `GCRA` command (a `redis-server` built from Redis' unstable history at c3db5254b, the last commit
//! with it enabled: `RL_BENCH_GCRA_SERVER`) and redis-cell's `CL.THROTTLE` (`RL_BENCH_CELL_MODULE`,
//! brandur/redis-cell 0.5.0), beside the Lua token-bucket script of `lua.rs` and INCR. Each is skipped with the reason
//! when absent. redis-benchmark, 50 clients, pipeline 16; median of RL_BENCH_PEER_REPEAT (6)
//! interleaved runs; server time per call from INFO commandstats. Writes docs/bench-peers.md.

use crate::{configure, redis_benchmark, us_per_call, CLASS_STATS_OFF, DEFAULTS};
use std::fmt::Write as _;
use std::path::Path;
use testkit::redis;
use testkit::{info_field, Server};

/// Builds bench/support/floor.c (the module API's floor: open a key, reply five integers) with the
/// system C compiler; None when it cannot be built.
fn floor_module() -> Option<std::path::PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("support/floor.c");
    let out = std::env::temp_dir().join(format!("rl-floor-{}.so", std::process::id()));
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&out)
        .arg(&source)
        .status();
    matches!(built, Ok(s) if s.success()).then_some(out)
}

struct LoadPath {
    name: &'static str,
    random: bool,
    /// Per command: the arguments after the key, or None when the command has no such path.
    gcra: Option<&'static str>,
    token: &'static str,
    cell: Option<&'static str>,
    lua: bool,
    incr: bool,
    /// Create the key first (a peek on an existing bucket).
    prime: bool,
}

/// Which peers a path also runs: the Lua script, INCR, and whether the key is created first.
#[derive(Clone, Copy)]
struct Also {
    lua: bool,
    incr: bool,
    /// Create the key first (a peek on an existing bucket).
    prime: bool,
}

const LUA_AND_INCR: Also = Also { lua: true, incr: true, prime: false };
const NONE: Also = Also { lua: false, incr: false, prime: false };
const PRIMED: Also = Also { lua: false, incr: false, prime: true };

impl LoadPath {
    /// A path: its name, random keys or one hot key, then per command the arguments after the key
    /// (None: the command has no such path).
    const fn new(
        name: &'static str,
        random: bool,
        args: (Option<&'static str>, &'static str, Option<&'static str>),
        also: Also,
    ) -> LoadPath {
        let (gcra, token, cell) = args;
        LoadPath { name, random, gcra, token, cell, lua: also.lua, incr: also.incr, prime: also.prime }
    }
}

const PATHS: &[LoadPath] = &[
    LoadPath::new(
        "random keys (100k), capacity 10, rate 5/s",
        true,
        (Some("9 5 1"), "10 5 1", Some("9 5 1")),
        LUA_AND_INCR,
    ),
    LoadPath::new(
        "random keys, all allowed, no expiry churn",
        true,
        (Some("999999 1 1"), "1000000 1 1", Some("999999 1 1")),
        NONE,
    ),
    LoadPath::new(
        "one hot key (mostly denials)",
        false,
        (Some("9 5 1"), "10 5 1", Some("9 5 1")),
        LUA_AND_INCR,
    ),
    LoadPath::new("peek (cost 0) on a hot key", false, (None, "10 5 0", Some("9 5 1 0")), PRIMED),
];

struct Candidate {
    name: &'static str,
    command: String,
    config: &'static [(&'static str, &'static str)],
}

fn candidates(path: &LoadPath, gcra: bool, cell: bool, floor: bool, sha: &str) -> Vec<Candidate> {
    let key = |prefix: &str| format!("{prefix}:{}", if path.random { "__rand_int__" } else { "hot" });
    let mut out = vec![];
    if let (true, Some(args)) = (gcra, path.gcra) {
        out.push(Candidate {
            name: "GCRA (core)",
            command: format!("GCRA {} {args}", key("gcra")),
            config: &[],
        });
    }
    let token = format!("RL.TOKEN {} {}", key("rl"), path.token);
    out.push(Candidate { name: "RL.TOKEN", command: token.clone(), config: &[] });
    out.push(Candidate { name: "RL.TOKEN, class stats off", command: token, config: CLASS_STATS_OFF });
    if let (true, Some(args)) = (cell, path.cell) {
        out.push(Candidate {
            name: "CL.THROTTLE",
            command: format!("CL.THROTTLE {} {args}", key("cell")),
            config: &[],
        });
    }
    // This module's CL.THROTTLE under its other name (redis-cell holds CL.THROTTLE in this process):
    // the same body, arguments and replies.
    if let Some(args) = path.cell {
        out.push(Candidate {
            name: "RL.THROTTLE (our CL.THROTTLE)",
            command: format!("RL.THROTTLE {} {args}", key("throttle")),
            config: &[],
        });
    }
    if floor && !path.random {
        let name = "module API floor (open key, 5-int reply)";
        out.push(Candidate { name, command: format!("RLFLOOR.OPENREPLY {}", key("rl")), config: &[] });
    }
    if floor && path.random && !path.lua {
        let name = "module API floor (write 8 bytes in place, replicate, 5-int reply)";
        out.push(Candidate { name, command: format!("RLFLOOR.WRITE {}", key("floor")), config: &[] });
    }
    if path.lua {
        out.push(Candidate {
            name: "Lua (EVALSHA)",
            command: format!("EVALSHA {sha} 1 {} 10 5 1", key("lua")),
            config: &[],
        });
    }
    if path.incr {
        out.push(Candidate { name: "INCR", command: format!("INCR {}", key("incr")), config: &[] });
    }
    out
}

/// Runs `list` on `path`, interleaved `runs.0` times of `runs.1` requests, and writes one table row
/// per candidate, with its server time against `baseline`'s when given.
fn measure(
    server: &Server,
    con: &mut redis::Connection,
    path: &LoadPath,
    list: &[Candidate],
    runs: (usize, usize),
    baseline: Option<&str>,
    out: &mut String,
) {
    let (repeat, requests) = runs;
    let mut rps: Vec<Vec<f64>> = list.iter().map(|_| vec![]).collect();
    let mut us: Vec<Vec<f64>> = list.iter().map(|_| vec![]).collect();
    for _ in 0..repeat {
        for (i, c) in list.iter().enumerate() {
            let _: () = redis::cmd("FLUSHALL").query(con).expect("FLUSHALL");
            configure(con, c.config);
            if path.prime || c.command.starts_with("RLFLOOR") {
                let prime = c.command.replace(" 10 5 0", " 10 5 1").replace(" 9 5 1 0", " 9 5 1 1");
                let prime = prime.replace("RLFLOOR.OPENREPLY rl:hot", "RL.TOKEN rl:hot 10 5 1");
                let mut cmd = redis::cmd(prime.split(' ').next().unwrap_or(""));
                prime.split(' ').skip(1).for_each(|a| {
                    cmd.arg(a);
                });
                let _: redis::Value = cmd.query(con).expect("priming the key");
            }
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).expect("CONFIG RESETSTAT");
            let m = redis_benchmark(server.port, &c.command, 16, path.random, requests);
            let name = c.command.split(' ').next().unwrap_or("").to_lowercase();
            rps[i].push(m.rps);
            us[i].push(us_per_call(con, name));
            configure(con, DEFAULTS);
        }
    }
    let medians: Vec<(f64, f64)> = rps.into_iter().zip(us).map(|(r, u)| (median(r), median(u))).collect();
    let base_us = list.iter().zip(&medians).find(|(c, _)| Some(c.name) == baseline).map(|(_, m)| m.1);
    for (c, (r, u)) in list.iter().zip(&medians) {
        let vs = base_us.map_or(String::new(), |g| format!("{:.2}x", u / g));
        let _ = writeln!(out, "| {} | {} | {r:.0} | {u:.2} | {vs} |", path.name, c.name);
        eprintln!("{:<45} {:<28} {r:>10.0} req/s {u:>6.2} us/call {vs}", path.name, c.name);
    }
}

/// The dialects beside RL.TOKEN on a server without core's GCRA (where this module's GCRA registers):
/// the same bucket through each command's parsing and reply.
fn dialects(scale: f64, repeat: usize, out: &mut String) {
    let server = Server::builder().args(&["--appendonly", "no"]).start();
    let mut con = server.conn();
    let version = info_field(&mut con, "server", "redis_version").unwrap_or_default();
    let requests = ((400_000.0 * scale) as usize).max(800);
    let _ = writeln!(out, "\n## The dialects beside RL.TOKEN\n");
    let _ = writeln!(out, "A server without core's GCRA (redis_version {version}), so this module's GCRA registers; the same runs. us/call vs RL.TOKEN.\n");
    let _ = writeln!(
        out,
        "| path | command | req/s | us/call | us/call vs RL.TOKEN |\n| --- | --- | ---: | ---: | ---: |"
    );
    let paths = [
        LoadPath::new("random keys (100k), capacity 10, rate 5/s", true, (None, "", None), NONE),
        LoadPath::new("one hot key (mostly denials)", false, (None, "", None), NONE),
    ];
    for path in &paths {
        let key = |prefix: &str| format!("{prefix}:{}", if path.random { "__rand_int__" } else { "hot" });
        let list = [
            Candidate { name: "RL.TOKEN", command: format!("RL.TOKEN {} 10 5 1", key("rl")), config: &[] },
            Candidate {
                name: "GCRA (this module)",
                command: format!("GCRA {} 9 5 1", key("gcra")),
                config: &[],
            },
            Candidate {
                name: "CL.THROTTLE (this module)",
                command: format!("CL.THROTTLE {} 9 5 1", key("cell")),
                config: &[],
            },
        ];
        measure(&server, &mut con, path, &list, (repeat, requests), Some("RL.TOKEN"), out);
    }
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the side-by-side table; returns it as Markdown.
pub fn run(scale: f64) -> String {
    let gcra = testkit::gcra_server().map(|p| p.display().to_string());
    let cell = testkit::cell_module().map(|p| p.display().to_string());
    let repeat: usize =
        std::env::var("RL_BENCH_PEER_REPEAT").ok().and_then(|s| s.parse().ok()).unwrap_or(6).max(1);
    let binary = gcra.clone().unwrap_or_else(testkit::server_binary);
    let floor = floor_module();
    let mut preload: Vec<&Path> = cell.iter().map(Path::new).collect();
    preload.extend(floor.as_deref());
    let server = Server::builder().binary(&binary).preload(&preload).args(&["--appendonly", "no"]).start();
    let mut con = server.conn();
    let version = info_field(&mut con, "server", "redis_version").unwrap_or_default();
    let sha: String =
        redis::cmd("SCRIPT").arg("LOAD").arg(crate::lua::TOKEN_BUCKET).query(&mut con).expect("SCRIPT LOAD");
    let requests = ((400_000.0 * scale) as usize).max(800);

    let mut out = String::new();
    let _ = writeln!(out, "# Side by side: GCRA (core), RL.TOKEN, CL.THROTTLE, Lua, INCR\n");
    // The binary's name only: a report names no path of the machine that made it.
    let shown = std::path::Path::new(&binary)
        .file_name()
        .map_or(binary.clone(), |n| n.to_string_lossy().into_owned());
    let _ = writeln!(out, "One server process (`{shown}`, redis_version {version}) with every module loaded; redis-benchmark, 50 clients, pipeline 16, {requests} requests per run; the median of {repeat} interleaved runs. us/call is the server's time per call (INFO commandstats), steadier than req/s on a shared machine.\n");
    if gcra.is_none() {
        let _ = writeln!(out, "- GCRA (core): skipped: set RL_BENCH_GCRA_SERVER to a redis-server built with the core GCRA command (see docs/performance.md).");
    }
    if cell.is_none() {
        let _ = writeln!(
            out,
            "- CL.THROTTLE: skipped: set RL_BENCH_CELL_MODULE to redis-cell's module (see docs/performance.md)."
        );
    }
    let _ = writeln!(
        out,
        "\n| path | command | req/s | us/call | us/call vs GCRA |\n| --- | --- | ---: | ---: | ---: |"
    );
    for path in PATHS {
        let list = candidates(path, gcra.is_some(), cell.is_some(), floor.is_some(), &sha);
        let baseline = gcra.is_some().then_some("GCRA (core)");
        measure(&server, &mut con, path, &list, (repeat, requests), baseline, &mut out);
    }
    dialects(scale, repeat, &mut out);
    if let Some(cell) = &cell {
        crate::peers_twin::cell_twins(Path::new(cell), scale, repeat, &mut out);
    }
    let calls = ((100_000.0 * scale) as usize).max(800);
    crate::peers_twin::replicated_bytes(&binary, gcra.is_some(), crate::lua::TOKEN_BUCKET, calls, &mut out);
    if let Some(floor) = floor {
        let _ = std::fs::remove_file(floor);
    }
    out
}
