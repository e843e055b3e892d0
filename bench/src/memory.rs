//! Bytes per key and per recorded request: used_memory before and after filling, divided by the count.

use testkit::info_field;
use testkit::redis::{self, Connection};

pub struct Memory {
    pub what: &'static str,
    pub bytes: f64,
    pub per: &'static str,
    /// The Lua equivalent's bytes, when there is one.
    pub baseline: Option<f64>,
    pub target: &'static str,
}

fn used_memory(con: &mut Connection) -> f64 {
    info_field(con, "memory", "used_memory").and_then(|v| v.parse().ok()).expect("no used_memory in INFO")
}

/// Runs `count` calls built by `call(i)` in pipelines, and returns the memory they added divided by
/// `per` (keys or recorded requests).
pub(crate) fn added(
    con: &mut Connection,
    count: usize,
    per: usize,
    call: impl Fn(usize) -> redis::Cmd,
) -> f64 {
    let _: () = redis::cmd("FLUSHALL").query(con).expect("FLUSHALL failed");
    let before = used_memory(con);
    for chunk in (0..count).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for &i in chunk {
            pipe.add_command(call(i)).ignore();
        }
        pipe.exec(con).expect("a fill call failed");
    }
    (used_memory(con) - before) / per as f64
}

const KEYS: usize = 200_000;
/// 20 logs of 10,000 requests each: 200,000 recorded requests at limit 10,000.
const LOGS: usize = 20;
const LOG_LIMIT: usize = 10_000;

pub fn measure(con: &mut Connection, shas: &[(&str, String)]) -> Vec<Memory> {
    let sha = |name: &str| shas.iter().find(|(n, _)| *n == name).map(|(_, s)| s.clone()).unwrap_or_default();
    let key = |i: usize| format!("rl:user:{i:06}"); // 14 characters
    let log_key = |i: usize| format!("rl:slog:{:06}", i % LOGS); // 14 characters
    let cmd = |name: &str| redis::cmd(name);

    // Two calls per bucket at 0.5 tokens/s, so the Lua hash holds a fractional token count (as it does
    // in real use, between refills) rather than a small integer that listpacks store compactly.
    let lua_token = added(con, 2 * KEYS, KEYS, |i| {
        let mut c = cmd("EVALSHA");
        c.arg(sha("token")).arg(1).arg(key(i % KEYS)).arg(10).arg("0.5").arg(1);
        c
    });
    let token = added(con, 2 * KEYS, KEYS, |i| {
        let mut c = cmd("RL.TOKEN");
        c.arg(key(i % KEYS)).arg(10).arg("0.5").arg(1);
        c
    });
    let fixed = added(con, KEYS, KEYS, |i| {
        let mut c = cmd("RL.FIXED");
        c.arg(key(i)).arg(100).arg(60);
        c
    });
    let counter = added(con, KEYS, KEYS, |i| {
        let mut c = cmd("RL.SLIDECOUNT");
        c.arg(key(i)).arg(100).arg(60);
        c
    });
    let recorded = LOGS * LOG_LIMIT;
    let lua_log = added(con, recorded, recorded, |i| {
        let mut c = cmd("EVALSHA");
        c.arg(sha("slide")).arg(1).arg(log_key(i)).arg(LOG_LIMIT).arg(3600).arg(i);
        c
    });
    let log = added(con, recorded, recorded, |i| {
        let mut c = cmd("RL.SLIDE");
        c.arg(log_key(i)).arg(LOG_LIMIT).arg(3600).arg(i);
        c
    });
    let log_dedup = added(con, recorded, recorded, |i| {
        let mut c = cmd("RL.SLIDE");
        c.arg(log_key(i)).arg(LOG_LIMIT).arg(3600).arg(i).arg("DEDUP");
        c
    });
    let _: () = redis::cmd("FLUSHALL").query(con).expect("FLUSHALL failed");
    vec![
        Memory {
            what: "Lua token bucket (hash of 2 fields)",
            bytes: lua_token,
            per: "key",
            baseline: None,
            target: "",
        },
        Memory {
            what: "RL.TOKEN",
            bytes: token,
            per: "key",
            baseline: Some(lua_token),
            target: "<= 0.67 of Lua",
        },
        Memory { what: "RL.FIXED", bytes: fixed, per: "key", baseline: None, target: "" },
        Memory { what: "RL.SLIDECOUNT", bytes: counter, per: "key", baseline: None, target: "" },
        Memory {
            what: "Lua sliding log (sorted set), limit 10,000",
            bytes: lua_log,
            per: "recorded request",
            baseline: None,
            target: "",
        },
        Memory {
            what: "RL.SLIDE, limit 10,000",
            bytes: log,
            per: "recorded request",
            baseline: Some(lua_log),
            target: "<= 16 bytes",
        },
        Memory {
            what: "RL.SLIDE DEDUP, limit 10,000",
            bytes: log_dedup,
            per: "recorded request",
            baseline: Some(lua_log),
            target: "",
        },
    ]
}
