//! RL.HOLD and RL.SETTLE on real servers: a denial writes nothing (the server's dirty counter does
//! not move), a retried settle counts once, the ledger and the limits replicate by effect, a cluster
//! routes every key of a hold to one node, and the library (FCALL) answers as the module does. The
//! semantics at explicit times are core's tests (core/src/hold/tests.rs) and the library equals core
//! byte for byte (tests/lua_equal.rs).

mod common;

use common::lua;
use common::*;
use testkit::redis::{self, Connection, Value};
use testkit::{info_field, unique_key, Server};

fn call(con: &mut Connection, args: &[&str]) -> redis::RedisResult<Value> {
    redis::cmd(args[0]).arg(&args[1..]).query(con)
}

fn ints(v: Value) -> Vec<i64> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Value::Int(n) => n,
                other => panic!("an integer: {other:?}"),
            })
            .collect(),
        other => panic!("an array: {other:?}"),
    }
}

fn dirty(con: &mut Connection) -> i64 {
    info_field(con, "persistence", "rdb_changes_since_last_save")
        .and_then(|v| v.parse().ok())
        .expect("the dirty counter")
}

fn remaining(con: &mut Connection, key: &str, limit: &str) -> i64 {
    ints(call(con, &["RL.FIXED", key, limit, "60", "0"]).unwrap())[2]
}

#[test]
fn a_hold_settles_once_and_a_denial_writes_nothing() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let tag = unique_key("tenant");
    let (ledger, rpm, tpm) =
        (format!("rl:holds:{{{tag}}}"), format!("rl:{{{tag}}}:rpm"), format!("rl:{{{tag}}}:tpm"));
    let hold = |con: &mut Connection, id: &str, tokens: &str| {
        ints(
            call(
                con,
                &[
                    "RL.HOLD", &ledger, id, "120", "CHARGE", &rpm, "FIXED", "10", "60", "1", &tpm, "FIXED",
                    "1000", "60", tokens,
                ],
            )
            .unwrap(),
        )
    };
    assert_eq!(hold(&mut con, "r1", "600")[0], 1);
    assert_eq!(remaining(&mut con, &tpm, "1000"), 400);
    // Denied by the token limit: nothing taken from either limit, nothing recorded, no write at all.
    let before = dirty(&mut con);
    let denied = hold(&mut con, "r2", "600");
    assert_eq!((denied[0], denied[5]), (0, 2));
    assert_eq!(dirty(&mut con), before, "a denied hold writes nothing");
    assert_eq!(remaining(&mut con, &rpm, "10"), 9);
    assert_eq!(call(&mut con, &["RL.SETTLE", &ledger, "r2", "FINAL", &tpm, "0"]).unwrap(), Value::Nil);
    // Settled with 250: 350 back, once, however often the settle is retried.
    let first = ints(call(&mut con, &["RL.SETTLE", &ledger, "r1", "FINAL", &tpm, "250"]).unwrap());
    for _ in 0..5 {
        let again = ints(call(&mut con, &["RL.SETTLE", &ledger, "r1", "FINAL", &tpm, "250"]).unwrap());
        assert_eq!(again, first);
    }
    assert_eq!(remaining(&mut con, &tpm, "1000"), 750);
    // A retried hold takes nothing more.
    assert_eq!(hold(&mut con, "r1", "600")[0], 1);
    assert_eq!(remaining(&mut con, &tpm, "1000"), 750);
    // Usage errors are replies with a code, and change nothing.
    let not_held =
        call(&mut con, &["RL.HOLD", &ledger, "r3", "0", "CHARGE", &tpm, "FIXED", "1000", "60", "1"]);
    assert!(not_held.unwrap_err().to_string().contains("invalid ttl"));
    let wrong = call(&mut con, &["RL.HOLD", &tpm, "r3", "1", "CHARGE", &rpm, "FIXED", "10", "60", "1"]);
    assert!(wrong.unwrap_err().to_string().contains("not this limiter's state"));
}

#[test]
fn holds_replicate_by_effect() {
    let Some(primary) = Server::builder().args(&["--repl-diskless-sync-delay", "0"]).own() else { return };
    let replica = start_replica(&primary);
    let (mut p, mut r) = (primary.conn(), replica.conn());
    for i in 0..40 {
        let ledger = format!("rl:holds:{{t{}}}", i % 4);
        let (tpm, bucket) = (format!("rl:{{t{}}}:tpm", i % 4), format!("rl:{{t{}}}:tb", i % 4));
        let id = format!("req-{i}");
        let policy = if i % 2 == 0 { "CHARGE" } else { "RETURN" };
        let _ = call(
            &mut p,
            &[
                "RL.HOLD",
                &ledger,
                &id,
                "0.2",
                policy,
                &tpm,
                "SLIDECOUNT",
                "500",
                "10",
                "40",
                &bucket,
                "TOKEN",
                "300",
                "5",
                "30",
            ],
        );
        if i % 3 != 0 {
            let _ = call(&mut p, &["RL.SETTLE", &ledger, &id, "PARTIAL", &tpm, "50"]);
            let _ = call(
                &mut p,
                &["RL.SETTLE", &ledger, &id, "FINAL", &tpm, &(i % 60).to_string(), &bucket, "10"],
            );
        }
        if i % 10 == 9 {
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }
    wait_in_sync(&mut p, &mut r);
    assert!(dbsize(&mut p) >= 8);
    assert_eq!(dump_strings(&mut p), dump_strings(&mut r));
    assert_eq!(digest(&mut p), digest(&mut r));
}

#[test]
fn a_cluster_routes_a_hold_and_its_settle_by_the_hash_tag() {
    let Some(cluster) = testkit::cluster::Cluster::start() else { return };
    let mut con = cluster.client();
    for tenant in 0..6 {
        let (ledger, tpm) = (format!("rl:holds:{{key:{tenant}}}"), format!("rl:{{key:{tenant}}}:tpm"));
        let r: Vec<i64> = redis::cmd("RL.HOLD")
            .arg(&ledger)
            .arg("a")
            .arg(30)
            .arg("CHARGE")
            .arg(&tpm)
            .arg("TOKEN")
            .arg(100)
            .arg(1)
            .arg(60)
            .query(&mut con)
            .unwrap();
        assert_eq!(r[0], 1);
        let s: Vec<i64> = redis::cmd("RL.SETTLE")
            .arg(&ledger)
            .arg("a")
            .arg("FINAL")
            .arg(&tpm)
            .arg(20)
            .query(&mut con)
            .unwrap();
        assert_eq!(s[2], 80, "the unused 40 are back on the node that holds the tag");
    }
    let owner = cluster.owner("a");
    let err = redis::cmd("RL.HOLD")
        .arg("a")
        .arg("x")
        .arg(1)
        .arg("CHARGE")
        .arg("b")
        .arg("FIXED")
        .arg(1)
        .arg(1)
        .arg(1)
        .query::<Value>(&mut owner.conn());
    assert_eq!(err.expect_err("keys in two slots").code(), Some("CROSSSLOT"));
}

#[test]
fn the_library_answers_as_the_module_does() {
    let Some(server) = Server::builder().own() else { return };
    let mut con = server.conn();
    lua::load(&mut con, &lua::source());
    // The same sequence through each engine on its own keys (1 token per 1,000 s: no refill).
    let run = |con: &mut Connection, engine: &str| -> Vec<String> {
        let (l, t, f) =
            (format!("{engine}:{{h}}:ledger"), format!("{engine}:{{h}}:t"), format!("{engine}:{{h}}:f"));
        let steps: Vec<(&str, Vec<&str>, Vec<String>)> = vec![
            (
                "hold",
                vec![&l, &t, &f],
                vec![
                    "a".into(),
                    "60".into(),
                    "RETURN".into(),
                    "TOKEN".into(),
                    "10".into(),
                    "0.001".into(),
                    "6".into(),
                    "FIXED".into(),
                    "5".into(),
                    "600".into(),
                    "1".into(),
                ],
            ),
            (
                "hold",
                vec![&l, &t],
                vec![
                    "b".into(),
                    "60".into(),
                    "CHARGE".into(),
                    "TOKEN".into(),
                    "10".into(),
                    "0.001".into(),
                    "6".into(),
                ],
            ),
            ("settle", vec![&l, &t], vec!["a".into(), "PARTIAL".into(), "9".into()]),
            ("settle", vec![&l, &t], vec!["a".into(), "FINAL".into(), "2".into()]),
            ("settle", vec![&l, &t], vec!["a".into(), "FINAL".into(), "2".into()]),
            ("settle", vec![&l, &f], vec!["zz".into(), "FINAL".into(), "0".into()]),
            ("settle", vec![&l, &f], vec!["a".into(), "WHENEVER".into(), "0".into()]),
        ];
        steps
            .into_iter()
            .map(|(what, keys, args)| {
                let reply = if engine == "lib" {
                    let function = if what == "hold" { "rl_hold" } else { "rl_settle" };
                    redis::cmd("FCALL")
                        .arg(function)
                        .arg(keys.len())
                        .arg(&keys)
                        .arg(&args)
                        .query::<Value>(con)
                } else {
                    let command = if what == "hold" { "RL.HOLD" } else { "RL.SETTLE" };
                    let mut cmd = redis::cmd(command);
                    cmd.arg(keys[0]).arg(&args[0]).arg(&args[1]);
                    let mut rest = args[2..].iter();
                    if what == "hold" {
                        cmd.arg(rest.next().unwrap());
                        for key in &keys[1..] {
                            cmd.arg(key);
                            for _ in 0..4 {
                                cmd.arg(rest.next().unwrap());
                            }
                        }
                    } else {
                        for (key, units) in keys[1..].iter().zip(rest) {
                            cmd.arg(key).arg(units);
                        }
                    }
                    cmd.query::<Value>(con)
                };
                format!("{:?}", reply.map_err(|e| e.to_string()))
            })
            .collect()
    };
    let (module, library) = (run(&mut con, "mod"), run(&mut con, "lib"));
    // Replies carry times in ms that the two runs met a few ms apart: compare what does not move.
    let still = |s: &Vec<String>| {
        s.iter().map(|r| r.split(", int(").take(3).collect::<Vec<_>>().join("|")).collect::<Vec<_>>()
    };
    assert_eq!(still(&module), still(&library));
    let get =
        |con: &mut Connection, k: &str| -> Option<Vec<u8>> { redis::cmd("GET").arg(k).query(con).unwrap() };
    assert_eq!(get(&mut con, "mod:{h}:t").map(|v| v.len()), get(&mut con, "lib:{h}:t").map(|v| v.len()));
}
