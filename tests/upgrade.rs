//! Upgrading in place: `MODULE UNLOAD ratelimit` and `MODULE LOAD` of another build keep every bucket,
//! window, log, lease and dialect key, because the state is plain strings and the module holds no
//! timers, threads, data types or blocked clients that would make the server refuse the unload. What
//! does not survive is stated in docs/deployment.md: INFO counters, RL.TOP, configs set with CONFIG SET.
//!
//! The build loaded second is this one copied to another path (a server maps a loaded file, so an
//! upgrade always loads a new file). `RL_UPGRADE_FROM` names an older build to upgrade *from* (0.1, for
//! instance: `.ci/run` builds it from git history); the state is then written by that build, with the
//! commands it has.

mod common;

use common::calls::rl;
use testkit::redis::{self, Connection, Value};
use testkit::{info_field, unique_key, Server};

fn module_cmd(con: &mut Connection, args: &[&str]) -> redis::RedisResult<Value> {
    redis::cmd("MODULE").arg(args).query(con)
}

#[test]
fn unload_and_load_keep_every_limiters_state() {
    if testkit::skip_when_external() {
        return;
    }
    let old = std::env::var("RL_UPGRADE_FROM").ok().filter(|p| !p.is_empty());
    let server = Server::builder().args(&["--enable-module-command", "local"]).start();
    let mut con = server.conn();
    if let Some(path) = &old {
        module_cmd(&mut con, &["UNLOAD", "ratelimit"]).unwrap();
        module_cmd(&mut con, &["LOAD", path]).unwrap();
    }
    // The commands the build that writes the state has (an older one may lack the newer commands).
    let has = |con: &mut Connection, name: &str| {
        let info: Vec<Value> = redis::cmd("COMMAND").arg("INFO").arg(name).query(con).unwrap();
        !matches!(info.first(), None | Some(Value::Nil))
    };
    let (leases, dialects) =
        (has(&mut con, "RL.ACQUIRE"), has(&mut con, "CL.THROTTLE") && has(&mut con, "GCRA"));
    let (token, fixed, count, slide, lease, cell, gcra) = (
        unique_key("up-token"),
        unique_key("up-fixed"),
        unique_key("up-count"),
        unique_key("up-slide"),
        unique_key("up-lease"),
        unique_key("up-cell"),
        unique_key("up-gcra"),
    );
    for i in 0..3 {
        rl(&mut con, "RL.TOKEN", &[&token, "10", "0.01", "1"]);
        rl(&mut con, "RL.FIXED", &[&fixed, "10", "600"]);
        rl(&mut con, "RL.SLIDECOUNT", &[&count, "10", "600"]);
        rl(&mut con, "RL.SLIDE", &[&slide, "10", "600", &format!("r{i}")]);
        if dialects {
            let _: Vec<i64> =
                redis::cmd("CL.THROTTLE").arg(&cell).arg(9).arg(1).arg(100).query(&mut con).unwrap();
            let _: Vec<i64> = redis::cmd("GCRA").arg(&gcra).arg(9).arg(1).arg(100).query(&mut con).unwrap();
        }
    }
    if leases {
        rl(&mut con, "RL.ACQUIRE", &[&lease, "5", "600", "holder-a"]);
    }
    let _: () = redis::cmd("CONFIG").arg("SET").arg("ratelimit.top-size").arg("7").query(&mut con).unwrap();
    let dump_before: Vec<Option<Vec<u8>>> = [&token, &fixed, &count, &slide, &lease, &cell, &gcra]
        .iter()
        .map(|k| redis::cmd("GET").arg(*k).query(&mut con).unwrap())
        .collect();

    // The upgrade: unload, then load a new file of the module with its load-time arguments.
    let copy = server.dir.join("libredis_ratelimit-next.so");
    std::fs::copy(testkit::module_path(), &copy).unwrap();
    let unloaded = module_cmd(&mut con, &["UNLOAD", "ratelimit"]);
    assert!(unloaded.is_ok(), "the server refuses to unload the module: {unloaded:?}");
    let missing = redis::cmd("RL.TOKEN").arg(&token).arg(10).arg("0.01").arg(1).query::<Value>(&mut con);
    assert!(missing.is_err(), "no RL.* command between the unload and the load");
    let copy_arg = copy.display().to_string();
    module_cmd(&mut con, &["LOAD", &copy_arg, "class-separator", ":"]).unwrap();

    let dump_after: Vec<Option<Vec<u8>>> = [&token, &fixed, &count, &slide, &lease, &cell, &gcra]
        .iter()
        .map(|k| redis::cmd("GET").arg(*k).query(&mut con).unwrap())
        .collect();
    assert_eq!(dump_before, dump_after, "the keys are untouched by the unload and the load");
    assert_eq!(rl(&mut con, "RL.TOKEN", &[&token, "10", "0.01", "1"]).head(), (true, 10, 6));
    assert_eq!(rl(&mut con, "RL.FIXED", &[&fixed, "10", "600"]).head(), (true, 10, 6));
    assert_eq!(rl(&mut con, "RL.SLIDECOUNT", &[&count, "10", "600"]).head(), (true, 10, 6));
    assert_eq!(rl(&mut con, "RL.SLIDE", &[&slide, "10", "600", "r3"]).head(), (true, 10, 6));
    if leases {
        let held = rl(&mut con, "RL.ACQUIRE", &[&lease, "5", "600", "holder-b"]);
        assert_eq!(held.head(), (true, 5, 3), "holder-a's lease is still held");
        let released: i64 = redis::cmd("RL.RELEASE").arg(&lease).arg("holder-a").query(&mut con).unwrap();
        assert_eq!(released, 1, "and its holder can still release it");
    }
    if dialects {
        let c: Vec<i64> =
            redis::cmd("CL.THROTTLE").arg(&cell).arg(9).arg(1).arg(100).query(&mut con).unwrap();
        assert_eq!(c[..3], [0, 10, 6]);
        let g: Vec<i64> = redis::cmd("GCRA").arg(&gcra).arg(9).arg(1).arg(100).query(&mut con).unwrap();
        assert_eq!(g[..3], [0, 10, 6]);
    }
    // What does not survive: the counters start again, and CONFIG SET values give way to the load's.
    assert_eq!(info_field(&mut con, "ratelimit", "ratelimit_token_allowed").as_deref(), Some("1"));
    let top: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("ratelimit.top-size").query(&mut con).unwrap();
    assert_eq!(top[1], "32", "a value set with CONFIG SET is not carried over");
}
