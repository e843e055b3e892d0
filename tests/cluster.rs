//! Redis Cluster: 3 primaries with a replica each, the module loaded everywhere. Buckets spread over
//! all primaries stay exact through a cluster-aware client, multi-key calls across slots get
//! CROSSSLOT, and resharding and failover keep every bucket's state (no client gets a fresh burst).

mod common;

use common::calls::token;
use common::cluster::{cli, role, Cluster};
use common::wait_until;
use testkit::redis::{self, ConnectionLike, Value};
use testkit::{info_field, Server};

const KEYS: usize = 200;

fn dbsize(server: &Server) -> i64 {
    redis::cmd("DBSIZE").query(&mut server.conn()).unwrap()
}

/// Takes 3 tokens from each of KEYS buckets, and checks every bucket reports 7 left.
fn fill(con: &mut impl ConnectionLike) {
    for i in 0..KEYS {
        assert_eq!(token(con, &format!("user:{i}"), 10, "0.001", 3).head(), (true, 10, 7));
    }
}

fn assert_state_kept(con: &mut impl ConnectionLike, when: &str) {
    for i in 0..KEYS {
        let peek = token(con, &format!("user:{i}"), 10, "0.001", 0);
        assert_eq!(peek.head(), (true, 10, 7), "user:{i} after {when}: no fresh burst, no lost tokens");
    }
}

#[test]
fn buckets_spread_over_all_primaries_stay_exact() {
    let Some(cluster) = Cluster::start() else { return };
    let mut con = cluster.client();
    for i in 0..KEYS {
        let key = format!("client:{i}");
        let allowed = (0..12).filter(|_| token(&mut con, &key, 10, "0.001", 1).allowed).count();
        assert_eq!(allowed, 10, "{key}");
    }
    for primary in cluster.primaries() {
        assert!(dbsize(primary) > KEYS as i64 / 10, "every primary holds buckets");
    }
}

#[test]
fn multi_key_calls_need_one_slot() {
    let Some(cluster) = Cluster::start() else { return };
    let owner = cluster.owner("a");
    let mut con = owner.conn();
    let err = redis::cmd("RL.TOKEN")
        .arg("a")
        .arg(5)
        .arg(1)
        .arg(1)
        .arg("b")
        .arg(5)
        .arg(1)
        .arg(1)
        .query::<Value>(&mut con);
    assert_eq!(err.expect_err("keys in two slots").code(), Some("CROSSSLOT"));
    let tagged = cluster.owner("{user:1}:route");
    let r: Vec<i64> = redis::cmd("RL.TOKEN")
        .arg("{user:1}:route")
        .arg(5)
        .arg(1)
        .arg(1)
        .arg("{user:1}:global")
        .arg(9)
        .arg(1)
        .arg(1)
        .query(&mut tagged.conn())
        .expect("hash-tagged keys share a slot");
    assert_eq!(r.len(), 6);
    // RL.ALL: the server finds every group's key (getkeys-api), so keys in two slots are refused ...
    let err = redis::cmd("RL.ALL")
        .arg("a")
        .arg("SLIDE")
        .arg(5)
        .arg(60)
        .arg("id")
        .arg("DEDUP")
        .arg("b")
        .arg("TOKEN")
        .arg(5)
        .arg(1)
        .arg(1)
        .query::<Value>(&mut con);
    assert_eq!(err.expect_err("keys in two slots").code(), Some("CROSSSLOT"));
    // ... and the cluster client routes it by its first argument, the first group's key.
    let mut routed = cluster.client();
    for user in 0..20 {
        let (route, global) = (format!("{{user:{user}}}:login"), format!("{{user:{user}}}:all"));
        let lease = format!("{{user:{user}}}:lease");
        let r: Vec<i64> = redis::cmd("RL.ALL")
            .arg(&route)
            .arg("SLIDE")
            .arg(5)
            .arg(60)
            .arg("req")
            .arg(&global)
            .arg("TOKEN")
            .arg(10)
            .arg(1)
            .arg(1)
            .arg(&lease)
            .arg("ACQUIRE")
            .arg(8)
            .arg(60)
            .arg("worker")
            .arg("WEIGHT")
            .arg(2)
            .query(&mut routed)
            .expect("routed to the slot's owner");
        assert_eq!(r, [1, 5, 4, 0, 60000, 1], "{route}");
        let released: i64 =
            redis::cmd("RL.RELEASE").arg(&lease).arg("worker").query(&mut routed).expect("routed RL.RELEASE");
        assert_eq!(released, 1, "the lease was taken on the slot's owner, with the other limits");
    }
}

#[test]
fn resharding_and_failover_keep_every_bucket() {
    let Some(cluster) = Cluster::start() else { return };
    let mut con = cluster.client();
    fill(&mut con);

    // Move 3000 slots, with their live keys, from one primary to another.
    let primaries = cluster.primaries();
    let (from, to) = (primaries[0], primaries[1]);
    let (from_keys, to_keys) = (dbsize(from), dbsize(to));
    let (from_id, to_id) = (Cluster::node_id(from), Cluster::node_id(to));
    let entry = format!("127.0.0.1:{}", from.port);
    cli(&[
        "--cluster",
        "reshard",
        &entry,
        "--cluster-from",
        &from_id,
        "--cluster-to",
        &to_id,
        "--cluster-slots",
        "3000",
        "--cluster-yes",
    ]);
    cluster.wait_healthy();
    assert!(dbsize(from) < from_keys && dbsize(to) > to_keys, "keys moved with their slots");
    let mut con = cluster.client();
    assert_state_kept(&mut con, "resharding");

    // Fail over the primary that now holds the most buckets to its replica.
    let primary = *cluster.primaries().iter().max_by_key(|p| dbsize(p)).unwrap();
    let replica = cluster.replica_of(primary);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut primary.conn()).unwrap();
    assert_eq!(acked, 1);
    let _: () = redis::cmd("CLUSTER").arg("FAILOVER").query(&mut replica.conn()).unwrap();
    wait_until("the replica to take over", || role(&mut replica.conn()) == "master");
    wait_until("the old primary to follow", || {
        info_field(&mut primary.conn(), "replication", "master_port") == Some(replica.port.to_string())
    });
    cluster.wait_healthy();
    let mut con = cluster.client();
    assert_state_kept(&mut con, "failover");
    assert_eq!(
        token(&mut con, "user:0", 10, "0.001", 7).head(),
        (true, 10, 0),
        "and the buckets go on from there"
    );
}
