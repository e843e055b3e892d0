//! Reserving tokens in batches (taking tokens from Redis a batch at a time, to save round trips): one `RL.TOKEN key .. batch` call
//! takes `batch` tokens into a local counter, and the next `batch - 1` requests for that key are
//! served from it without a round trip. Unused tokens go back with `RL.REFUND` when the lease ends or
//! on [`release`](TokenReserve::release).
//!
//! The trade-off: tokens held by one instance cannot be used by another while held. With `n`
//! instances, up to `n * (batch - 1)` tokens can sit unused in local counters, so a caller may be
//! denied early by that much (never admitted beyond the limit: every token served was taken from
//! Redis). When fewer than `batch` tokens are left, a reservation falls back to a single token, so a
//! nearly empty bucket still serves requests one at a time. Keep `batch` small next to the capacity.

use crate::decision::Decision;
use crate::error::{CallError, PolicyError};
use crate::limiter::Limiter;
use crate::policy::Policy;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A token bucket policy whose tokens are reserved from Redis in batches.
pub struct TokenReserve {
    limiter: Limiter,
    policy: Policy,
    batch: u64,
    lease: Duration,
    held: Mutex<HashMap<String, Held>>,
}

struct Held {
    tokens: u64,
    since: Instant,
    /// Redis' last answer for this key, for the fields of locally served decisions.
    last: Decision,
}

impl TokenReserve {
    /// `batch` tokens per reservation (1 to the policy's capacity), held at most `lease` before the
    /// unused ones are given back.
    pub fn new(
        limiter: Limiter,
        policy: Policy,
        batch: u64,
        lease: Duration,
    ) -> Result<TokenReserve, PolicyError> {
        if batch == 0 || batch > policy.limit() {
            return Err(PolicyError::new("batch", "must be between 1 and the capacity"));
        }
        if policy.kind() != ratelimit_core::kind::LimiterKind::TokenBucket {
            return Err(PolicyError::new("policy", "batches are reserved from token buckets only"));
        }
        Ok(TokenReserve { limiter, policy, batch, lease, held: Mutex::new(HashMap::new()) })
    }

    /// One token for `key`: from the local counter when it holds some, otherwise from Redis.
    pub async fn acquire(&self, key: &str) -> Decision {
        let now = Instant::now();
        let expired = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            match held.get_mut(key) {
                Some(h) if h.tokens > 0 && now.duration_since(h.since) < self.lease => {
                    h.tokens -= 1;
                    return Decision { remaining: h.last.remaining + h.tokens, ..h.last.clone() };
                }
                Some(_) => held.remove(key).map_or(0, |h| h.tokens),
                None => 0,
            }
        };
        if expired > 0 {
            let _ = self.limiter.refund(key, &self.policy, expired).await;
        }
        let mut decision = self.limiter.check(key, &self.policy, self.batch).await;
        let mut taken = self.batch;
        if !decision.allowed && !decision.degraded && self.batch > 1 {
            decision = self.limiter.check(key, &self.policy, 1).await;
            taken = 1;
        }
        if decision.allowed && !decision.degraded && taken > 1 {
            let held = Held { tokens: taken - 1, since: now, last: decision.clone() };
            self.held.lock().unwrap_or_else(|e| e.into_inner()).insert(key.to_string(), held);
            decision.remaining += taken - 1;
        }
        decision
    }

    /// Gives the unused tokens held for `key` back to Redis; returns how many.
    pub async fn release(&self, key: &str) -> Result<u64, CallError> {
        let tokens = self.held.lock().unwrap_or_else(|e| e.into_inner()).remove(key).map_or(0, |h| h.tokens);
        if tokens > 0 {
            self.limiter.refund(key, &self.policy, tokens).await?;
        }
        Ok(tokens)
    }

    /// Gives back every unused token (call at shutdown).
    pub async fn release_all(&self) -> Result<u64, CallError> {
        let keys: Vec<String> = self.held.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect();
        let mut total = 0;
        for key in keys {
            total += self.release(&key).await?;
        }
        Ok(total)
    }
}
