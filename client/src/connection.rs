//! The connection to Redis: one server through redis-rs' `ConnectionManager` (reconnects by itself) or
//! Redis Cluster through its cluster client (routes each command to its slot's node).
//!
//! A restarted server: RESP3's disconnect notice says when the connection drops (also while no call
//! is under way); the next call after it, a call after a connection failure, and the breaker's probe
//! first check the connection with PING (re-established by the manager when dead), and a call whose
//! connection was refused is sent once more. Nothing else is resent: an RL.* call that may have
//! reached the server may have been charged, and a resend would charge it twice.

use crate::fallback::LocalLimiter;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind, RedisError, RedisResult, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub(crate) enum Backend {
    Single(Single),
    Cluster(ClusterConnection),
    /// No Redis: every decision is made in this process (`LimiterBuilder::in_process`).
    Local(Arc<LocalLimiter>),
}

#[derive(Clone)]
pub(crate) struct Single {
    manager: ConnectionManager,
    /// The connection dropped or the last call failed on it: check it before the next command.
    suspect: Arc<AtomicBool>,
}

impl Backend {
    /// A manager that connects on first use, so a limiter can be built while Redis is down. Its
    /// connection attempts give up within `deadline`; the limiter bounds every call by it too.
    pub(crate) fn single(url: &str, deadline: Duration) -> RedisResult<Backend> {
        let info = url.into_connection_info()?;
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
        let manager = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Backend::Single(Single { manager, suspect }))
    }

    /// A Redis Cluster connection (connects now, to learn the slot map).
    pub(crate) async fn cluster(nodes: &[&str], deadline: Duration) -> RedisResult<Backend> {
        let client = redis::cluster::ClusterClientBuilder::new(nodes.iter().copied())
            .connection_timeout(deadline)
            .retries(1)
            .build()?;
        Ok(Backend::Cluster(client.get_async_connection().await?))
    }

    /// Sends `cmd`. With `check_first` (the breaker's probe), the connection is checked first.
    pub(crate) async fn query(&self, cmd: &Cmd, check_first: bool) -> RedisResult<Value> {
        match self {
            Backend::Single(single) => single.query(cmd, check_first).await,
            Backend::Cluster(con) => cmd.query_async(&mut con.clone()).await,
            Backend::Local(_) => Err(RedisError::from((
                redis::ErrorKind::Client,
                "an in-process limiter has no Redis to send this command to",
            ))),
        }
    }
}

impl Single {
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

/// A call that failed on the way to or from the server (no answer), as opposed to an error reply.
pub(crate) fn is_connection_failure(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}
