//! Reading who is limited, for admin pages and support: what one key holds (`RL.INSPECT`, read-only,
//! also on replicas) and the most denied keys (`RL.TOP`, per server: on a cluster, each node keeps its
//! own). "Why is my integration failing?" answered in seconds.

use crate::error::CallError;
use crate::limiter::Limiter;
use crate::policy::Policy;
use redis::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// What a limiter key holds, decoded by the module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// Which command wrote it: `RL.TOKEN`, `RL.FIXED`, `RL.SLIDECOUNT` or `RL.SLIDE`.
    pub limiter: String,
    /// Every integer field as the module reports it (`tat_ms`, `count`, `recorded`, `ttl_ms`, ...).
    pub fields: BTreeMap<String, i64>,
    /// Units available now (when inspected with the policy).
    pub remaining: Option<u64>,
    /// Until one unit is available (zero: now).
    pub retry_after: Option<Duration>,
    /// Until the limiter is back to its initial state.
    pub reset_after: Option<Duration>,
}

/// One of the most denied keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeniedKey {
    pub key: String,
    /// Denials counted (an overestimate by at most `error`).
    pub denied: u64,
    pub error: u64,
    /// Unix ms of the first denial tracked and of the last one.
    pub first_denied_ms: i64,
    pub last_denied_ms: i64,
    /// How long this key has been denied: a client denied for minutes is usually stuck in a retry loop.
    pub denied_for: Duration,
}

/// Field/value pairs from a RESP2 flat array or a RESP3 map.
fn pairs(value: Value) -> Result<Vec<(String, Value)>, CallError> {
    let bad = |v: &Value| CallError::Reply(format!("{v:?}"));
    let items: Vec<(Value, Value)> = match value {
        Value::Map(m) => m,
        Value::Array(flat) if flat.len() % 2 == 0 => {
            let mut it = flat.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        other => return Err(bad(&other)),
    };
    items
        .into_iter()
        .map(|(k, v)| redis::from_redis_value::<String>(k.clone()).map(|k| (k, v)).map_err(|_| bad(&k)))
        .collect()
}

fn ms(n: i64) -> Duration {
    Duration::from_millis(u64::try_from(n).unwrap_or(0))
}

impl Limiter {
    /// `RL.INSPECT key [params]`: what `key` holds, and with `policy`, what a request would meet now.
    /// None when the key does not exist (a full bucket, an empty window).
    pub async fn inspect(&self, key: &str, policy: Option<&Policy>) -> Result<Option<Inspection>, CallError> {
        // With the policy's parameters, as its command takes them: what a request would meet now.
        let reply = self.query(&crate::command::inspect(key, policy)).await?;
        if reply == Value::Nil {
            return Ok(None);
        }
        let mut inspection = Inspection {
            limiter: String::new(),
            fields: BTreeMap::new(),
            remaining: None,
            retry_after: None,
            reset_after: None,
        };
        for (name, value) in pairs(reply)? {
            match (name.as_str(), value) {
                ("limiter", v) => inspection.limiter = redis::from_redis_value(v).unwrap_or_default(),
                (_, Value::Int(n)) => {
                    match name.as_str() {
                        "remaining" => inspection.remaining = u64::try_from(n).ok(),
                        "retry_after_ms" => inspection.retry_after = (n >= 0).then(|| ms(n)),
                        "reset_after_ms" => inspection.reset_after = Some(ms(n)),
                        _ => {}
                    }
                    inspection.fields.insert(name, n);
                }
                _ => {}
            }
        }
        Ok(Some(inspection))
    }

    /// `RL.TOP count`: the most denied keys, most first. Needs the module (its statistics): with the
    /// Lua library as the engine, an error that says so, without a call.
    pub async fn top_denied(&self, count: usize) -> Result<Vec<DeniedKey>, CallError> {
        if matches!(self.chosen_engine().0, crate::Backend::Functions | crate::Backend::Scripts) {
            return Err(CallError::Usage(
                "RL.TOP needs the ratelimit module: the Lua library keeps no statistics of denied keys",
            ));
        }
        let reply = self.query(redis::cmd("RL.TOP").arg(count.max(1))).await?;
        let Value::Array(entries) = reply else { return Err(CallError::Reply(format!("{reply:?}"))) };
        entries
            .into_iter()
            .map(|entry| {
                let fields: BTreeMap<String, Value> = pairs(entry)?.into_iter().collect();
                let int = |name: &str| {
                    fields.get(name).and_then(|v| redis::from_redis_value::<i64>(v.clone()).ok()).unwrap_or(0)
                };
                let key = fields
                    .get("key")
                    .and_then(|v| redis::from_redis_value::<String>(v.clone()).ok())
                    .unwrap_or_default();
                Ok(DeniedKey {
                    key,
                    denied: int("denied") as u64,
                    error: int("error") as u64,
                    first_denied_ms: int("first_denied_ms"),
                    last_denied_ms: int("last_denied_ms"),
                    denied_for: ms(int("denied_for_ms")),
                })
            })
            .collect()
    }
}

impl Limiter {
    /// What an admin page shows for one key: its state now (RL.INSPECT with `policy`) and its recent
    /// denials (its entry among the `RL.TOP` 32, if any), as JSON. A failed read shows as nulls.
    pub async fn report(&self, key: &str, policy: &Policy) -> serde_json::Value {
        let state = self.inspect(key, Some(policy)).await.ok().flatten();
        let top = self.top_denied(32).await.unwrap_or_default();
        let denied = top.iter().find(|d| d.key == key);
        let ms = |d: Duration| d.as_millis() as u64;
        serde_json::json!({
            "key": key,
            "remaining": state.as_ref().and_then(|s| s.remaining),
            "retry_after_ms": state.as_ref().and_then(|s| s.retry_after).map(ms),
            "reset_after_ms": state.as_ref().and_then(|s| s.reset_after).map(ms),
            "recent_denials": denied.map(|d| d.denied),
            "denied_for_ms": denied.map(|d| ms(d.denied_for)),
        })
    }
}
