//! Who is limited, and why: per-class counters in INFO, the most denied keys (RL.TOP), RL.INSPECT on a
//! primary, a read-only replica and for a read-only ACL user, RL.RESETSTATS, and the module's
//! configuration (load-time arguments and CONFIG SET / GET, validated).

mod common;

use common::calls::try_token;
use std::collections::HashMap;
use testkit::redis::{self, Connection, Value};
use testkit::{info_field, module_path, Server};

/// Every class of `INFO ratelimit` as name -> (allowed, denied, errors).
fn classes(con: &mut Connection) -> HashMap<String, (u64, u64, u64)> {
    let info: String = redis::cmd("INFO").arg("ratelimit").query(con).unwrap();
    info.lines()
        .filter(|l| l.starts_with("ratelimit_class_"))
        .filter_map(|l| {
            let fields: HashMap<&str, &str> =
                l.split_once(':')?.1.split(',').filter_map(|kv| kv.split_once('=')).collect();
            let n = |k: &str| fields.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
            Some((fields.get("name")?.to_string(), (n("allowed"), n("denied"), n("errors"))))
        })
        .collect()
}

fn top(con: &mut Connection, count: usize) -> Vec<HashMap<String, Value>> {
    let entries: Vec<Value> = redis::cmd("RL.TOP").arg(count).query(con).unwrap();
    entries
        .into_iter()
        .map(|e| {
            let pairs: Vec<(String, Value)> = match e {
                Value::Map(m) => {
                    m.into_iter().map(|(k, v)| (redis::from_redis_value(k).unwrap(), v)).collect()
                }
                Value::Array(flat) => flat
                    .chunks(2)
                    .map(|kv| (redis::from_redis_value(kv[0].clone()).unwrap(), kv[1].clone()))
                    .collect(),
                other => panic!("unexpected RL.TOP entry {other:?}"),
            };
            pairs.into_iter().collect()
        })
        .collect()
}

fn int(v: &Value) -> i64 {
    redis::from_redis_value(v.clone()).unwrap()
}

fn used_memory(con: &mut Connection) -> i64 {
    info_field(con, "memory", "used_memory").unwrap().parse().unwrap()
}

#[test]
fn class_counters_are_exact_under_200_concurrent_clients() {
    let Some(server) = Server::builder().own() else { return };
    let threads: Vec<_> = (0..200)
        .map(|t| {
            let mut con = server.conn();
            std::thread::spawn(move || {
                let key = format!("rl:class{}:user:{t}", t % 4);
                for _ in 0..50 {
                    try_token(&mut con, &key, 30, "0.001", 1).unwrap();
                }
                for _ in 0..5 {
                    assert!(redis::cmd("RL.TOKEN")
                        .arg(&key)
                        .arg(0)
                        .arg(1)
                        .arg(1)
                        .query::<Value>(&mut con)
                        .is_err());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let counted = classes(&mut server.conn());
    for c in 0..4 {
        // 50 clients per class: 30 allowed, 20 denied and 5 errors each.
        assert_eq!(counted[&format!("rl:class{c}:user")], (1500, 1000, 250), "class {c}");
    }
    assert_eq!(
        info_field(&mut server.conn(), "ratelimit", "ratelimit_token_allowed").as_deref(),
        Some("6000")
    );
}

#[test]
fn a_multi_key_call_counts_every_class_when_allowed_and_the_denying_one_when_denied() {
    let Some(server) = Server::builder().own() else { return };
    let mut con = server.conn();
    let call = |con: &mut Connection| -> Vec<i64> {
        redis::cmd("RL.TOKEN")
            .arg("rl:{c1}:route:a")
            .arg(10)
            .arg("0.001")
            .arg(1)
            .arg("rl:{c1}:global:all")
            .arg(2)
            .arg("0.001")
            .arg(1)
            .query(con)
            .unwrap()
    };
    for _ in 0..3 {
        call(&mut con);
    }
    let counted = classes(&mut con);
    assert_eq!(counted["rl:{c1}:route"], (2, 0, 0));
    assert_eq!(counted["rl:{c1}:global"], (2, 1, 0));
    let most = top(&mut con, 5);
    assert_eq!(most.len(), 1);
    assert_eq!(most[0]["key"], Value::BulkString(b"rl:{c1}:global:all".to_vec()));
}

#[test]
fn structures_stay_bounded_under_100k_distinct_keys_and_classes() {
    let Some(server) = Server::builder().own() else { return };
    let mut con = server.conn();
    // A cost above capacity is denied and writes nothing: memory growth is the module's own.
    let flood = |con: &mut Connection, from: usize, to: usize, class_per_key: bool| {
        let mut pipe = redis::pipe();
        for i in from..to {
            let key = if class_per_key { format!("rl:c{i}:k") } else { format!("rl:one:k{i}") };
            pipe.cmd("RL.TOKEN").arg(key).arg(1).arg(1).arg(2).ignore();
            if pipe.len() == 1000 {
                pipe.exec(con).unwrap();
                pipe = redis::pipe();
            }
        }
        if !pipe.is_empty() {
            pipe.exec(con).unwrap();
        }
    };
    flood(&mut con, 0, 10_000, false);
    flood(&mut con, 0, 10_000, true);
    let warm = used_memory(&mut con);
    flood(&mut con, 10_000, 100_000, false);
    flood(&mut con, 10_000, 100_000, true);
    let after = used_memory(&mut con);
    assert!(after - warm < 64 * 1024, "used_memory grew by {} bytes over 180k more keys", after - warm);
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut con).unwrap(), 0);
    let counted = classes(&mut con);
    assert_eq!(counted.len(), 257, "256 classes and other");
    assert_eq!(counted.values().map(|c| c.1).sum::<u64>(), 200_000, "every denial counted somewhere");
    assert_eq!(top(&mut con, 1000).len(), 32, "the default top-size");
}

#[test]
fn the_top_finds_a_heavy_hitter_hidden_among_10k_light_keys() {
    let Some(server) = Server::builder().own() else { return };
    let mut con = server.conn();
    let mut pipe = redis::pipe();
    for i in 0..10_000 {
        pipe.cmd("RL.TOKEN").arg(format!("rl:api:light:{i}")).arg(1).arg(1).arg(2).ignore();
        if i % 20 == 0 {
            pipe.cmd("RL.TOKEN").arg("rl:api:heavy").arg(1).arg(1).arg(2).ignore();
        }
    }
    pipe.exec(&mut con).unwrap();
    let most = top(&mut con, 3);
    assert_eq!(most[0]["key"], Value::BulkString(b"rl:api:heavy".to_vec()));
    assert!(int(&most[0]["denied"]) >= 500 && int(&most[0]["denied"]) - int(&most[0]["error"]) <= 500);
    assert!(int(&most[0]["last_denied_ms"]) >= int(&most[0]["first_denied_ms"]));
    assert_eq!(
        int(&most[0]["denied_for_ms"]),
        int(&most[0]["last_denied_ms"]) - int(&most[0]["first_denied_ms"])
    );
    // RESP3 clients get maps.
    let mut resp3 =
        redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap().get_connection().unwrap();
    let entries: Vec<Value> = redis::cmd("RL.TOP").arg(1).query(&mut resp3).unwrap();
    assert!(matches!(entries[0], Value::Map(_)), "{entries:?}");
    // RL.RESETSTATS forgets it all.
    let _: () = redis::cmd("RL.RESETSTATS").query(&mut con).unwrap();
    assert!(top(&mut con, 3).is_empty());
    assert!(classes(&mut con).is_empty());
    assert_eq!(info_field(&mut con, "ratelimit", "ratelimit_token_denied").as_deref(), Some("0"));
}

fn inspect(con: &mut Connection, args: &[&str]) -> HashMap<String, Value> {
    let mut cmd = redis::cmd("RL.INSPECT");
    for a in args {
        cmd.arg(*a);
    }
    let reply: Value = cmd.query(con).unwrap();
    let pairs: Vec<(String, Value)> = match reply {
        Value::Map(m) => m.into_iter().map(|(k, v)| (redis::from_redis_value(k).unwrap(), v)).collect(),
        Value::Array(flat) => flat
            .chunks(2)
            .map(|kv| (redis::from_redis_value(kv[0].clone()).unwrap(), kv[1].clone()))
            .collect(),
        Value::Nil => vec![],
        other => panic!("unexpected RL.INSPECT reply {other:?}"),
    };
    pairs.into_iter().collect()
}

fn status(v: &Value) -> String {
    redis::from_redis_value(v.clone()).unwrap()
}

#[test]
fn inspect_decodes_every_limiter_without_touching_it() {
    let Some(server) = Server::builder().own() else { return };
    let mut con = server.conn();
    try_token(&mut con, "rl:t", 10, "0.001", 4).unwrap();
    let _: Vec<i64> = redis::cmd("RL.FIXED").arg("rl:f").arg(5).arg(60).arg(2).query(&mut con).unwrap();
    let _: Vec<i64> = redis::cmd("RL.SLIDECOUNT").arg("rl:s").arg(5).arg(60).arg(3).query(&mut con).unwrap();
    for id in ["a", "b"] {
        let _: Vec<i64> =
            redis::cmd("RL.SLIDE").arg("rl:l").arg(5).arg(60).arg(id).arg("DEDUP").query(&mut con).unwrap();
    }
    let dirty = info_field(&mut con, "persistence", "rdb_changes_since_last_save");

    let t = inspect(&mut con, &["rl:t", "10", "0.001"]);
    assert_eq!(status(&t["limiter"]), "RL.TOKEN");
    assert_eq!((int(&t["remaining"]), int(&t["retry_after_ms"])), (6, 0));
    assert!(int(&t["ttl_ms"]) > 0 && int(&t["backlog_ms"]) > 3_000_000);
    assert_eq!(int(&t["reset_after_ms"]), int(&t["backlog_ms"]));
    let f = inspect(&mut con, &["rl:f", "5", "60"]);
    assert_eq!((status(&f["limiter"]), int(&f["count"]), int(&f["remaining"])), ("RL.FIXED".into(), 2, 3));
    let s = inspect(&mut con, &["rl:s", "5", "60"]);
    assert_eq!(
        (status(&s["limiter"]), int(&s["current"]), int(&s["remaining"])),
        ("RL.SLIDECOUNT".into(), 3, 2)
    );
    let l = inspect(&mut con, &["rl:l", "5", "60"]);
    assert_eq!((status(&l["limiter"]), int(&l["recorded"]), int(&l["dedup"])), ("RL.SLIDE".into(), 2, 1));
    assert_eq!(int(&l["remaining"]), 3);
    assert!(int(&l["newest_ms"]) >= int(&l["oldest_ms"]));
    // Without parameters: the state only.
    assert!(!inspect(&mut con, &["rl:t"]).contains_key("remaining"));
    assert!(inspect(&mut con, &["rl:missing"]).is_empty(), "a missing key is nil");
    assert_eq!(info_field(&mut con, "persistence", "rdb_changes_since_last_save"), dirty, "nothing written");
    // Errors have codes; a key of another type is WRONGTYPE.
    let _: () = redis::cmd("SET").arg("plain").arg("hello").query(&mut con).unwrap();
    let err = redis::cmd("RL.INSPECT").arg("plain").query::<Value>(&mut con).unwrap_err();
    assert_eq!(err.code(), Some("ERR"), "{err:?}");
    let _: () = redis::cmd("LPUSH").arg("list").arg("x").query(&mut con).unwrap();
    let err = redis::cmd("RL.INSPECT").arg("list").query::<Value>(&mut con).unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
    let err = redis::cmd("RL.INSPECT").arg("rl:t").arg("0").arg("1").query::<Value>(&mut con).unwrap_err();
    assert!(err.to_string().contains("invalid capacity"), "{err}");
}

#[test]
fn inspect_works_on_a_read_only_replica_and_for_a_read_only_user() {
    let Some(primary) = Server::builder().args(&["--repl-diskless-sync-delay", "0"]).own() else { return };
    let replica = common::start_replica(&primary);
    let (mut p, mut r) = (primary.conn(), replica.conn());
    try_token(&mut p, "rl:user:ada", 10, "0.001", 3).unwrap();
    let offset_before = info_field(&mut p, "replication", "master_repl_offset");
    common::wait_in_sync(&mut p, &mut r);
    let on_replica = inspect(&mut r, &["rl:user:ada", "10", "0.001"]);
    assert_eq!(int(&on_replica["remaining"]), 7);
    // The replica refuses writes but answers RL.INSPECT; inspecting replicates nothing.
    let err = try_token(&mut r, "rl:user:ada", 10, "0.001", 1).unwrap_err();
    assert_eq!(err.code(), Some("READONLY"));
    let _ = inspect(&mut p, &["rl:user:ada", "10", "0.001"]);
    let offset_after = info_field(&mut p, "replication", "master_repl_offset");
    let moved =
        offset_after.unwrap().parse::<i64>().unwrap() - offset_before.unwrap().parse::<i64>().unwrap();
    assert!(moved < 50, "only pings may move the offset: {moved}");

    // A user with read commands only.
    let read_commands: Vec<String> =
        redis::cmd("COMMAND").arg("LIST").arg("FILTERBY").arg("ACLCAT").arg("read").query(&mut p).unwrap();
    if !read_commands.iter().any(|c| c.eq_ignore_ascii_case("rl.inspect")) {
        testkit::skip("the ACL part: this server has no module ACL categories (Redis 7.0), so RL.INSPECT is not in @read");
        return;
    }
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("viewer")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@read")
        .query(&mut p)
        .unwrap();
    let mut viewer = primary.conn();
    let _: () = redis::cmd("AUTH").arg("viewer").arg("pw").query(&mut viewer).unwrap();
    assert_eq!(int(&inspect(&mut viewer, &["rl:user:ada", "10", "0.001"])["remaining"]), 7);
    assert_eq!(try_token(&mut viewer, "rl:user:ada", 10, "0.001", 1).unwrap_err().code(), Some("NOPERM"));
}

#[test]
fn configuration_is_validated_and_applied_live_and_at_load() {
    let Some(server) = Server::builder().own() else { return };
    let mut con = server.conn();
    let config_set = |con: &mut Connection, name: &str, value: &str| {
        redis::cmd("CONFIG").arg("SET").arg(name).arg(value).query::<()>(con)
    };
    for (name, bad) in [
        ("ratelimit.class-separator", "ab"),
        ("ratelimit.class-separator", ""),
        ("ratelimit.class-separator", " "),
        ("ratelimit.top-size", "0"),
        ("ratelimit.class-limit", "-1"),
        ("ratelimit.class-limit", "lots"),
        ("ratelimit.class-stats", "maybe"),
    ] {
        let err = config_set(&mut con, name, bad).unwrap_err();
        assert_eq!(err.code(), Some("ERR"), "{name}={bad:?}: {err:?}");
    }
    config_set(&mut con, "ratelimit.class-separator", "/").unwrap();
    let got: Vec<String> =
        redis::cmd("CONFIG").arg("GET").arg("ratelimit.class-separator").query(&mut con).unwrap();
    assert_eq!(got, ["ratelimit.class-separator", "/"]);
    try_token(&mut con, "api/user/ada", 5, "0.001", 1).unwrap();
    assert!(classes(&mut con).contains_key("api/user"));
    config_set(&mut con, "ratelimit.class-stats", "no").unwrap();
    try_token(&mut con, "api/user/bob", 5, "0.001", 1).unwrap();
    assert_eq!(classes(&mut con)["api/user"], (1, 0, 0), "counting is off");
    config_set(&mut con, "ratelimit.class-stats", "yes").unwrap();
    config_set(&mut con, "ratelimit.top-size", "2").unwrap();
    for key in ["a/1", "a/2", "a/3", "a/3"] {
        try_token(&mut con, key, 1, "0.001", 5).unwrap();
    }
    assert_eq!(top(&mut con, 10).len(), 2);

    // At load time: `--loadmodule <path> name value ...` (the test servers pass extra arguments right
    // after the module's path).
    let Some(loaded) =
        Server::builder().args(&["class-separator", "/", "class-limit", "3", "top-size", "5"]).own()
    else {
        return;
    };
    let got: Vec<String> =
        redis::cmd("CONFIG").arg("GET").arg("ratelimit.*").query(&mut loaded.conn()).unwrap();
    let got: HashMap<&str, &str> = got.chunks(2).map(|kv| (kv[0].as_str(), kv[1].as_str())).collect();
    assert_eq!(got["ratelimit.class-separator"], "/");
    assert_eq!(got["ratelimit.class-limit"], "3");
    assert_eq!(got["ratelimit.top-size"], "5");
    assert_eq!(got["ratelimit.class-stats"], "yes");
}

/// A bad value at load time stops the module from loading, with the reason in the server's log.
#[test]
fn a_bad_load_time_value_is_refused_with_a_reason() {
    if testkit::external_url().is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("rl-badconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = std::process::Command::new(testkit::server_binary())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
        .arg("--dir")
        .arg(&dir)
        .arg("--loadmodule")
        .arg(module_path())
        .args(["class-separator", "ab"])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "the server must not start with a bad module configuration");
    assert!(log.contains("class-separator"), "the log names the setting:\n{log}");
}
