//! Replicas and AOF reloads end with exactly the primary's keys, values and expiry times.

mod common;

use common::*;
use testkit::Server;

#[test]
fn replica_digest_equals_primary_after_mixed_traffic() {
    let Some(primary) = Server::own(&["--repl-diskless-sync-delay", "0"]) else {
        return;
    };
    let replica = start_replica(&primary);
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let (allowed, denied) = mixed_token_traffic(&mut p, "rep", 400, 25);
    assert!(
        allowed > 50 && denied > 50,
        "the mix must have both: {allowed} allowed, {denied} denied"
    );
    wait_in_sync(&mut p, &mut r);
    assert!(dbsize(&mut p) > 0);
    assert_eq!(dump_strings(&mut p), dump_strings(&mut r));
    assert_eq!(digest(&mut p), digest(&mut r));
}

#[test]
fn aof_reload_reproduces_the_digest() {
    let Some(mut server) = Server::own(&["--appendonly", "yes", "--appendfsync", "always"]) else {
        return;
    };
    let mut con = server.conn();
    mixed_token_traffic(&mut con, "aof", 300, 20);
    let before = (dump_strings(&mut con), digest(&mut con));
    server.restart("NOSAVE");
    let mut con = server.conn();
    assert_eq!((dump_strings(&mut con), digest(&mut con)), before);
}
