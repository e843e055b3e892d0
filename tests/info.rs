//! Observability: `INFO ratelimit` counts each command's allowed and denied requests and its errors.

use testkit::redis::{self, Value};
use testkit::{info_field, Server};

#[test]
fn info_counts_outcomes_per_command() {
    let Some(server) = Server::builder().own() else { return };
    let mut con = server.conn();
    let call = |con: &mut redis::Connection, args: &[&str]| {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query::<Value>(con)
    };
    for _ in 0..5 {
        call(&mut con, &["RL.TOKEN", "k", "3", "0.01", "1"]).unwrap();
    }
    assert!(call(&mut con, &["RL.TOKEN", "k", "nope", "1", "1"]).is_err());
    call(&mut con, &["RL.FIXED", "f", "1", "10"]).unwrap();
    call(&mut con, &["RL.REFUND", "TOKEN", "k", "3", "0.01", "1"]).unwrap();
    let field = |con: &mut redis::Connection, name: &str| {
        info_field(con, "ratelimit", name).and_then(|v| v.parse::<u64>().ok())
    };
    assert_eq!(field(&mut con, "ratelimit_token_allowed"), Some(3));
    assert_eq!(field(&mut con, "ratelimit_token_denied"), Some(2));
    assert_eq!(field(&mut con, "ratelimit_token_errors"), Some(1));
    assert_eq!(field(&mut con, "ratelimit_fixed_allowed"), Some(1));
    assert_eq!(field(&mut con, "ratelimit_refund_allowed"), Some(1));
    assert_eq!(field(&mut con, "ratelimit_slide_allowed"), Some(0));
    let section: String = redis::cmd("INFO").arg("ratelimit").query(&mut con).unwrap();
    assert!(section.contains("# ratelimit_stats"), "{section}");
}

/// MODULE LIST shows the version of Cargo.toml as a number: major * 10000 + minor * 100 + patch.
#[test]
fn module_list_shows_the_crate_version() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let modules: Vec<Value> = redis::cmd("MODULE").arg("LIST").query(&mut con).unwrap();
    let parts: Vec<u32> = env!("CARGO_PKG_VERSION").split('.').map(|p| p.parse().unwrap()).collect();
    let expected = i64::from(parts[0] * 10_000 + parts[1] * 100 + parts[2]);
    let listed = format!("{modules:?}");
    assert!(listed.contains("ratelimit"), "{listed}");
    let version = modules
        .iter()
        .find_map(|m| {
            let fields: Vec<Value> = redis::from_redis_value(m.clone()).ok()?;
            let name = fields.iter().position(|f| matches!(f, Value::BulkString(b) if b == b"name"))?;
            (fields.get(name + 1)? == &Value::BulkString(b"ratelimit".to_vec())).then_some(())?;
            let ver = fields.iter().position(|f| matches!(f, Value::BulkString(b) if b == b"ver"))?;
            redis::from_redis_value::<i64>(fields.get(ver + 1)?.clone()).ok()
        })
        .expect("the ratelimit module in MODULE LIST");
    assert_eq!(version, expected);
}
