//! The dialects against a real server: CL.THROTTLE as redis-cell replies and words its errors (and
//! its stored format), RL.THROTTLE, and GCRA as Redis core had it; their registration (the
//! `ratelimit.dialects` config), statistics and inspection. The comparisons with redis-cell itself
//! and core's GCRA are in dialect_peers.rs.

mod common;

use common::calls::{exists, pttl, rl_error};

use testkit::redis::{self, Connection, Value};
use testkit::{info_field, unique_key, Server};

fn call(con: &mut Connection, command: &str, args: &[&str]) -> Vec<i64> {
    let mut cmd = redis::cmd(command);
    args.iter().for_each(|a| {
        cmd.arg(*a);
    });
    cmd.query(con).unwrap_or_else(|e| panic!("{command} {args:?} failed: {e}"))
}

fn get(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

fn server_now_ns(con: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    s * 1_000_000_000 + us * 1000
}

#[test]
fn cl_throttle_replies_as_redis_cell_does_and_keeps_its_stored_format() {
    let server = Server::builder().single();
    let mut con = server.conn();
    // redis-cell's README example, then its end-to-end test's sequence.
    let key = unique_key("cell-readme");
    assert_eq!(call(&mut con, "CL.THROTTLE", &[&key, "15", "30", "60"]), [0, 16, 15, -1, 2]);
    assert_eq!(call(&mut con, "CL.THROTTLE", &[&key, "15", "30", "60", "1"]), [0, 16, 14, -1, 4]);
    let key = unique_key("cell-e2e");
    assert_eq!(call(&mut con, "cl.throttle", &[&key, "0", "1", "2"]), [0, 1, 0, -1, 2]);
    let stored = get(&mut con, &key).expect("an allowed call writes");
    assert!(
        stored.iter().all(u8::is_ascii_digit) && stored.len() == 19,
        "redis-cell's decimal TAT: {stored:?}"
    );
    let tat: i64 = String::from_utf8(stored.clone()).unwrap().parse().unwrap();
    let now = server_now_ns(&mut con);
    assert!((now + 1_900_000_000..=now + 2_000_000_000).contains(&tat), "the TAT is 2 s ahead");
    assert!(pttl(&mut con, &key) > 0, "the key expires");
    assert_eq!(call(&mut con, "CL.THROTTLE", &[&key, "0", "1", "2"]), [1, 1, 0, 2, 2]);
    assert_eq!(get(&mut con, &key), Some(stored), "a denial writes nothing");
    // A quantity above the limit is limited, and never fits.
    let key = unique_key("cell-above");
    assert_eq!(call(&mut con, "CL.THROTTLE", &[&key, "4", "1", "1", "6"]), [1, 5, 5, -1, 0]);
    assert!(!exists(&mut con, &key));
    // A quantity of 0 is a peek.
    assert_eq!(call(&mut con, "CL.THROTTLE", &[&key, "4", "1", "1", "0"]), [0, 5, 5, -1, 0]);
    assert!(!exists(&mut con, &key));
    // RL.THROTTLE is the same command.
    let key = unique_key("rl-throttle");
    assert_eq!(call(&mut con, "RL.THROTTLE", &[&key, "15", "30", "60"]), [0, 16, 15, -1, 2]);
    assert_eq!(call(&mut con, "CL.THROTTLE", &[&key, "15", "30", "60"]), [0, 16, 14, -1, 4]);
}

#[test]
fn cl_throttle_carries_on_a_bucket_that_redis_cell_wrote() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("cell-carry");
    // As redis-cell leaves a bucket of limit 5, one per 2 s, after 3 requests: TAT 6 s ahead, PX (10 ms
    // less, as Redis 7.0's module clock is in whole milliseconds).
    let tat = server_now_ns(&mut con) + 6_000_000_000 - 10_000_000;
    let _: () = redis::cmd("SET").arg(&key).arg(tat.to_string()).arg("PX").arg(6000).query(&mut con).unwrap();
    let r = call(&mut con, "CL.THROTTLE", &[&key, "4", "1", "2"]);
    assert_eq!(r[..3], [0, 5, 1], "three of five were taken, this takes the fourth");
    assert_eq!(call(&mut con, "CL.THROTTLE", &[&key, "4", "1", "2"])[..3], [0, 5, 0]);
    let denied = call(&mut con, "CL.THROTTLE", &[&key, "4", "1", "2"]);
    assert_eq!(denied[..3], [1, 5, 0]);
    assert!((1..=2).contains(&denied[3]), "about 2 s until one more: {denied:?}");
    let written: i64 = String::from_utf8(get(&mut con, &key).unwrap()).unwrap().parse().unwrap();
    assert_eq!(written, tat + 4_000_000_000, "two more intervals on redis-cell's TAT");
}

#[test]
fn cl_throttle_errors_are_redis_cells_to_the_letter() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("cell-errors");
    let usage = "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]";
    assert_eq!(rl_error::<&str>(&mut con, "CL.THROTTLE", &[]), usage);
    assert_eq!(rl_error(&mut con, "CL.THROTTLE", &[&key, "1", "1"]), usage);
    assert_eq!(rl_error(&mut con, "CL.THROTTLE", &[&key, "1", "1", "1", "1", "1"]), usage);
    let cases: &[(&[&str], &str)] = &[
        (&["x", "1", "1"], "Couldn't parse as integer: x"),
        (&["1", "1.5", "1"], "Couldn't parse as integer: 1.5"),
        (&["1", "1", "9223372036854775808"], "Couldn't parse as integer: 9223372036854775808"),
        (&["1", "1", "1", " 2"], "Couldn't parse as integer:  2"),
        (&["1", "0", "60"], "Zero rates are not supported"),
        (&["1", "1", "0"], "Zero rates are not supported"),
        (&["1", "2000000000", "1"], "Zero rates are not supported"),
        (&["-1", "1", "1"], "Negative values are not supported: max_burst"),
        (&["1", "1", "1", "-1"], "Negative values are not supported: quantity"),
    ];
    for (args, text) in cases {
        let mut full = vec![key.as_str()];
        full.extend_from_slice(args);
        assert_eq!(
            rl_error(&mut con, "CL.THROTTLE", &full),
            format!("Cell error: Store error: {text}"),
            "{args:?}"
        );
    }
    let huge = rl_error(&mut con, "CL.THROTTLE", &[&key, "1", "1", "9223372036854775807"]);
    assert!(huge.starts_with("Cell error: Store error: Rates this slow are not supported"), "{huge}");
    assert!(!exists(&mut con, &key), "no error writes");
    // Where redis-cell would crash the server, this answers as Dragonfly does.
    let list = unique_key("cell-list");
    let _: () = redis::cmd("RPUSH").arg(&list).arg("a").query(&mut con).unwrap();
    assert!(rl_error(&mut con, "CL.THROTTLE", &[&list, "1", "1", "1"]).starts_with("WRONGTYPE"));
    let text = unique_key("cell-text");
    let _: () = redis::cmd("SET").arg(&text).arg("abc").query(&mut con).unwrap();
    assert_eq!(
        rl_error(&mut con, "CL.THROTTLE", &[&text, "1", "1", "1"]),
        "ERR value is not an integer or out of range"
    );
    // RL.THROTTLE words its errors as the RL.* commands do.
    assert!(
        rl_error(&mut con, "RL.THROTTLE", &[&key]).contains("wrong number of arguments for 'rl.throttle'")
    );
    assert_eq!(
        rl_error(&mut con, "RL.THROTTLE", &[&key, "x", "1", "1"]),
        "ERR invalid max_burst: must be a whole number >= 0"
    );
}

#[test]
fn gcra_replies_as_cores_command_does() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("gcra");
    let replies: Vec<Vec<i64>> = (0..7).map(|_| call(&mut con, "GCRA", &[&key, "5", "1", "60"])).collect();
    assert_eq!(replies[0], [0, 6, 5, -1, 60]);
    assert_eq!(replies[1], [0, 6, 4, -1, 120]);
    assert_eq!(replies[5], [0, 6, 0, -1, 360]);
    assert_eq!(replies[6][..3], [1, 6, 0]);
    assert!((59..=60).contains(&replies[6][3]) && (359..=360).contains(&replies[6][4]), "{:?}", replies[6]);
    let fresh = unique_key("gcra-tokens");
    assert_eq!(call(&mut con, "GCRA", &[&fresh, "5", "1", "60", "TOKENS", "6"]), [0, 6, 0, -1, 360]);
    let fresh = unique_key("gcra-above");
    assert_eq!(call(&mut con, "GCRA", &[&fresh, "5", "1", "60", "tokens", "7"]), [1, 6, 6, -1, 0]);
    assert!(!exists(&mut con, &fresh), "a denial writes nothing");
    let fresh = unique_key("gcra-half");
    assert_eq!(call(&mut con, "GCRA", &[&fresh, "10", "1", "0.5"]), [0, 11, 10, -1, 1]);
    // Its keys are RL.TOKEN's: the same bucket.
    let inspected: Vec<Value> = redis::cmd("RL.INSPECT").arg(&key).query(&mut con).unwrap();
    assert_eq!(inspected[1], Value::SimpleString("RL.TOKEN".into()));
    assert_eq!(&get(&mut con, &key).unwrap()[..4], b"RLT\x01");
    assert!(pttl(&mut con, &key) > 0);
}

#[test]
fn gcra_errors_are_cores_to_the_letter_and_in_its_order() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = unique_key("gcra-errors");
    let arity = "ERR wrong number of arguments for 'gcra' command";
    assert_eq!(rl_error(&mut con, "GCRA", &[&key, "1", "1"]), arity);
    assert_eq!(rl_error(&mut con, "GCRA", &[&key, "1", "1", "1", "TOKENS", "1", "x"]), arity);
    let cases: &[(&[&str], &str)] = &[
        (&["-1", "1", "1"], "ERR value is out of range, must be positive"),
        (&["x", "0", "x"], "ERR value is out of range, must be positive"),
        (&["1", "0", "1"], "ERR value is out of range, value must between 1 and 9223372036854775807"),
        (&["1", "x", "1"], "ERR value is not an integer or out of range"),
        (&["1", "1", "x"], "ERR value is not a valid float"),
        (&["1", "1", "0"], "ERR period must be > 0 and < 1e12"),
        (&["1", "1", "-1"], "ERR period must be > 0 and < 1e12"),
        (&["1", "1", "1e12"], "ERR period must be > 0 and < 1e12"),
        (&["1", "1", "1", "FOO"], "ERR syntax error"),
        (&["1", "1", "1", "FOO", "1"], "ERR syntax error"),
        (&["1", "1", "1", "TOKENS"], "ERR Missing TOKENS value"),
        (&["1", "1", "1", "TOKENS", "0"], "ERR value is out of range, value must between 1 and 9223372036854775807"),
        (&["1", "1", "1", "TOKENS", "x"], "ERR value is not an integer or out of range"),
        (&["1", "1", "86400", "TOKENS", "200000000"], "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and TOKENS would cause an overflow"),
        (&["200000000", "1", "86400"], "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and max_burst would cause an overflow"),
        (&["1", "1", "2147483647", "TOKENS", "2147483647"], "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and TOKENS would cause an overflow"),
    ];
    for (args, text) in cases {
        let mut full = vec![key.as_str()];
        full.extend_from_slice(args);
        assert_eq!(rl_error(&mut con, "GCRA", &full), *text, "{args:?}");
    }
    assert!(!exists(&mut con, &key));
    // WRONGTYPE on keys of other types (a string that is not a bucket is one), before the overflow
    // errors, as core checks them.
    let list = unique_key("gcra-list");
    let _: () = redis::cmd("RPUSH").arg(&list).arg("a").query(&mut con).unwrap();
    let text = unique_key("gcra-text");
    let _: () = redis::cmd("SET").arg(&text).arg("123").query(&mut con).unwrap();
    for other in [&list, &text] {
        assert!(rl_error(&mut con, "GCRA", &[other, "1", "1", "1"]).starts_with("WRONGTYPE"));
        assert!(rl_error(&mut con, "GCRA", &[other, "200000000", "1", "86400"]).starts_with("WRONGTYPE"));
    }
}

#[test]
fn dialect_keys_are_counted_inspected_and_their_clock_faults_repaired() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let key = format!("{}:cell", unique_key("dialect-class"));
    for _ in 0..3 {
        call(&mut con, "CL.THROTTLE", &[&key, "1", "1", "60"]);
    }
    let inspected: Vec<Value> =
        redis::cmd("RL.INSPECT").arg(&key).arg(1).arg(1).arg(60).query(&mut con).unwrap();
    assert_eq!(inspected[1], Value::SimpleString("CL.THROTTLE".into()));
    let field = |name: &str| {
        let i = inspected.iter().position(|v| *v == Value::SimpleString(name.into())).unwrap();
        inspected[i + 1].clone()
    };
    assert_eq!(field("remaining"), Value::Int(0));
    let top: Vec<Value> = redis::cmd("RL.TOP").arg(100).query(&mut con).unwrap();
    assert!(format!("{top:?}").contains(&key), "RL.TOP lists the denied dialect key: {top:?}");
    let denied: u64 =
        info_field(&mut con, "ratelimit", "ratelimit_cl_throttle_denied").unwrap().parse().unwrap();
    assert!(denied >= 1);
    // A TAT an hour ahead (a clock that stepped back): an empty bucket now, not locked out for an hour.
    let ahead = unique_key("cell-ahead");
    let tat = server_now_ns(&mut con) + 3_600_000_000_000;
    let _: () = redis::cmd("SET").arg(&ahead).arg(tat.to_string()).query(&mut con).unwrap();
    let r = call(&mut con, "CL.THROTTLE", &[&ahead, "1", "1", "1"]);
    assert_eq!(r[..4], [1, 2, 0, 1], "limited for one interval, not an hour: {r:?}");
    assert!(pttl(&mut con, &ahead) > 0 && pttl(&mut con, &ahead) <= 3_000, "repaired, with an expiry");
}

#[test]
fn the_dialects_config_chooses_what_registers_and_is_fixed_at_load() {
    let Some(server) = Server::builder().args(&["dialects", "cl.throttle"]).own() else { return };
    let mut con = server.conn();
    assert_eq!(call(&mut con, "CL.THROTTLE", &["k", "1", "1", "1"])[0], 0);
    assert!(rl_error(&mut con, "GCRA", &["k2", "1", "1", "1"]).contains("unknown command"));
    assert!(rl_error(&mut con, "RL.THROTTLE", &["k3", "1", "1", "1"]).contains("unknown command"));
    assert_eq!(call(&mut con, "RL.TOKEN", &["k4", "1", "1", "1"])[0], 1, "the module's own commands load");
    let value: Vec<String> =
        redis::cmd("CONFIG").arg("GET").arg("ratelimit.dialects").query(&mut con).unwrap();
    assert_eq!(value[1], "cl.throttle");
    assert!(rl_error(&mut con, "CONFIG", &["SET", "ratelimit.dialects", "all"]).contains("immutable"));
    let log = std::fs::read_to_string(server.dir.join("server.log")).unwrap();
    assert!(log.contains("dialect skipped: gcra is not in ratelimit.dialects"), "{log}");
    // INFO shows the counters of what registered only.
    assert!(info_field(&mut con, "ratelimit", "ratelimit_gcra_allowed").is_none());
    assert!(info_field(&mut con, "ratelimit", "ratelimit_cl_throttle_allowed").is_some());

    let Some(none) = Server::builder().args(&["--ratelimit.dialects", "none"]).own() else { return };
    let mut con = none.conn();
    assert!(rl_error(&mut con, "CL.THROTTLE", &["k", "1", "1", "1"]).contains("unknown command"));
    assert_eq!(call(&mut con, "RL.TOKEN", &["k4", "1", "1", "1"])[0], 1);
}

#[test]
fn an_unknown_dialect_fails_the_load_with_a_clear_line() {
    if testkit::skip_when_external() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("rl-dialects-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("server.log");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = std::process::Command::new(testkit::server_binary())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--logfile"])
        .arg(&log)
        .arg("--loadmodule")
        .arg(testkit::module_path())
        .args(["dialects", "cl.throttle,redis-cell"])
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.is_some_and(|s| !s.success()), "the server must not start with a bad module config");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(text.contains("unknown dialect 'redis-cell'"), "{text}");
}

#[test]
fn dialects_declare_their_keys_and_categories() {
    let server = Server::builder().single();
    let mut con = server.conn();
    for (command, args) in [
        ("CL.THROTTLE", ["k", "1", "1", "1"]),
        ("RL.THROTTLE", ["k", "1", "1", "1"]),
        ("GCRA", ["k", "1", "1", "1"]),
    ] {
        let keys: Vec<String> =
            redis::cmd("COMMAND").arg("GETKEYS").arg(command).arg(&args[..]).query(&mut con).unwrap();
        assert_eq!(keys, ["k"], "{command}");
        let info: Value = redis::cmd("COMMAND").arg("INFO").arg(command).query(&mut con).unwrap();
        let text = format!("{info:?}").to_lowercase();
        assert!(text.contains("write") && text.contains("denyoom"), "{command}: {text}");
    }
}
