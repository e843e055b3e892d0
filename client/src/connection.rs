//! The connection to Redis: one server through redis-rs' `ConnectionManager` (reconnects by itself) or
//! Redis Cluster through its cluster client (routes each command to its slot's node).

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, RedisResult, Value};
use std::time::Duration;

#[derive(Clone)]
pub(crate) enum Backend {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Backend {
    /// A manager that connects on first use, so a limiter can be built while Redis is down. Its
    /// connection attempts give up within `deadline`; the limiter bounds every call by it too.
    pub(crate) fn single(url: &str, deadline: Duration) -> RedisResult<Backend> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(deadline))
            .set_response_timeout(None)
            .set_number_of_retries(0)
            .set_max_delay(deadline);
        Ok(Backend::Single(ConnectionManager::new_lazy_with_config(client, config)?))
    }

    /// A Redis Cluster connection (connects now, to learn the slot map).
    pub(crate) async fn cluster(nodes: &[&str], deadline: Duration) -> RedisResult<Backend> {
        let client = redis::cluster::ClusterClientBuilder::new(nodes.iter().copied())
            .connection_timeout(deadline)
            .retries(1)
            .build()?;
        Ok(Backend::Cluster(client.get_async_connection().await?))
    }

    pub(crate) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Backend::Single(con) => cmd.query_async(&mut con.clone()).await,
            Backend::Cluster(con) => cmd.query_async(&mut con.clone()).await,
        }
    }
}
