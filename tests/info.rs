//! Observability: `INFO ratelimit` counts each command's allowed and denied requests and its errors.

use testkit::redis::{self, Value};
use testkit::{info_field, Server};

#[test]
fn info_counts_outcomes_per_command() {
    let Some(server) = Server::own(&[]) else { return };
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
