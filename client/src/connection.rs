//! The connection to Redis: one server through redis-rs' `ConnectionManager` (reconnects by itself),
//! a primary found through Sentinel (redis-rs' Sentinel client finds it; this re-resolves it when its
//! connection breaks or it answers READONLY, a demoted primary), or Redis Cluster through its cluster
//! client (routes each command to its slot's node).
//!
//! Decisions that wait for replicas (`WAIT`) go over connections of their own: WAIT blocks the
//! connection it is sent on, and it waits for that connection's writes, so it is pipelined behind its
//! decision on a connection no other call shares at the same time.
//!
//! A restarted server: RESP3's disconnect notice says when the connection drops (also while no call
//! is under way); the next call after it, a call after a connection failure, and the breaker's probe
//! first check the connection with PING (re-established by the manager when dead), and a call whose
//! connection was refused is sent once more. Nothing else is resent: an RL.* call that may have
//! reached the server may have been charged, and a resend would charge it twice.

use crate::fallback::LocalLimiter;
use redis::aio::MultiplexedConnection;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{
    Cmd, IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind, RedisError, RedisResult, ServerErrorKind,
    Value,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

#[derive(Clone)]
pub(crate) enum Transport {
    Single(Single),
    /// The primary that Sentinel names, re-resolved after a failover.
    Sentinel(Watched),
    Cluster(Clustered),
    /// No Redis: every decision is made in this process (`LimiterBuilder::in_process`).
    Local(Arc<LocalLimiter>),
}

#[derive(Clone)]
pub(crate) struct Single {
    manager: ConnectionManager,
    /// The connection dropped or the last call failed on it: check it before the next command.
    suspect: Arc<AtomicBool>,
    /// For decisions that wait for replicas: the server, and its idle connections.
    client: redis::Client,
    idle: Arc<Mutex<Vec<MultiplexedConnection>>>,
    deadline: Duration,
}

/// Redis Cluster: the cluster client, and for decisions that wait for replicas, connections of their
/// own to each primary they went to.
#[derive(Clone)]
pub(crate) struct Clustered {
    con: ClusterConnection,
    /// For the breaker's probe, which asks on connections of its own.
    client: Arc<redis::cluster::ClusterClient>,
    /// The first node's connection settings (credentials, database), for the nodes' own connections.
    template: redis::ConnectionInfo,
    nodes: Arc<Mutex<std::collections::HashMap<String, Single>>>,
    /// The primary of each slot a waited decision went to, as last learned: asked once (CLIENT INFO),
    /// then corrected by MOVED and forgotten when its node does not answer.
    owners: Arc<Mutex<std::collections::HashMap<Route, (String, u16)>>>,
    deadline: Duration,
}

/// A primary behind Sentinel: the resolved one, until its connection fails or it answers READONLY.
#[derive(Clone)]
pub(crate) struct Watched {
    sentinel: Arc<tokio::sync::Mutex<SentinelClient>>,
    primary: Arc<RwLock<Option<Single>>>,
    deadline: Duration,
}

impl Transport {
    /// A manager that connects on first use, so a limiter can be built while Redis is down. Its
    /// connection attempts give up within `deadline`; the limiter bounds every call by it too.
    pub(crate) fn single(url: &str, deadline: Duration) -> RedisResult<Transport> {
        Ok(Transport::Single(Single::new(url.into_connection_info()?, deadline)?))
    }

    /// The primary of `service` as `sentinels` name it; nothing is connected before the first call.
    pub(crate) fn sentinel(sentinels: &[&str], service: &str, deadline: Duration) -> RedisResult<Transport> {
        let client =
            SentinelClient::build(sentinels.to_vec(), service.to_string(), None, SentinelServerType::Master)?;
        Ok(Transport::Sentinel(Watched {
            sentinel: Arc::new(tokio::sync::Mutex::new(client)),
            primary: Arc::new(RwLock::new(None)),
            deadline,
        }))
    }

    /// A Redis Cluster connection (connects now, to learn the slot map).
    pub(crate) async fn cluster(nodes: &[&str], deadline: Duration) -> RedisResult<Transport> {
        let template = nodes.first().copied().unwrap_or_default().into_connection_info()?;
        let client = redis::cluster::ClusterClientBuilder::new(nodes.iter().copied())
            .connection_timeout(deadline)
            .retries(1)
            .build()?;
        Ok(Transport::Cluster(Clustered {
            con: client.get_async_connection().await?,
            client: Arc::new(client),
            template,
            nodes: Arc::new(Mutex::new(std::collections::HashMap::new())),
            owners: Arc::new(Mutex::new(std::collections::HashMap::new())),
            deadline,
        }))
    }

    /// Sends `cmd`. With `check_first` (the breaker's probe), the connection is checked first.
    pub(crate) async fn query(&self, cmd: &Cmd, check_first: bool) -> RedisResult<Value> {
        match self {
            Transport::Single(single) => single.query(cmd, check_first).await,
            Transport::Sentinel(watched) => {
                watched.on_primary(async |p| p.query(cmd, check_first).await).await
            }
            Transport::Cluster(cluster) => cmd.query_async(&mut cluster.con.clone()).await,
            Transport::Local(_) => Err(RedisError::from((
                redis::ErrorKind::Client,
                "an in-process limiter has no Redis to send this command to",
            ))),
        }
    }

    /// Sends `cmd` followed by `WAIT replicas timeout` on a connection of their own (in a cluster, to
    /// the primary of `key`'s slot): the reply, and how many replicas acknowledged the writes it made.
    pub(crate) async fn query_waited(
        &self,
        cmd: &Cmd,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> RedisResult<(Value, i64)> {
        match self {
            Transport::Cluster(cluster) => cluster.query_waited(cmd, key, replicas, timeout).await,
            Transport::Single(single) => single.query_waited(cmd, replicas, timeout).await,
            Transport::Sentinel(watched) => {
                watched.on_primary(async |p| p.query_waited(cmd, replicas, timeout).await).await
            }
            Transport::Local(_) => Err(RedisError::from((
                redis::ErrorKind::Client,
                "an in-process limiter has no replicas to wait for",
            ))),
        }
    }

    /// The background probe's question while the breaker is open: does Redis answer again? One
    /// command on a connection of its own (a new one each time; in a cluster, a new cluster connection),
    /// never a decision: `RL.RELEASE` of a lease nobody holds, which writes nothing. Not PING: a server
    /// paused for writes (`CLIENT PAUSE WRITE`, as a failover does) and a demoted primary answer PING
    /// but cannot decide; they hold or refuse RL.RELEASE as they hold or refuse the decisions. The
    /// least-privileged user (`~rl:* +@ratelimit`) may run it. True when the server answered, an
    /// error reply included (only a missing answer, or READONLY, is an outage).
    pub(crate) async fn answers(&self) -> bool {
        let probe = probe_command();
        let result = match self {
            Transport::Single(single) => single.query_alone(&probe).await,
            Transport::Sentinel(watched) => watched.query_alone(&probe).await,
            // A cluster connection of its own: it learns the slot map afresh, so it finds a node
            // that answers when the shared connection still names a dead one.
            Transport::Cluster(cluster) => match cluster.client.get_async_connection().await {
                Ok(mut con) => probe.query_async::<Value>(&mut con).await,
                Err(e) => Err(e),
            },
            Transport::Local(_) => return true,
        };
        !result.is_err_and(|e| is_connection_failure(&e))
    }
}

/// `RL.RELEASE rl:probe probe`: a lease that is never taken (writes nothing, replies 0).
fn probe_command() -> Cmd {
    let mut cmd = redis::cmd("RL.RELEASE");
    cmd.arg("rl:probe").arg("probe");
    cmd
}

impl Clustered {
    /// The primary of `route`'s slot: as learned before, or as the cluster client routes it now,
    /// asked for its own address (`CLIENT INFO`'s `laddr`).
    async fn owner(&self, key: &str, route: Route) -> RedisResult<(String, u16)> {
        if let Some(owner) = self.owners.lock().ok().and_then(|o| o.get(&route).cloned()) {
            return Ok(owner);
        }
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        let client_info = redis::cmd("CLIENT").arg("INFO").clone();
        let mut con = self.con.clone();
        let info = match con.route_command(client_info.clone(), routing.clone()).await {
            Ok(info) => info,
            // After a failover the client's slot map may still name the dead primary, and a routed
            // command does not refresh it: a keyed command does (it follows MOVED and reconnects).
            Err(_) => {
                let _: RedisResult<Value> = redis::cmd("EXISTS").arg(key).query_async(&mut con).await;
                con.route_command(client_info, routing).await?
            }
        };
        let info: String = redis::from_redis_value(info)?;
        let owner = info
            .split_whitespace()
            .find_map(|field| field.strip_prefix("laddr="))
            .and_then(|a| a.rsplit_once(':'))
            .and_then(|(host, port)| {
                Some((host.trim_matches(['[', ']']).to_string(), port.parse::<u16>().ok()?))
            })
            .ok_or_else(|| RedisError::from((redis::ErrorKind::Client, "CLIENT INFO named no address")))?;
        self.learn(route, Some(owner.clone()));
        Ok(owner)
    }

    fn learn(&self, route: Route, owner: Option<(String, u16)>) {
        if let Ok(mut owners) = self.owners.lock() {
            match owner {
                Some(owner) => owners.insert(route, owner),
                None => owners.remove(&route),
            };
        }
    }

    /// This node's connections, made on first use.
    fn node_at(&self, (host, port): (String, u16)) -> RedisResult<Single> {
        let name = format!("{host}:{port}");
        if let Some(single) = self.nodes.lock().ok().and_then(|nodes| nodes.get(&name).cloned()) {
            return Ok(single);
        }
        let info = self.template.clone().set_addr(redis::ConnectionAddr::Tcp(host, port));
        let single = Single::new(info, self.deadline)?;
        if let Ok(mut nodes) = self.nodes.lock() {
            nodes.insert(name, single.clone());
        }
        Ok(single)
    }

    /// The decision and its WAIT on the primary of `key`'s slot. A MOVED answer (a failover, a slot
    /// moved) means the decision did not run: the slot's owner is corrected and it is sent once more
    /// to the node MOVED names. A node that does not answer is asked about again next time.
    async fn query_waited(
        &self,
        cmd: &Cmd,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> RedisResult<(Value, i64)> {
        let route = Route::with_key(key, SlotAddr::Master);
        let result = self.node_at(self.owner(key, route).await?)?.query_waited(cmd, replicas, timeout).await;
        if let Some(owner) = result.as_ref().err().and_then(moved_to) {
            self.learn(route, Some(owner.clone()));
            return self.node_at(owner)?.query_waited(cmd, replicas, timeout).await;
        }
        if result.as_ref().is_err_and(is_connection_failure) {
            self.learn(route, None);
        }
        result
    }
}

/// The node a MOVED error names (also inside a pipeline's error): its detail is `<slot> <host:port>`.
fn moved_to(e: &RedisError) -> Option<(String, u16)> {
    let errors = e.clone().into_server_errors()?;
    let (_, moved) = errors.iter().find(|(_, s)| s.kind() == Some(ServerErrorKind::Moved))?;
    let address = moved.details()?.split_whitespace().nth(1)?;
    let (host, port) = address.rsplit_once(':')?;
    Some((host.trim_matches(['[', ']']).to_string(), port.parse().ok()?))
}

impl Watched {
    /// The primary: the one resolved before, or the one Sentinel names now (redis-rs checks that it
    /// answers ROLE as a primary).
    async fn resolve(&self) -> RedisResult<Single> {
        if let Some(primary) = self.primary.read().ok().and_then(|p| p.clone()) {
            return Ok(primary);
        }
        let mut sentinel = self.sentinel.lock().await;
        // Another caller may have resolved it while this one waited for the lock.
        if let Some(primary) = self.primary.read().ok().and_then(|p| p.clone()) {
            return Ok(primary);
        }
        let client = sentinel.async_get_client().await?;
        let primary = Single::new(client.get_connection_info().clone(), self.deadline)?;
        if let Ok(mut slot) = self.primary.write() {
            *slot = Some(primary.clone());
        }
        Ok(primary)
    }

    /// `cmd` on a connection of its own to the primary Sentinel names now (asked again each time);
    /// when it answers and is not the primary in use, the next call asks Sentinel too.
    async fn query_alone(&self, cmd: &Cmd) -> RedisResult<Value> {
        let client = self.sentinel.lock().await.async_get_client().await?;
        let now = client.get_connection_info().addr().clone();
        let single = Single::new(client.get_connection_info().clone(), self.deadline)?;
        let result = single.query_alone(cmd).await;
        let in_use = self
            .primary
            .read()
            .ok()
            .and_then(|p| p.as_ref().map(|p| p.client.get_connection_info().addr().clone()));
        if result.is_ok() && in_use.is_some_and(|addr| addr != now) {
            if let Ok(mut slot) = self.primary.write() {
                *slot = None;
            }
        }
        result
    }

    /// `call` on the primary; after no answer, or READONLY (the primary was demoted), the next call
    /// asks Sentinel again.
    async fn on_primary<T>(&self, call: impl AsyncFnOnce(&Single) -> RedisResult<T>) -> RedisResult<T> {
        let primary = self.resolve().await?;
        let result = call(&primary).await;
        if result.as_ref().is_err_and(is_connection_failure) {
            if let Ok(mut slot) = self.primary.write() {
                *slot = None;
            }
        }
        result
    }
}

impl Single {
    fn new(info: redis::ConnectionInfo, deadline: Duration) -> RedisResult<Single> {
        let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(settings))?;
        let suspect = Arc::new(AtomicBool::new(false));
        let dropped = Arc::clone(&suspect);
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(deadline))
            .set_response_timeout(None)
            .set_number_of_retries(0)
            .set_max_delay(deadline)
            // RESP3 tells when the connection drops, even while no call is under way.
            .set_push_sender(move |push: PushInfo| {
                if push.kind == PushKind::Disconnection {
                    dropped.store(true, Ordering::Relaxed);
                }
                Ok::<(), std::convert::Infallible>(())
            });
        let manager = ConnectionManager::new_lazy_with_config(client.clone(), config)?;
        Ok(Single { manager, suspect, client, idle: Arc::new(Mutex::new(Vec::new())), deadline })
    }

    /// `cmd` and `WAIT` pipelined on an idle connection of their own (a new one when none is idle);
    /// the connection is kept for the next waited call unless it failed.
    async fn query_waited(&self, cmd: &Cmd, replicas: u32, timeout: Duration) -> RedisResult<(Value, i64)> {
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut con = match idle {
            Some(con) => con,
            None => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.deadline))
                    .set_response_timeout(None);
                self.client.get_multiplexed_async_connection_with_config(&config).await?
            }
        };
        let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone()).cmd("WAIT").arg(replicas).arg(millis);
        let result: RedisResult<(Value, i64)> = pipe.query_async(&mut con).await;
        if !result.as_ref().is_err_and(is_connection_failure) {
            if let Ok(mut idle) = self.idle.lock() {
                idle.push(con);
            }
        }
        result
    }

    /// `cmd` on a new connection of its own, dropped after: the probe's, which must not wait behind
    /// (or break) the connection the decisions use.
    async fn query_alone(&self, cmd: &Cmd) -> RedisResult<Value> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.deadline))
            .set_response_timeout(None);
        let mut con = self.client.get_multiplexed_async_connection_with_config(&config).await?;
        cmd.query_async(&mut con).await
    }

    async fn query(&self, cmd: &Cmd, check_first: bool) -> RedisResult<Value> {
        if check_first || self.suspect.load(Ordering::Relaxed) {
            if let Err(e) = self.check().await {
                self.suspect.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        let mut con = self.manager.clone();
        let result = match cmd.query_async(&mut con).await {
            // Refused: no connection, so nothing was written. The manager has started a new one.
            Err(e) if e.is_connection_refusal() => cmd.query_async(&mut con).await,
            other => other,
        };
        self.suspect.store(result.as_ref().is_err_and(is_connection_failure), Ordering::Relaxed);
        result
    }

    /// PING until the server answers, at most twice: the first may meet the dead connection of a
    /// server that went away (the manager then reconnects), the second goes over the new one. PING
    /// changes nothing, so sending it twice is harmless, unlike the limiter's commands.
    async fn check(&self) -> RedisResult<()> {
        let mut con = self.manager.clone();
        let mut attempt = 0;
        loop {
            attempt += 1;
            match redis::cmd("PING").query_async::<Value>(&mut con).await {
                Ok(_) => return Ok(()),
                // An error reply (a user without PING in its ACL) is the server answering too.
                Err(e) if !is_connection_failure(&e) => return Ok(()),
                Err(e) if attempt == 2 => return Err(e),
                Err(_) => {}
            }
        }
    }
}

/// A call that failed on the way to or from the server (no answer), as opposed to an error reply; and
/// READONLY, the answer of a primary that was demoted to a replica, which cannot decide either.
pub(crate) fn is_connection_failure(e: &RedisError) -> bool {
    e.code() == Some("READONLY")
        || e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}

/// An answer that says the limiter cannot work with this server as it is configured: the module's
/// command unknown (the module not loaded, the command renamed) or refused to this user (NOPERM).
/// Not an outage: waiting does not fix it.
pub(crate) fn is_configuration_fault(e: &RedisError) -> bool {
    let text = crate::reply_class::reply_text(e);
    e.code() == Some("NOPERM")
        || text.strip_prefix("ERR ").is_some_and(|d| d.starts_with(crate::reply_class::UNKNOWN_COMMAND))
}

#[cfg(test)]
mod tests {
    use super::moved_to;

    fn error(reply: &[u8]) -> redis::RedisError {
        redis::parse_redis_value(reply).unwrap().extract_error().unwrap_err()
    }

    #[test]
    fn a_moved_answer_names_its_node() {
        assert_eq!(moved_to(&error(b"-MOVED 3999 127.0.0.1:6381\r\n")), Some(("127.0.0.1".into(), 6381)));
        assert_eq!(moved_to(&error(b"-MOVED 3999 [::1]:7000\r\n")), Some(("::1".into(), 7000)));
        assert_eq!(moved_to(&error(b"-ERR MOVED 3999 127.0.0.1:6381\r\n")), None, "not a MOVED answer");
        assert_eq!(moved_to(&error(b"-MOVED 3999\r\n")), None, "no address");
    }
}
