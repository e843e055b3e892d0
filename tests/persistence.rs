//! Replicas and AOF reloads end with exactly the primary's keys, values and expiry times.

mod common;

use common::calls::{slide, token};
use common::*;
use testkit::Server;

#[test]
fn replica_digest_equals_primary_after_mixed_traffic() {
    let Some(primary) = Server::builder().args(&["--repl-diskless-sync-delay", "0"]).own() else {
        return;
    };
    let replica = start_replica(&primary);
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let (allowed, denied) = mixed_token_traffic(&mut p, "rep", 400, 25);
    assert!(allowed > 50 && denied > 50, "the mix must have both: {allowed} allowed, {denied} denied");
    assert_every_kind_written(&mut p, "rep");
    wait_in_sync(&mut p, &mut r);
    assert!(dbsize(&mut p) > 0);
    assert_eq!(dump_strings(&mut p), dump_strings(&mut r));
    assert_eq!(digest(&mut p), digest(&mut r));
    let refused = testkit::redis::cmd("RL.TOKEN").arg("x").arg(1).arg(1).arg(1).query::<Vec<i64>>(&mut r);
    assert_eq!(refused.expect_err("a write on a replica").code(), Some("READONLY"));
}

#[test]
fn aof_reload_reproduces_the_digest() {
    let Some(mut server) = Server::builder().args(&["--appendonly", "yes", "--appendfsync", "always"]).own()
    else {
        return;
    };
    let mut con = server.conn();
    mixed_token_traffic(&mut con, "aof", 300, 20);
    let before = (dump_strings(&mut con), digest(&mut con));
    server.restart("NOSAVE");
    let mut con = server.conn();
    assert_eq!((dump_strings(&mut con), digest(&mut con)), before);
}

#[test]
fn a_large_sliding_log_replicates_a_few_bytes_per_request() {
    let Some(primary) = Server::builder().args(&["--repl-diskless-sync-delay", "0"]).own() else {
        return;
    };
    let replica = start_replica(&primary);
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let mut fill = testkit::redis::pipe();
    for i in 0..5_000 {
        fill.cmd("RL.SLIDE").arg("big").arg(10_000).arg(3600).arg(i).ignore();
    }
    fill.exec(&mut p).unwrap();
    let offset = |c: &mut _| {
        testkit::info_field(c, "replication", "master_repl_offset").unwrap().parse::<i64>().unwrap()
    };
    let before = offset(&mut p);
    for i in 0..100 {
        assert!(slide(&mut p, "big", 10_000, "3600", &i.to_string()).allowed);
    }
    let per_request = (offset(&mut p) - before) / 100;
    // The log holds 40 kB; each request sends one SETRANGE of one 8-byte slot (and rarely a rewrite).
    assert!(per_request < 400, "{per_request} bytes replicated per request");
    wait_in_sync(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
}

#[test]
fn rdb_save_and_restart_keep_every_limiter() {
    let Some(mut server) = Server::builder().own() else {
        return;
    };
    let mut con = server.conn();
    mixed_token_traffic(&mut con, "rdb", 300, 20);
    let before = (dump_strings(&mut con), digest(&mut con));
    server.restart("SAVE");
    let mut con = server.conn();
    assert_eq!((dump_strings(&mut con), digest(&mut con)), before);
}

#[test]
fn aof_rewrite_keeps_every_limiter() {
    let Some(mut server) = Server::builder().args(&["--appendonly", "yes", "--appendfsync", "always"]).own()
    else {
        return;
    };
    let mut con = server.conn();
    mixed_token_traffic(&mut con, "rewrite", 200, 20);
    let _: () = testkit::redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
    wait_until("the AOF rewrite", || {
        testkit::info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && testkit::info_field(&mut con, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
    // More traffic after the rewrite lands in the new incremental AOF.
    mixed_token_traffic(&mut con, "rewrite", 100, 20);
    let before = (dump_strings(&mut con), digest(&mut con));
    server.restart("NOSAVE");
    let mut con = server.conn();
    assert_eq!((dump_strings(&mut con), digest(&mut con)), before);
}

#[test]
fn dump_and_restore_move_a_limiter_with_its_state() {
    let server = Server::builder().single();
    let mut con = server.conn();
    let (from, to) = (testkit::unique_key("dump-from"), testkit::unique_key("dump-to"));
    for _ in 0..3 {
        let _: Vec<i64> =
            testkit::redis::cmd("RL.TOKEN").arg(&from).arg(5).arg("0.01").arg(1).query(&mut con).unwrap();
    }
    let dump: Vec<u8> = testkit::redis::cmd("DUMP").arg(&from).query(&mut con).unwrap();
    let ttl: i64 = testkit::redis::cmd("PTTL").arg(&from).query(&mut con).unwrap();
    let _: () = testkit::redis::cmd("RESTORE").arg(&to).arg(ttl).arg(dump).query(&mut con).unwrap();
    let peek = token(&mut con, &to, 5, "0.01", 0);
    assert_eq!(peek.head(), (true, 5, 2), "the restored bucket has the same tokens");
}
