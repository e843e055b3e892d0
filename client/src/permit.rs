//! Concurrency limits from the holder's side: [`Limiter::acquire`] takes a lease (RL.ACQUIRE, or
//! ACQUIRE groups of RL.ALL beside rate limits) and returns a [`Permit`], a guard that gives the
//! slot back: at once with [`Permit::release`], or in the background when it is dropped (a cancelled
//! future, a panicking handler), and that renews its lease while it lives, so a slow holder keeps
//! its slot and a crashed process's slot comes back when the lease ends.

use crate::command::{self, Limit};
use crate::connection::{is_connection_failure, Transport};
use crate::decision::Decision;
use crate::error::CallError;
use crate::limiter::{now_ns, FailurePolicy, Limiter};
use crate::reply_class::ReplyClass;
use redis::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What [`Limiter::acquire`] got: a permit, or the denial. Either way, the five fields of the decision.
#[derive(Debug)]
#[must_use = "dropping a granted permit releases it at once"]
pub enum Acquired {
    Granted(Permit),
    Denied(Decision),
}

impl Acquired {
    /// The decision: a permit's, or the denial.
    pub fn decision(&self) -> &Decision {
        match self {
            Acquired::Granted(p) => p.decision(),
            Acquired::Denied(d) => d,
        }
    }

    /// The permit, if granted.
    pub fn permit(self) -> Option<Permit> {
        match self {
            Acquired::Granted(p) => Some(p),
            Acquired::Denied(_) => None,
        }
    }
}

/// A held slot of one or more concurrency limits. Dropping it releases it (in the background, on the
/// current tokio runtime); [`release`](Permit::release) does so now and says whether the lease was
/// still held. While it lives, a task renews its leases every half lease; [`lost`](Permit::lost)
/// tells when a renew found a lease gone (the work ran past its lease while Redis could not be
/// reached, for instance): the slot may now be someone else's.
///
/// A degraded permit of [`FailurePolicy::Open`] holds nothing, and has nothing to release.
#[derive(Debug)]
pub struct Permit {
    decision: Decision,
    hold: Option<Hold>,
    lost: Arc<AtomicBool>,
}

#[derive(Debug)]
struct Hold {
    leases: Arc<Leases>,
    renewer: tokio::task::JoinHandle<()>,
}

/// What a permit holds: its id and its leases, and where they are.
#[derive(Debug)]
struct Leases {
    limiter: Limiter,
    id: String,
    keys: Vec<(String, Duration)>,
    /// Held by the local fallback (`FailurePolicy::LocalFallback`), not in Redis.
    local: bool,
}

impl Permit {
    /// The decision that granted it: `remaining` is the weight left free, `degraded` when the
    /// failure policy granted it.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// True once a renew found a lease of this permit no longer held.
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// The random id its leases are held under (128 bits, hex).
    pub fn id(&self) -> Option<&str> {
        self.hold.as_ref().map(|h| h.leases.id.as_str())
    }

    /// Releases the slot now (RL.RELEASE per lease). `Ok(true)` when every lease was still held,
    /// `Ok(false)` when one had ended already (lost, or expired). The breaker and the deadline apply;
    /// on an error the lease ends by itself when its time is up.
    pub async fn release(mut self) -> Result<bool, CallError> {
        match self.hold.take() {
            None => Ok(true),
            Some(hold) => {
                hold.renewer.abort();
                hold.leases.release().await
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take() else { return };
        hold.renewer.abort();
        // Without a runtime (dropped after it shut down), the leases end by themselves.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = hold.leases.release().await;
            });
        }
    }
}

impl Leases {
    async fn release(&self) -> Result<bool, CallError> {
        let mut all = true;
        for (key, _) in &self.keys {
            all &= self.limiter.release_lease(key, &self.id, self.local).await?;
        }
        Ok(all)
    }

    /// Renews every half lease until a renew finds a lease gone. An unanswered renew is tried
    /// again at the next turn: the lease may still be held.
    async fn renew_while_held(self: Arc<Self>, lost: Arc<AtomicBool>) {
        let shortest = self.keys.iter().map(|(_, lease)| *lease).min().unwrap_or(Duration::from_secs(1));
        let every = (shortest / 2).max(Duration::from_millis(1));
        loop {
            tokio::time::sleep(every).await;
            for (key, lease) in &self.keys {
                if let Ok(false) = self.limiter.renew_lease(key, *lease, &self.id, self.local).await {
                    tracing::warn!(limiter = %self.limiter.name(), key, "a permit's lease was found gone on renew");
                    lost.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

/// 128 random bits as hex: ids nobody can guess or collide with.
pub(crate) fn new_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

impl Limiter {
    /// Takes a slot of weight `weight` (at least 1) of the concurrency limit `policy` at `key`
    /// (RL.ACQUIRE). The permit holds it until released or dropped.
    ///
    /// ```no_run
    /// # use redis_ratelimit_client::{Acquired, Limiter, Policy};
    /// # async fn f(limiter: Limiter) -> Result<(), Box<dyn std::error::Error>> {
    /// let exports = Policy::concurrency(3, std::time::Duration::from_secs(30))?;
    /// match limiter.acquire("rl:{tenant:7}:exports", &exports, 1).await {
    ///     Acquired::Granted(permit) => {
    ///         // ... the export; the permit renews itself every 15 s while it runs
    ///         permit.release().await?;
    ///     }
    ///     Acquired::Denied(d) => println!("3 exports running; one ends within {:?}", d.retry_after),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, key: &str, policy: &crate::Policy, weight: u64) -> Acquired {
        self.acquire_all(&[Limit::new(key, policy, weight)]).await
    }

    /// Checks limits of any kinds in one atomic call (RL.ALL), taking the concurrency limits among
    /// them as leases of one permit: allowed only when all allow, and then all are taken; a denial
    /// takes nothing. The cost of a concurrency limit is its lease's weight. When Redis cannot
    /// decide, the failure policy does (`degraded`): `Open` grants a permit that holds nothing,
    /// `Closed` denies, `LocalFallback` holds a lease of the in-process semaphore. A call that cannot
    /// be built (a weight of 0, no limits) is refused whatever the failure policy, as by
    /// [`check_all`](Self::check_all).
    pub async fn acquire_all(&self, limits: &[Limit<'_>]) -> Acquired {
        let id = new_id();
        let local = match self.backend() {
            Transport::Local(local) => Some(Arc::clone(local)),
            _ => None,
        };
        let result = match (command::acquire(limits, &id), local) {
            (Err(e), _) => Err(e),
            (Ok(_), Some(local)) => Ok(local.acquire(limits, &id, now_ns(), false)),
            (Ok(cmd), None) => self.send_decision(&cmd, limits).await,
        };
        let leases: Vec<(String, Duration)> = limits
            .iter()
            .filter(|l| l.policy.is_concurrency())
            .map(|l| (l.key.to_string(), l.policy.window_length()))
            .collect();
        let (decision, short_circuited) = match result {
            // Taken on the primary but refused because too few replicas acknowledged it
            // (`wait_for_replicas` with `Deny`): the lease is given back.
            Ok(d) if d.degraded && !d.allowed => {
                let leases =
                    Leases { limiter: self.clone(), id: id.clone(), keys: leases.clone(), local: false };
                tokio::spawn(async move {
                    let _ = leases.release().await;
                });
                (d, false)
            }
            Ok(d) => (d, false),
            // Cannot be built (a weight of 0, a sliding log with a cost of 2): refused, as by check.
            Err(e) if ReplyClass::of(&e) == ReplyClass::Usage => (self.refuse(limits, &e), false),
            Err(e) => {
                let unanswered = matches!(&e, CallError::Deadline(_))
                    || matches!(&e, CallError::Redis(r) if is_connection_failure(r));
                if unanswered {
                    // It may have reached Redis and taken the slot: give it back when Redis answers.
                    let leases =
                        Leases { limiter: self.clone(), id: id.clone(), keys: leases.clone(), local: false };
                    tokio::spawn(async move {
                        let _ = leases.release().await;
                    });
                }
                (self.degrade_acquire(limits, &id, &e), matches!(e, CallError::BreakerOpen))
            }
        };
        self.record(&decision, short_circuited);
        if !decision.allowed {
            return Acquired::Denied(decision);
        }
        let lost = Arc::new(AtomicBool::new(false));
        let holds_nothing =
            decision.degraded && !matches!(self.failure_policy(), FailurePolicy::LocalFallback { .. });
        if leases.is_empty() || holds_nothing {
            return Acquired::Granted(Permit { decision, hold: None, lost });
        }
        let leases = Arc::new(Leases { limiter: self.clone(), id, keys: leases, local: decision.degraded });
        let renewer = tokio::spawn(Arc::clone(&leases).renew_while_held(Arc::clone(&lost)));
        Acquired::Granted(Permit { decision, hold: Some(Hold { leases, renewer }), lost })
    }

    /// Takes the concurrency limits among `limits` as leases under the caller's `id`, with the other
    /// limits in the same atomic call (RL.ALL), as [`acquire_all`](Self::acquire_all) does, but holds
    /// nothing here: no permit, no renewal, no release on drop. The leases are held until
    /// [`release_id`](Self::release_id) with the same `id` (from anywhere: another process, another
    /// request) or until their lease ends. For a holder this process does not see end: the rate limit
    /// service, whose release comes in a later request from Envoy. No failure policy: Redis' decision,
    /// or the reason there is none (an unanswered call may still have taken the leases; releasing
    /// `id` gives them back, and their lease ends them anyway).
    pub async fn acquire_detached(&self, limits: &[Limit<'_>], id: &str) -> Result<Decision, CallError> {
        if id.is_empty() {
            return Err(CallError::Usage("a lease id must not be empty"));
        }
        let cmd = command::acquire(limits, id)?;
        let decision = self.send_decision(&cmd, limits).await?;
        self.record(&decision, false);
        Ok(decision)
    }

    /// RL.RELEASE `key` `id`: true when `id` held a lease there, false when it held none (released
    /// already, expired, or never granted). The breaker and the deadline apply.
    pub async fn release_id(&self, key: &str, id: &str) -> Result<bool, CallError> {
        reply_flag(self.query(&command::release(key, id)).await?)
    }

    /// RL.RELEASE through the breaker and the deadline, or the local semaphore that granted it.
    async fn release_lease(&self, key: &str, id: &str, local: bool) -> Result<bool, CallError> {
        if let Some(leases) = self.local_leases(local) {
            return Ok(leases.release(key, id, now_ns()));
        }
        reply_flag(self.query(&command::release(key, id)).await?)
    }

    /// RL.RENEW, the same way.
    async fn renew_lease(
        &self,
        key: &str,
        lease: Duration,
        id: &str,
        local: bool,
    ) -> Result<bool, CallError> {
        if let Some(leases) = self.local_leases(local) {
            return Ok(leases.renew(key, lease, id, now_ns()));
        }
        reply_flag(self.query(&command::renew(key, lease, id)).await?)
    }
}

fn reply_flag(value: Value) -> Result<bool, CallError> {
    match redis::from_redis_value::<i64>(value) {
        Ok(n) => Ok(n == 1),
        Err(e) => Err(CallError::Reply(e.to_string())),
    }
}
