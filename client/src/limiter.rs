//! The limiter: sends one RL.* call per check under a deadline, and when Redis cannot decide, lets the
//! failure policy decide, visibly (`degraded`), behind a circuit breaker.

use crate::batch::{Action, Ahead, Batches, Flight, Refund};
use crate::breaker::{self, Admission, Breaker};
use crate::command::{self, Limit};
use crate::connection::Transport;
use crate::counters::{Counters, Counts};
use crate::decision::{Decision, Taken};
use crate::engine::{Backend, Engine};
use crate::error::CallError;
pub use crate::failure::FailurePolicy;
use crate::fallback::LocalLimiter;
use crate::log_throttle::LogThrottle;
use crate::outage::Outages;
use crate::precheck::DenialCache;
use crate::probe::{Probe, Watched};
use crate::reply_class::ReplyClass;
use redis::Value;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What an allowed decision becomes when fewer replicas than asked acknowledged its write in time
/// (see [`LimiterBuilder::wait_for_replicas`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitTimeout {
    /// Allowed, marked `degraded`: available, with the write possibly lost in a failover.
    AllowDegraded,
    /// Denied, marked `degraded` (retry after 1 s): never admits a request whose write may be lost,
    /// at the cost of refusing it although its tokens were taken.
    Deny,
}

#[derive(Debug, Clone, Copy)]
struct ReplicaWait {
    replicas: u32,
    timeout: Duration,
    on_timeout: WaitTimeout,
}

/// Builds a [`Limiter`]. The failure policy is the one required choice.
pub struct LimiterBuilder {
    failure: FailurePolicy,
    deadline: Duration,
    breaker_threshold: u32,
    breaker_cooldown: Duration,
    precheck: bool,
    name: String,
    wait: Option<ReplicaWait>,
    engine: Backend,
}

impl LimiterBuilder {
    /// Which engine computes the limiters (default [`Backend::Auto`]): the module's commands, or,
    /// where no module can be loaded, the same limiters as the Lua library (`lua/ratelimit.lua`)
    /// through `FCALL` or `EVALSHA`. `Auto` takes the module when the server answers its commands,
    /// else the library through `FCALL` (loaded with `FUNCTION LOAD` where this user may), else
    /// through `EVALSHA`; [`Limiter::verify`] says which and why. Keys carry on across engines.
    pub fn backend(mut self, engine: Backend) -> Self {
        self.engine = engine;
        self
    }

    /// Every call to Redis is bounded by this (default 100 ms): the limiter never becomes the slow part
    /// of a request.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The breaker opens after `failures` failed calls in a row and stays open for `cooldown`
    /// (defaults: 3 and 5 s); then one call probes Redis. While it is open, a background task asks
    /// Redis every 50 ms whether it answers again (one command on its own connection, never a
    /// decision) and ends the cool-down as soon as it does: the cool-down bounds an outage's end
    /// only where the probe cannot run (no tokio runtime) and after a configuration fault (an
    /// unknown or refused command opens the breaker at once, whatever `failures`).
    pub fn breaker(mut self, failures: u32, cooldown: Duration) -> Self {
        self.breaker_threshold = failures;
        self.breaker_cooldown = cooldown;
        self
    }

    /// The in-process pre-check: a key Redis denied is denied here, without a round trip, until its
    /// retry_after has passed. Off by default.
    pub fn local_precheck(mut self, on: bool) -> Self {
        self.precheck = on;
        self
    }

    /// The name in metrics and log lines (default `default`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Reports a decision that took something as allowed only once `replicas` replicas have
    /// acknowledged its write (`WAIT replicas timeout`, pipelined behind the decision on a connection
    /// of its own), so a failover to one of them cannot give the tokens back. When fewer acknowledge
    /// within `timeout`, `on_timeout` decides. Denials write nothing and wait for nothing. A call may
    /// then take up to the deadline plus `timeout`. It cannot promise more than WAIT does: a replica
    /// that acknowledged and then also dies, or a failover to a replica that had not, still loses the
    /// write. On Redis Cluster the wait goes to the primary of the decision's key (its own connection
    /// to that node).
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration, on_timeout: WaitTimeout) -> Self {
        self.wait = (replicas > 0).then_some(ReplicaWait { replicas, timeout, on_timeout });
        self
    }

    /// A limiter on one Redis server (`redis://host:port/db`). Connects on first use, so it can be built
    /// while Redis is down.
    pub fn connect(self, url: &str) -> Result<Limiter, CallError> {
        check_url(url)?;
        let backend = Transport::single(url, self.deadline)
            .map_err(|e| CallError::InvalidUrl { url: url.to_string(), reason: e.to_string() })?;
        Ok(self.finish(backend))
    }

    /// A limiter on the primary that Redis Sentinel names for `service`, given some sentinels'
    /// addresses (`redis://host:26379/`). It follows a failover: when the primary's connection breaks,
    /// or the server answers READONLY (a demoted primary), the call fails as an outage (the failure
    /// policy decides it, the breaker counts it) and the next call asks Sentinel again. Connects on
    /// first use, so it can be built while Redis is down.
    pub fn connect_sentinel(self, sentinels: &[&str], service: &str) -> Result<Limiter, CallError> {
        for sentinel in sentinels {
            check_url(sentinel)?;
        }
        let backend = Transport::sentinel(sentinels, service, self.deadline)
            .map_err(|e| CallError::InvalidUrl { url: sentinels.join(","), reason: e.to_string() })?;
        Ok(self.finish(backend))
    }

    /// A limiter on Redis Cluster, given some of its nodes. Keys of one multi-limit check must share
    /// a hash slot: put the caller in a hash tag (`rl:{client:42}:route`).
    pub async fn connect_cluster(self, nodes: &[&str]) -> Result<Limiter, CallError> {
        for node in nodes {
            check_url(node)?;
        }
        let backend = Transport::cluster(nodes, self.deadline).await?;
        Ok(self.finish(backend))
    }

    /// A limiter without Redis: every decision is made in this process, with the module's algorithms
    /// on the whole limit (each kind its own; the sliding log is approximated by the sliding counter).
    /// For a single-instance service, and for running the HTTP layer in tests without a server
    /// (tower's `oneshot`). Its decisions are not degraded; commands that only Redis answers (refunds,
    /// inspection, `verify`) return an error.
    pub fn in_process(self) -> Limiter {
        self.finish(Transport::Local(Arc::new(LocalLimiter::in_process())))
    }

    fn finish(self, backend: Transport) -> Limiter {
        let fallback = match self.failure {
            FailurePolicy::LocalFallback { instances } => Some(LocalLimiter::fallback(instances)),
            _ => None,
        };
        Limiter {
            inner: Arc::new(Inner {
                backend,
                deadline: self.deadline,
                failure: self.failure,
                breaker: Breaker::new(self.breaker_threshold, self.breaker_cooldown),
                fallback,
                precheck: self.precheck.then(DenialCache::new),
                batches: Batches::default(),
                counters: Counters::default(),
                log: LogThrottle::new(Duration::from_secs(10)),
                usage_log: LogThrottle::new(Duration::from_secs(60)),
                outages: Outages::new(),
                probe: Probe::default(),
                name: self.name.into(),
                wait: self.wait,
                engine: Engine::new(self.engine),
            }),
        }
    }
}

/// A rate limiter backed by the redis-ratelimit module. Cheap to clone (one `Arc`); share it.
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = &*self.inner;
        f.debug_struct("Limiter")
            .field("name", &inner.name)
            .field("failure", &inner.failure)
            .field("deadline", &inner.deadline)
            .field("breaker_open", &inner.breaker.is_open())
            .field("local_precheck", &inner.precheck.is_some())
            .finish_non_exhaustive()
    }
}

struct Inner {
    backend: Transport,
    deadline: Duration,
    failure: FailurePolicy,
    breaker: Breaker,
    fallback: Option<LocalLimiter>,
    precheck: Option<DenialCache>,
    /// Units of batched policies held here (docs/high-volume.md).
    batches: Batches,
    counters: Counters,
    /// Replica-wait warnings.
    log: LogThrottle,
    /// The refusals of `check`, which cannot return the caller's mistake: one line a minute.
    usage_log: LogThrottle,
    outages: Outages,
    /// The breaker's background probe (aborted when the limiter is dropped).
    probe: Probe,
    name: Arc<str>,
    wait: Option<ReplicaWait>,
    engine: Engine,
}

impl Watched for Inner {
    fn awaits_redis(&self, now: Instant) -> bool {
        self.breaker.awaits_redis(now)
    }

    fn redis_answered(&self, now: Instant) {
        self.breaker.redis_answered(now);
    }
}

impl Limiter {
    /// Starts a builder with the failure policy this limiter will follow.
    pub fn builder(failure: FailurePolicy) -> LimiterBuilder {
        LimiterBuilder {
            failure,
            deadline: Duration::from_millis(100),
            breaker_threshold: 3,
            breaker_cooldown: Duration::from_secs(5),
            precheck: false,
            name: "default".into(),
            wait: None,
            engine: Backend::Auto,
        }
    }

    /// Checks one limit.
    pub async fn check(&self, key: &str, policy: &crate::Policy, cost: u64) -> Decision {
        self.check_all(&[Limit::new(key, policy, cost)]).await
    }

    /// Checks several limits of any kinds in one atomic call (RL.TOKEN when all are token buckets,
    /// RL.ALL otherwise): allowed only when every one allows, and then it takes from all of them; a
    /// denial takes from none. The decision describes the most restrictive limit (`limiting` says
    /// which). Never fails: when Redis cannot decide, the failure policy does and the decision says
    /// `degraded`. A call that cannot be built (no limits, a sliding log with a cost other than 1, a
    /// concurrency limit, which has no release here: use [`acquire`](Self::acquire)) is a programming
    /// error: it is logged at error level and refused whatever the failure policy, as a denial that
    /// never fits (`retry_after` None, not `degraded`); [`check_strict`](Self::check_strict) returns
    /// it as [`CallError::Usage`].
    pub async fn check_all(&self, limits: &[Limit<'_>]) -> Decision {
        let inner = &*self.inner;
        let precheck_key = inner.precheck.as_ref().map(|_| cache_key(limits));
        let cost = limits.iter().map(|l| l.cost).max().unwrap_or(0);
        if let (Some(cache), Some(key)) = (&inner.precheck, &precheck_key) {
            if let Some(held) = cache.check(key, cost, Instant::now()) {
                inner.counters.local(&inner.name);
                inner.counters.record(&inner.name, &held, false);
                return held;
            }
        }
        // A check that waited for another's batch call shared that round trip: not local.
        let mut waited = false;
        // All of a check's waits for batch calls in flight take at most the deadline; then it asks alone.
        let waits_end = Instant::now() + inner.deadline;
        let decision = loop {
            let plan = inner.batches.plan(limits, Instant::now());
            self.return_expired(plan.refunds);
            match plan.action {
                Action::Local(mut decision) => {
                    self.take_ahead(plan.ahead);
                    decision.local = !waited;
                    if !waited {
                        inner.counters.local(&inner.name);
                    }
                    inner.counters.record(&inner.name, &decision, false);
                    break decision;
                }
                // Another check's batch call for these keys is in flight (bounded by its deadline):
                // its answer brings units; then plan again.
                Action::Wait(flight) => {
                    waited = true;
                    let left = waits_end.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break self.settle(limits, self.call(limits).await);
                    }
                    if !self.landed(&flight, left).await {
                        inner.batches.abandon(&flight);
                    }
                }
                Action::Call(mut asked) => {
                    let mut result = self.call(&asked.with_extras(limits)).await;
                    if asked.any_extra() && matches!(&result, Ok(d) if !d.allowed) {
                        // The batch did not fit; the request itself may.
                        asked = asked.without_extras();
                        result = self.call(limits).await;
                    }
                    let result = match result {
                        Ok(d) => Ok(inner.batches.answer(limits, &asked, d, Instant::now())),
                        Err(e) => {
                            inner.batches.failed(limits, &asked);
                            Err(e)
                        }
                    };
                    break self.settle(limits, result);
                }
            }
        };
        if let (Some(cache), Some(key)) = (&inner.precheck, &precheck_key) {
            cache.remember(key, cost, &decision, Instant::now());
        }
        decision
    }

    /// The decision over `limits` from a call's result: Redis' own, a refusal of a call that cannot
    /// be built, or the failure policy's; counted.
    pub(crate) fn settle(&self, limits: &[Limit<'_>], result: Result<Decision, CallError>) -> Decision {
        let (decision, short_circuited) = match result {
            Ok(d) => (d, false),
            Err(e) if ReplyClass::of(&e) == ReplyClass::Usage => (self.refuse(limits, &e), false),
            Err(e) => {
                let short = matches!(e, CallError::BreakerOpen);
                (self.degrade(limits, &e), short)
            }
        };
        self.record(&decision, short_circuited);
        decision
    }

    /// The decision over `limits` for a call Redis did not decide (`error`, from
    /// [`check_strict`](Self::check_strict)): the failure policy's, degraded, as `check_all` would have
    /// made it; a usage error refused (denied, never degraded). Counted; logged as its class says.
    pub fn decide_failed(&self, limits: &[Limit<'_>], error: CallError) -> Decision {
        self.settle(limits, Err(error))
    }

    /// Like [`check_all`](Self::check_all) without the failure policy: Redis' decision or the reason
    /// there is none. The breaker and the deadline still apply.
    pub async fn check_strict(&self, limits: &[Limit<'_>]) -> Result<Decision, CallError> {
        let result = self.call(limits).await;
        if matches!(&result, Err(e) if ReplyClass::of(e) == ReplyClass::Usage) {
            self.inner.counters.usage_error(&self.inner.name);
        }
        result
    }

    /// Gives `tokens` back to a token bucket (`RL.REFUND TOKEN`): a request that turned out not to count.
    pub async fn refund(
        &self,
        key: &str,
        policy: &crate::Policy,
        tokens: u64,
    ) -> Result<Decision, CallError> {
        let cmd = command::refund_tokens(key, policy, tokens)?;
        self.send(&cmd).await
    }

    /// Gives back every unit that batched policies hold in this process (call before the process
    /// stops; docs/high-volume.md): the units given back, or the first error (every refund is tried).
    pub async fn close(&self) -> Result<u64, CallError> {
        // Batches in flight first (each bounded by the deadline): their units are held too.
        for flight in self.inner.batches.flights() {
            self.landed(&flight, self.inner.deadline).await;
        }
        let mut given = 0;
        let mut first_error = None;
        for r in self.inner.batches.drain(Instant::now()) {
            match self.refund_units(&r).await {
                Ok(()) => given += r.units,
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        first_error.map_or(Ok(given), Err)
    }

    /// Expired held units back to Redis, without making the check that found them wait.
    fn return_expired(&self, refunds: Vec<Refund>) {
        if refunds.is_empty() {
            return;
        }
        let limiter = self.clone();
        tokio::spawn(async move {
            for r in refunds {
                if let Err(e) = limiter.refund_units(&r).await {
                    tracing::debug!(limiter = %limiter.inner.name, key = %r.key, error = %e, "held units not given back");
                }
            }
        });
    }

    /// Waits for a batch call in flight to land, at most `within`: whether it did.
    async fn landed(&self, flight: &Flight, within: Duration) -> bool {
        let landed = flight.notify.notified();
        flight.is_done() || tokio::time::timeout(within, landed).await.is_ok()
    }

    /// Batches taken ahead, off the caller's path (docs/high-volume.md).
    fn take_ahead(&self, ahead: Vec<Ahead>) {
        for a in ahead {
            let limiter = self.clone();
            tokio::spawn(async move {
                let batches = &limiter.inner.batches;
                let limit = [Limit::new(&a.key, &a.policy, 0)];
                match limiter.call(&a.asked.with_extras(&limit)).await {
                    Ok(d) => drop(batches.answer(&limit, &a.asked, d, Instant::now())),
                    Err(_) => batches.failed(&limit, &a.asked),
                }
            });
        }
    }

    async fn refund_units(&self, r: &Refund) -> Result<(), CallError> {
        let cmd = command::refund(&r.key, &r.policy, r.units)?;
        self.send(&cmd).await.map(|_| ())
    }

    /// Units held in this process for `key` under a batched `policy` (docs/high-volume.md).
    pub fn held(&self, key: &str, policy: &crate::Policy) -> u64 {
        self.inner.batches.held(&Limit::new(key, policy, 1))
    }

    /// This limiter's decisions so far.
    pub fn counts(&self) -> Counts {
        self.inner.counters.snapshot()
    }

    /// The failure policy this limiter was built with.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.inner.failure
    }

    /// True while the breaker keeps calls away from Redis (open, or one probe under way).
    pub fn breaker_open(&self) -> bool {
        self.inner.breaker.is_open()
    }

    /// True since Redis answered that the limiter cannot work with it as configured (the module's
    /// command unknown: not loaded, or renamed; or refused to this user by its ACL), until Redis
    /// decides again. The failure policy decides meanwhile, and the log says what to fix.
    pub fn misconfigured(&self) -> bool {
        self.inner.outages.misconfigured()
    }

    /// Sends a command through the limiter's connection, breaker and deadline.
    pub(crate) async fn query(&self, cmd: &redis::Cmd) -> Result<Value, CallError> {
        self.query_inner(cmd, None).await.map(|(value, _)| value)
    }

    /// As `query`; with `wait`, the command is followed by WAIT (on `key`'s node), whose count comes
    /// back too.
    async fn query_inner(
        &self,
        cmd: &redis::Cmd,
        wait: Option<(&ReplicaWait, &str)>,
    ) -> Result<(Value, Option<i64>), CallError> {
        let inner = &*self.inner;
        let probe = match inner.breaker.admit(Instant::now()) {
            Admission::Reject(_) => return Err(CallError::BreakerOpen),
            Admission::Probe => true,
            Admission::Call => false,
        };
        let deadline = inner.deadline + wait.map_or(Duration::ZERO, |(w, _)| w.timeout);
        // The probe checks the connection first: after an outage it may be a dead one.
        let call = async {
            match wait {
                Some((w, key)) => inner
                    .engine
                    .query_waited(&inner.backend, cmd, key, w.replicas, w.timeout)
                    .await
                    .map(|(v, n)| (v, Some(n))),
                None => inner.engine.query(&inner.backend, cmd, probe).await.map(|v| (v, None)),
            }
        };
        let result = match tokio::time::timeout(deadline, call).await {
            Err(_) => Err(CallError::Deadline(deadline)),
            Ok(Err(e)) => Err(CallError::Redis(e)),
            Ok(Ok(v)) => Ok(v),
        };
        self.observe(cmd, &result);
        result
    }

    /// Tells the breaker and the logs how a call that went to Redis ended, by the class of its answer
    /// (`reply_class`, docs/errors.md): only an outage counts against Redis; an answer saying the
    /// limiter is misconfigured, a conflicting key or the caller's mistake is Redis answering.
    fn observe<T>(&self, cmd: &redis::Cmd, result: &Result<T, CallError>) {
        let inner = &*self.inner;
        let now = Instant::now();
        let Err(e) = result else {
            inner.outages.answered(&inner.name, true, now);
            self.record_breaker(breaker::Outcome::Answered, now);
            return;
        };
        let outcome = match ReplyClass::of(e) {
            ReplyClass::Outage => {
                let engine = inner.engine.reports();
                // A failover may land on another server: the engine is chosen anew.
                if matches!(e, CallError::Redis(_)) {
                    inner.engine.forget();
                }
                if inner.outages.failed(&inner.name, e, inner.failure, engine, now) {
                    inner.counters.outage(&inner.name);
                }
                breaker::Outcome::Failed
            }
            ReplyClass::Misconfigured => {
                // Redis answered: an outage under way is over (a failover onto a server without the
                // module), though nothing was decided.
                inner.outages.answered(&inner.name, false, now);
                inner.counters.misconfigured(&inner.name);
                inner.outages.fault(&inner.name, &command_name(cmd), e, inner.engine.reports(), now);
                breaker::Outcome::Answered
            }
            class => {
                inner.outages.answered(&inner.name, false, now);
                if class == ReplyClass::Conflict {
                    inner.counters.conflict(&inner.name);
                    inner.outages.conflict(&inner.name, &keys_of(cmd), e, now);
                }
                breaker::Outcome::Answered
            }
        };
        self.record_breaker(outcome, now);
    }

    fn record_breaker(&self, outcome: breaker::Outcome, now: Instant) {
        let inner = &*self.inner;
        if inner.breaker.record(outcome, now) {
            inner.probe.start(Arc::downgrade(&self.inner), inner.backend.clone());
        }
    }

    async fn call(&self, limits: &[Limit<'_>]) -> Result<Decision, CallError> {
        let cmd = command::decide(limits)?;
        if let Transport::Local(local) = &self.inner.backend {
            return Ok(local.decide(limits, now_ns(), false));
        }
        self.send_decision(&cmd, limits).await
    }

    /// Sends a decision (a check or an acquisition) over `limits`, waiting for replicas when the
    /// limiter is built to.
    pub(crate) async fn send_decision(
        &self,
        cmd: &redis::Cmd,
        limits: &[Limit<'_>],
    ) -> Result<Decision, CallError> {
        if let Transport::Cluster(_) = &self.inner.backend {
            command::check_slots(limits)?;
        }
        match (&self.inner.wait, limits.first()) {
            (Some(wait), Some(first)) => self.send_waited(cmd, first.key, wait).await,
            _ => self.send(cmd).await,
        }
    }

    /// A decision whose write must reach `wait.replicas` replicas before it counts as allowed.
    async fn send_waited(
        &self,
        cmd: &redis::Cmd,
        key: &str,
        wait: &ReplicaWait,
    ) -> Result<Decision, CallError> {
        let (value, acked) = self.query_inner(cmd, Some((wait, key))).await?;
        let mut decision = parse_decision(value)?;
        let acked = acked.unwrap_or(0);
        if !decision.allowed || acked >= i64::from(wait.replicas) {
            return Ok(decision);
        }
        let inner = &*self.inner;
        inner.log.maybe(Instant::now(), |suppressed| {
            tracing::warn!(limiter = %inner.name, acked, wanted = wait.replicas, on_timeout = ?wait.on_timeout,
                suppressed, "an allowed decision's write reached fewer replicas than asked within the wait");
        });
        decision.degraded = true;
        if wait.on_timeout == WaitTimeout::Deny {
            decision.allowed = false;
            decision.retry_after = Some(Duration::from_secs(1));
        }
        Ok(decision)
    }

    pub(crate) fn backend(&self) -> &Transport {
        &self.inner.backend
    }

    /// The engine in use and why it was chosen.
    pub(crate) fn chosen_engine(&self) -> (Backend, String) {
        self.inner.engine.chosen()
    }

    /// The engine in use, as the contract's engine machine reports it: "not yet known" before a call
    /// is decided (and again after an outage, until one is: a failover may land on another server),
    /// then "the ratelimit module", "the Lua library through FCALL" or "the Lua library through EVALSHA
    /// scripts". [`verify`](Self::verify) asks the server and says why.
    pub fn engine(&self) -> &'static str {
        self.inner.engine.reports()
    }

    pub(crate) fn name(&self) -> &str {
        &self.inner.name
    }

    pub(crate) fn record(&self, decision: &Decision, short_circuited: bool) {
        self.inner.counters.record(&self.inner.name, decision, short_circuited);
    }

    /// The in-process semaphore leases live in: the fallback's for a permit it granted, the
    /// in-process backend's for every permit of an in-process limiter; None for Redis.
    pub(crate) fn local_leases(&self, from_fallback: bool) -> Option<&LocalLimiter> {
        match (&self.inner.backend, &self.inner.fallback) {
            (Transport::Local(local), _) => Some(local),
            (_, Some(fallback)) if from_fallback => Some(fallback),
            _ => None,
        }
    }

    /// The failure policy's answer to an acquire Redis did not decide: `Open` grants (a permit that
    /// holds nothing), `Closed` denies, `LocalFallback` asks the in-process semaphore.
    pub(crate) fn degrade_acquire(&self, limits: &[Limit<'_>], id: &str, error: &CallError) -> Decision {
        match (self.inner.failure, &self.inner.fallback) {
            (FailurePolicy::LocalFallback { .. }, Some(local)) => {
                let decision = local.acquire(limits, id, now_ns(), true);
                self.policy_decided(&decision, error);
                decision
            }
            _ => self.degrade(limits, error),
        }
    }

    /// The failure policy's answer to a partial grant ([`take`](Self::take), and any batch of up
    /// to `max` tokens of the token bucket `policy` at `key`) that Redis did not decide: `Open`
    /// grants all `max`, `Closed` takes none, `LocalFallback` takes as many whole tokens as the
    /// in-process bucket's share holds, up to `max`. Degraded, logged and counted as its error's class
    /// says (an outage's decision, a conflict, a fault), like [`degrade`](Self::degrade).
    pub(crate) fn degrade_take(
        &self,
        key: &str,
        policy: &crate::Policy,
        max: u64,
        error: &CallError,
    ) -> Taken {
        let limit = Limit::new(key, policy, max);
        if let (FailurePolicy::LocalFallback { .. }, Some(local)) = (self.inner.failure, &self.inner.fallback)
        {
            let taken = local.take(&limit, now_ns(), true);
            self.policy_decided(&taken.decision, error);
            return taken;
        }
        let decision = self.degrade(&[limit], error);
        Taken { taken: if decision.allowed { max } else { 0 }, decision }
    }

    pub(crate) async fn send(&self, cmd: &redis::Cmd) -> Result<Decision, CallError> {
        parse_decision(self.query(cmd).await?)
    }

    /// The failure policy made `decision` because of `error`: logged and counted (`outage.rs`).
    fn policy_decided(&self, decision: &Decision, error: &CallError) {
        let inner = &*self.inner;
        if ReplyClass::of(error) == ReplyClass::Outage {
            inner.outages.decided(&inner.name, decision.allowed, error, inner.failure);
        }
    }

    /// The caller's mistake (a call that cannot be built, or that Redis answered as one): refused,
    /// whatever the failure policy (not an outage), counted.
    pub(crate) fn refuse(&self, limits: &[Limit<'_>], error: &CallError) -> Decision {
        let inner = &*self.inner;
        inner.counters.usage_error(&inner.name);
        inner.usage_log.maybe(Instant::now(), |suppressed| {
            tracing::error!(limiter = %inner.name, %error, suppressed,
                "rate limit check refused: the caller's mistake (docs/errors.md); at most one line a minute, \
                 every refusal counted in usage_errors");
        });
        Decision {
            allowed: false,
            limit: limits.first().map_or(0, |l| l.policy.limit()),
            remaining: 0,
            retry_after: None,
            reset_after: Duration::ZERO,
            limiting: 0,
            degraded: false,
            local: false,
        }
    }

    /// The failure policy's answer to a decision over `limits` that Redis did not make (`error`
    /// says why): `Open` allows, `Closed` denies (retry after 1 s), `LocalFallback` decides in the
    /// process; degraded, logged and counted as its error's class says (docs/errors.md: an outage's
    /// decision, a conflict, a fault).
    pub(crate) fn degrade(&self, limits: &[Limit<'_>], error: &CallError) -> Decision {
        let inner = &*self.inner;
        let limit = limits.first().map_or(0, |l| l.policy.limit());
        let degraded = |allowed: bool, remaining: u64, retry_after: Option<Duration>| Decision {
            allowed,
            limit,
            remaining,
            retry_after,
            reset_after: Duration::ZERO,
            limiting: 0,
            degraded: true,
            local: false,
        };
        let decision = match (inner.failure, &inner.fallback) {
            (FailurePolicy::LocalFallback { .. }, Some(local)) => local.check(limits, now_ns()),
            (FailurePolicy::Closed, _) => degraded(false, 0, Some(Duration::from_secs(1))),
            _ => degraded(true, limit, Some(Duration::ZERO)),
        };
        self.policy_decided(&decision, error);
        decision
    }
}

pub(crate) fn parse_decision(value: Value) -> Result<Decision, CallError> {
    let reply: Vec<i64> = redis::from_redis_value(value).map_err(|e| CallError::Reply(e.to_string()))?;
    Decision::from_reply(&reply).ok_or_else(|| CallError::Reply(format!("{reply:?}")))
}

/// A URL without a scheme (`127.0.0.1:6379`) is refused with that reason, not as "did not parse".
fn check_url(url: &str) -> Result<(), CallError> {
    if url.contains("://") {
        return Ok(());
    }
    let reason = format!(
        "the scheme is missing: write redis://{0}/ (rediss://{0}/ for TLS, or unix:///path/to/redis.sock)",
        url.trim_end_matches('/')
    );
    Err(CallError::InvalidUrl { url: url.to_string(), reason })
}

/// The name of the command `cmd` sends (`RL.TOKEN`).
fn command_name(cmd: &redis::Cmd) -> String {
    match cmd.args_iter().next() {
        Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).into_owned(),
        _ => String::new(),
    }
}

/// The keys `cmd` names, space-separated (what a conflict is logged under).
fn keys_of(cmd: &redis::Cmd) -> String {
    crate::engine::Call::of(cmd).map(|call| call.keys().join(" ")).unwrap_or_default()
}

pub fn cache_key(limits: &[Limit<'_>]) -> String {
    let mut key = String::new();
    for l in limits {
        key.push_str(l.key);
        key.push('\n');
    }
    key
}

pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
