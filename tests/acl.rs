//! Security: the commands are in ACL category @ratelimit where the server supports module ACL
//! categories (Redis 7.2+, Valkey), so `+@ratelimit` grants rate limiting and nothing else, and
//! `-@ratelimit` takes it away. On Redis 7.0 the category does not exist; the test says so.

mod common;

use testkit::redis::{self, Value};
use testkit::Server;

fn connect_as(server: &Server, user: &str) -> redis::Connection {
    let mut con = server.conn();
    let _: () = redis::cmd("AUTH").arg(user).arg("pw").query(&mut con).expect("AUTH failed");
    con
}

fn error_code(con: &mut redis::Connection, command: &str, args: &[&str]) -> Option<String> {
    let mut cmd = redis::cmd(command);
    for a in args {
        cmd.arg(*a);
    }
    cmd.query::<Value>(con).err().and_then(|e| e.code().map(String::from))
}

/// docs/deployment.md's per-command line (Redis 7.0 has no module categories) names every RL.*
/// command of the contract but RL.RESETSTATS, and a user made by it runs the limiters with nothing
/// refused while other commands are.
#[test]
fn the_documented_per_command_line_works_on_every_version() {
    let Some(server) = Server::builder().own() else { return };
    if testkit::lua_engine() {
        return testkit::skip("the module's commands need the module");
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/deployment.md")).unwrap();
    let line = doc.split("<!-- module-acl -->\n```\n").nth(1).and_then(|b| b.lines().next()).unwrap();
    let granted: std::collections::BTreeSet<String> =
        line.split_whitespace().filter_map(|w| w.strip_prefix('+')).map(str::to_string).collect();
    let expected: std::collections::BTreeSet<String> = ratelimit_core::commands::COMMANDS
        .iter()
        .filter(|c| c.name.starts_with("RL.") && c.name != "RL.RESETSTATS")
        .filter(|c| c.reply != ratelimit_core::commands::ReplyForm::Dialect)
        .map(|c| c.name.to_lowercase())
        .collect();
    assert_eq!(granted, expected, "the line names the contract's commands");
    let mut admin = server.conn();
    let words: Vec<&str> =
        line.split_whitespace().skip(1).map(|w| if w == ">secret" { ">pw" } else { w }).collect();
    let _: () = redis::cmd("ACL").arg(&words).query(&mut admin).unwrap();
    let _: Value = redis::cmd("ACL").arg("LOG").arg("RESET").query(&mut admin).unwrap();
    let mut app = connect_as(&server, "app");
    for (command, args) in [
        ("RL.TOKEN", &["rl:t", "10", "5", "1"][..]),
        ("RL.FIXED", &["rl:f", "10", "60"]),
        ("RL.SLIDE", &["rl:s", "10", "60", "a"]),
        ("RL.ALL", &["rl:a", "SLIDECOUNT", "10", "60", "1"]),
        ("RL.ACQUIRE", &["rl:l", "3", "30", "h"]),
        ("RL.RELEASE", &["rl:l", "h"]),
        ("RL.INSPECT", &["rl:t"]),
        ("RL.TOP", &[]),
    ] {
        assert_eq!(error_code(&mut app, command, args), None, "{command}");
    }
    let log: Vec<Value> = redis::cmd("ACL").arg("LOG").query(&mut admin).unwrap();
    assert!(log.is_empty(), "ACL LOG: {log:?}");
    assert_eq!(error_code(&mut app, "GET", &["rl:t"]).as_deref(), Some("NOPERM"));
    assert_eq!(error_code(&mut app, "RL.TOKEN", &["other", "10", "5", "1"]).as_deref(), Some("NOPERM"));
}

#[test]
fn the_ratelimit_category_grants_rate_limiting_and_nothing_else() {
    let Some(server) = Server::builder().own() else { return };
    let mut admin = server.conn();
    let categories: Vec<String> = redis::cmd("ACL").arg("CAT").query(&mut admin).unwrap();
    if !categories.iter().any(|c| c == "ratelimit") {
        testkit::skip(
            "this server has no module ACL categories (Redis 7.0); the commands are not in @ratelimit",
        );
        return;
    }
    let in_category: Vec<String> = redis::cmd("ACL").arg("CAT").arg("ratelimit").query(&mut admin).unwrap();
    let mut in_category: Vec<String> = in_category.into_iter().map(|c| c.to_lowercase()).collect();
    in_category.sort();
    // Valkey 8 lists no module commands under a module category (it enforces it all the same).
    if !in_category.is_empty() {
        assert_eq!(
            in_category,
            [
                "cl.throttle",
                "gcra",
                "rl.acquire",
                "rl.all",
                "rl.fixed",
                "rl.hold",
                "rl.inspect",
                "rl.refund",
                "rl.release",
                "rl.renew",
                "rl.reserve",
                "rl.resetstats",
                "rl.settle",
                "rl.slide",
                "rl.slidecount",
                "rl.take",
                "rl.throttle",
                "rl.token",
                "rl.top"
            ]
        );
    }

    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@ratelimit")
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("other")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@all")
        .arg("-@ratelimit")
        .query(&mut admin)
        .unwrap();

    let mut app = connect_as(&server, "app");
    for (command, args) in [
        ("RL.TOKEN", vec!["k1", "5", "1", "1"]),
        ("RL.FIXED", vec!["k2", "5", "10"]),
        ("RL.SLIDE", vec!["k3", "5", "10", "id"]),
        ("RL.SLIDECOUNT", vec!["k4", "5", "10"]),
        ("RL.REFUND", vec!["TOKEN", "k1", "5", "1", "1"]),
    ] {
        assert_eq!(error_code(&mut app, command, &args), None, "app may call {command}");
    }
    for (command, args) in
        [("GET", vec!["k1"]), ("SET", vec!["k1", "x"]), ("DEL", vec!["k1"]), ("FLUSHALL", vec![])]
    {
        assert_eq!(
            error_code(&mut app, command, &args).as_deref(),
            Some("NOPERM"),
            "app may not call {command}"
        );
    }
    let mut other = connect_as(&server, "other");
    assert_eq!(error_code(&mut other, "RL.TOKEN", &["k1", "5", "1", "1"]).as_deref(), Some("NOPERM"));
    assert_eq!(error_code(&mut other, "GET", &["k1"]), None);
}

/// A server where `@ratelimit` exists before the module loads (Redis with the core GCRA command has it
/// built in; here a test-only module takes it first): the module loads, its commands join the
/// existing category and work, and the server says why in its log.
#[test]
fn loads_when_the_ratelimit_category_is_already_taken() {
    let Some(clash) = common::shim::build("aclclash") else { return };
    let Some(server) = Server::builder().preload(&[&clash]).own() else { return };
    let mut admin = server.conn();
    let modules: Value = redis::cmd("MODULE").arg("LIST").query(&mut admin).unwrap();
    let listed = format!("{modules:?}");
    assert!(listed.contains("aclclash") && listed.contains("ratelimit"), "both modules load: {listed}");
    let reply: Vec<i64> = redis::cmd("RL.TOKEN").arg("k").arg(10).arg(5).arg(1).query(&mut admin).unwrap();
    assert_eq!(reply, [1, 10, 9, 0, 200]);

    let categories: Vec<String> = redis::cmd("ACL").arg("CAT").query(&mut admin).unwrap();
    if !categories.iter().any(|c| c == "ratelimit") {
        testkit::skip("the category checks: this server has no module ACL categories (Redis 7.0)");
        return;
    }
    let log = std::fs::read_to_string(server.dir.join("server.log")).unwrap_or_default();
    assert!(log.contains("already exists"), "the log says the category was joined:\n{log}");
    // The commands are in the existing category: +@ratelimit grants them, -@ratelimit takes them away.
    for (user, grant) in [("app", "+@ratelimit"), ("ops", "-@ratelimit")] {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg("on")
            .arg(">pw")
            .arg("~*")
            .arg("+@all")
            .arg(grant)
            .query(&mut admin)
            .unwrap();
    }
    let mut app = connect_as(&server, "app");
    assert_eq!(error_code(&mut app, "RL.TOKEN", &["k2", "10", "5", "1"]), None);
    let mut ops = connect_as(&server, "ops");
    assert_eq!(error_code(&mut ops, "RL.TOKEN", &["k3", "10", "5", "1"]).as_deref(), Some("NOPERM"));
}
