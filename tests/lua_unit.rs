//! The Lua library's own unit checks (lua/test/*_test.lua: the plain numbers, B's exact integers, D's
//! decimals and the argument grammar), run inside a stock server's Lua 5.1, the interpreter the library
//! runs in: each file, with the harness lua/test/check.lua, is put at the end of the library's `build()`
//! (where every module's locals are in scope) and sent with EVAL; the reply is the count of checks and
//! each failure.

mod common;

use std::path::Path;
use testkit::redis::{self, Connection};
use testkit::Server;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The library's source before its registration, with `checks` run at the end of `build()` and their
/// report as the script's reply.
fn script(checks: &str) -> String {
    let library = common::lua::source();
    let body: String = library
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with("-- REGISTER:"))
        .map(|l| format!("{l}\n"))
        .collect();
    const END_OF_BUILD: &str = "\n  return FUNCTIONS\nend\n";
    assert_eq!(body.matches(END_OF_BUILD).count(), 1, "the library's build() ends in `return FUNCTIONS`");
    let inserted = format!(
        "\n  do\n{}\n{checks}\n  return check.report()\n  end\n  return FUNCTIONS\nend\n",
        read("lua/test/check.lua")
    );
    format!(
        "{}\nif not floor then floor, char, byte = math.floor, string.char, string.byte end\nreturn build()\n",
        body.replace(END_OF_BUILD, &inserted)
    )
}

/// The count of checks run and the failures, as the server's Lua replied them.
fn run(con: &mut Connection, checks: &str) -> (i64, Vec<String>) {
    let reply: Vec<redis::Value> =
        redis::cmd("EVAL").arg(script(checks)).arg(0).query(con).expect("EVAL of the checks");
    let count = match &reply[0] {
        redis::Value::Int(n) => *n,
        other => panic!("the count of checks: {other:?}"),
    };
    let failures = reply[1..]
        .iter()
        .map(|v| redis::from_redis_value::<String>(v.clone()).expect("a failure's text"))
        .collect();
    (count, failures)
}

#[test]
fn the_harness_reports_a_failing_check() {
    let server = Server::builder().stock().start();
    let (count, failures) = run(
        &mut server.conn(),
        "check.eq(\"wrong on purpose\", B.add(1, 1), 3)\ncheck.eq(\"right\", B.add(1, 1), 2)",
    );
    assert_eq!(count, 2);
    assert_eq!(failures, vec!["wrong on purpose: got 2 (number), want 3".to_string()]);
    let (_, failures) =
        run(&mut server.conn(), "check.raises(\"no error\", function() return 1 end, \"ERR x\")");
    assert_eq!(failures.len(), 1, "{failures:?}");
}

#[test]
fn every_unit_check_passes_in_the_servers_lua() {
    let server = Server::builder().stock().start();
    let mut con = server.conn();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/test");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("lua/test")
        .map(|e| e.expect("an entry").file_name().into_string().expect("a name"))
        .filter(|n| n.ends_with("_test.lua"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    for file in files {
        let (count, failures) = run(&mut con, &read(&format!("lua/test/{file}")));
        assert!(count >= 10, "{file}: only {count} checks ran");
        assert!(
            failures.is_empty(),
            "{file}: {} of {count} checks failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
        eprintln!("{file}: {count} checks passed");
    }
}
