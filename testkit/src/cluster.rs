//! A real Redis Cluster on loopback: 3 primaries with 1 replica each, the module loaded everywhere,
//! made with `redis-cli --cluster create`.

use crate::{info_field, wait_until, Server};
use redis::{cluster::ClusterClient, Connection};
use std::process::Command;

pub struct Cluster {
    pub nodes: Vec<Server>,
}

fn cluster_cli() -> String {
    std::env::var("RL_REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_string())
}

pub fn cli(args: &[&str]) -> String {
    let out = Command::new(cluster_cli()).args(args).output().expect("redis-cli is missing");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "redis-cli {args:?} failed: {text}");
    text
}

impl Cluster {
    pub fn start() -> Option<Cluster> {
        Cluster::start_with(false)
    }

    /// A cluster of stock servers (no module): for the Lua library.
    pub fn start_stock() -> Option<Cluster> {
        Cluster::start_with(true)
    }

    fn start_with(stock: bool) -> Option<Cluster> {
        if crate::skip_when_external() {
            return None;
        }
        let config = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
        ];
        let builder = || if stock { Server::builder().stock() } else { Server::builder() };
        let nodes: Vec<Server> = (0..6).map(|_| builder().args(&config).start()).collect();
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addresses.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"]);
        cli(&args);
        let cluster = Cluster { nodes };
        cluster.wait_healthy();
        Some(cluster)
    }

    /// Every node says the cluster is ok and every replica is linked to its primary.
    pub fn wait_healthy(&self) {
        for node in &self.nodes {
            let mut con = node.conn();
            wait_until("cluster_state:ok", || {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).unwrap_or_default();
                info.contains("cluster_state:ok")
            });
            wait_until("replication link", || {
                info_field(&mut con, "replication", "role").as_deref() == Some("master")
                    || info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up")
            });
        }
    }

    pub fn client(&self) -> redis::cluster::ClusterConnection {
        let urls: Vec<String> = self.nodes.iter().map(|n| n.url().to_string()).collect();
        ClusterClient::new(urls).and_then(|c| c.get_connection()).expect("cannot connect to the cluster")
    }

    pub fn primaries(&self) -> Vec<&Server> {
        self.nodes.iter().filter(|n| role(&mut n.conn()) == "master").collect()
    }

    /// The node that serves `key` now.
    pub fn owner(&self, key: &str) -> &Server {
        let slot: i64 =
            redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut self.nodes[0].conn()).unwrap();
        self.primaries()
            .into_iter()
            .find(|n| {
                let slots: Vec<redis::Value> =
                    redis::cmd("CLUSTER").arg("SLOTS").query(&mut n.conn()).unwrap_or_default();
                let me = n.port as i64;
                slots.iter().any(|range| match range {
                    redis::Value::Array(items) => match (&items[0], &items[1], &items[2]) {
                        (redis::Value::Int(lo), redis::Value::Int(hi), redis::Value::Array(primary)) => {
                            *lo <= slot
                                && slot <= *hi
                                && matches!(primary.get(1), Some(redis::Value::Int(p)) if *p == me)
                        }
                        _ => false,
                    },
                    _ => false,
                })
            })
            .expect("no primary serves the key's slot")
    }

    pub fn node_id(server: &Server) -> String {
        redis::cmd("CLUSTER").arg("MYID").query(&mut server.conn()).unwrap()
    }

    /// The replica of `primary`.
    pub fn replica_of(&self, primary: &Server) -> &Server {
        let id = Self::node_id(primary);
        self.nodes
            .iter()
            .find(|n| {
                let mut con = n.conn();
                role(&mut con) == "slave"
                    && info_field(&mut con, "replication", "master_port") == Some(primary.port.to_string())
                    && !id.is_empty()
            })
            .expect("the primary has no replica")
    }
}

pub fn role(con: &mut Connection) -> String {
    info_field(con, "replication", "role").unwrap_or_default()
}
