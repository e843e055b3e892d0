//! `ShouldRateLimit`: a request's descriptors decided through the Rust client, all in one RL.ALL call
//! (all charged or none) or each on its own as envoyproxy/ratelimit does, and the reply Envoy reads.

use crate::config::Config;
use crate::limits::Algorithm;
use crate::metrics::{Hit, Metrics};
use crate::plan::{self, HashTag, Limit, Slot};
use crate::proto::envoy::config::core::v3::HeaderValue;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit as ProtoUnit, Code, DescriptorStatus, RateLimit,
};
use crate::proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use crate::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use redis_ratelimit_client::{CallError, Decision, FailurePolicy, Limiter, ReplyClass};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tonic::{Request, Response, Status};

mod holds;

/// How a request's descriptors are decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// All the enforced descriptors in one RL.ALL call: allowed only when every one allows, and then
    /// each is charged; a denied request charges none.
    Atomic,
    /// Each descriptor in its own call, as envoyproxy/ratelimit does: every descriptor is charged,
    /// even when another one denies the request.
    PerDescriptor,
}

/// When Redis cannot decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailure {
    /// The limiter's failure policy decides (open: OK; closed: OVER_LIMIT; local fallback), marked
    /// degraded in the log.
    Policy,
    /// The call fails with UNAVAILABLE, so Envoy's `failure_mode_deny` decides.
    Error,
}

/// The headers added to the response when asked (envoyproxy/ratelimit's
/// `LIMIT_RESPONSE_HEADERS_ENABLED` and its header names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        HeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub combine: Combine,
    pub on_failure: OnFailure,
    pub headers: Option<HeaderNames>,
    /// envoyproxy/ratelimit's `SHADOW_MODE`: every answer is OK, the decisions are still made.
    pub global_shadow: bool,
    /// How keys are hashed (`RLS_HASH_TAG`).
    pub hash: HashTag,
    /// On Redis Cluster: a request whose keys fall in different slots cannot be one call.
    pub cluster: bool,
    /// Token budgets held by request id (`RLS_HOLD_*`; crate::holds).
    pub holds: Holds,
}

/// How a request's two calls (before it, and on its stream's end) become a hold and its settle.
#[derive(Debug, Clone)]
pub struct Holds {
    /// `RLS_HOLD_ENTRY`: the descriptor entry whose value is the request's id.
    pub entry: String,
    /// `RLS_HOLD_TTL_MS`: how long a hold waits for its settle.
    pub ttl: Duration,
    /// `RLS_HOLD_ABANDON`: what a hold never settled becomes when its ttl ends.
    pub abandon: redis_ratelimit_client::Abandon,
}

impl Holds {
    pub const DEFAULT_ENTRY: &'static str = "request_id";
    pub const DEFAULT_TTL: Duration = redis_ratelimit_client::HoldOptions::DEFAULT_TTL;
}

impl Default for Holds {
    fn default() -> Self {
        Holds {
            entry: Self::DEFAULT_ENTRY.into(),
            ttl: Self::DEFAULT_TTL,
            abandon: redis_ratelimit_client::Abandon::Charge,
        }
    }
}

/// The configuration in force; a reload replaces it whole.
#[derive(Clone, Default)]
pub struct ConfigHandle(Arc<RwLock<Arc<Config>>>);

impl ConfigHandle {
    pub fn new(config: Config) -> ConfigHandle {
        ConfigHandle(Arc::new(RwLock::new(Arc::new(config))))
    }

    pub fn current(&self) -> Arc<Config> {
        match self.0.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn replace(&self, config: Config) {
        let config = Arc::new(config);
        match self.0.write() {
            Ok(mut c) => *c = config,
            Err(poisoned) => *poisoned.into_inner() = config,
        }
    }
}

/// The gRPC service.
#[derive(Clone)]
pub struct Service {
    limiter: Limiter,
    config: ConfigHandle,
    options: Arc<Options>,
    metrics: Arc<Metrics>,
}

/// What Redis said about one descriptor.
#[derive(Debug, Clone)]
enum Outcome {
    /// This descriptor's own decision (or, in an atomic call, the one that describes it: it denied, or
    /// has the fewest units left).
    Exact(Decision),
    /// A member of an atomic call that another descriptor describes: charged when the call allowed.
    Member { allowed: bool },
    /// Redis could not decide a concurrency limit's acquire and the failure policy did: allowed or not
    /// (no lease is held for an allowed one).
    Degraded(bool),
    /// Not asked: a shadow limit of a request the enforced limits denied, or any limit of a request
    /// that a blocked descriptor (`requests_per_unit: 0`) denies.
    Skipped,
}

impl Service {
    pub fn new(limiter: Limiter, config: ConfigHandle, options: Options, metrics: Arc<Metrics>) -> Service {
        Service { limiter, config, options: Arc::new(options), metrics }
    }

    pub fn config(&self) -> &ConfigHandle {
        &self.config
    }

    pub fn limiter(&self) -> &Limiter {
        &self.limiter
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// `/healthcheck`: a configuration with at least one domain is loaded and Redis answers (an
    /// `RL.INSPECT` of a key that need not exist, through the deadline and the breaker).
    pub async fn healthy(&self) -> Result<(), String> {
        if self.config.current().domains().next().is_none() {
            return Err("no configuration loaded".into());
        }
        match self.limiter.inspect("rl:{rls.health}:probe", None).await {
            Ok(_) => Ok(()),
            Err(e) if ReplyClass::of(&e) == ReplyClass::Outage => Err(format!("Redis does not answer: {e}")),
            Err(e) => Err(format!(
                "Redis answers, but the limiter cannot work with it ({}): {e}",
                ReplyClass::of(&e).name()
            )),
        }
    }

    /// The Prometheus page.
    pub fn render_metrics(&self) -> String {
        self.metrics.render(&self.limiter, self.config.current().domains().count())
    }

    /// Decides a request: the reply, or the reason there is none (Redis down with `OnFailure::Error`).
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        if request.domain.is_empty() {
            self.metrics.service_error.inc();
            return Err(Status::invalid_argument("rate limit domain must not be empty"));
        }
        if request.descriptors.is_empty() {
            self.metrics.service_error.inc();
            return Err(Status::invalid_argument("rate limit descriptor list must not be empty"));
        }
        let config = self.config.current();
        let mut slots = plan::plan(
            &config,
            &request.domain,
            &request.descriptors,
            request.hits_addend,
            self.options.hash,
            &self.options.holds.entry,
        );
        let mut leases = slots.iter().filter_map(|s| match s {
            Slot::Limited(l) => l.lease.as_deref(),
            _ => None,
        });
        let first_lease = leases.next();
        let refused = slots
            .iter()
            .find_map(|s| match s {
                Slot::Refused(reason) => Some(reason.clone()),
                _ => None,
            })
            .or_else(|| {
                let one_call = self.options.combine == Combine::Atomic;
                (one_call && leases.any(|id| Some(id) != first_lease)).then(|| {
                    "the concurrency limits of one request take one lease id (rls_lease)".to_string()
                })
            });
        if let Some(reason) = refused {
            self.metrics.service_error.inc();
            return Err(Status::invalid_argument(reason));
        }
        let held = holds::held(&slots).inspect_err(|_| self.metrics.service_error.inc())?;
        self.release(&slots).await;
        let outcomes = match held {
            Some((id, held)) => self.hold_or_settle(&mut slots, &id, &held).await,
            None => match self.options.combine {
                Combine::Atomic => self.atomic(&slots).await,
                Combine::PerDescriptor => self.per_descriptor(&slots).await,
            },
        }
        .map_err(|e| {
            if ReplyClass::of(&e) == ReplyClass::Usage {
                self.metrics.service_error.inc();
                tracing::warn!(domain = %request.domain, error = %e, "a request the limiter refuses: answering INVALID_ARGUMENT");
                return Status::invalid_argument(format!("the rate limiter refused the request: {e}"));
            }
            tracing::warn!(domain = %request.domain, error = %e, "Redis did not decide: answering UNAVAILABLE");
            Status::unavailable(format!("the rate limiter could not decide: {e}"))
        })?;
        self.count(&slots, &outcomes);
        let reply = self.reply(&slots, &outcomes);
        if tracing::enabled!(tracing::Level::DEBUG) {
            let descriptors: Vec<String> = request
                .descriptors
                .iter()
                .map(|d| {
                    d.entries.iter().map(|e| format!("{}={}", e.key, e.value)).collect::<Vec<_>>().join(",")
                })
                .collect();
            tracing::debug!(
                domain = %request.domain,
                descriptors = ?descriptors,
                hits_addend = request.hits_addend,
                overall = ?Code::try_from(reply.overall_code).unwrap_or(Code::Unknown),
                "ShouldRateLimit"
            );
        }
        Ok(reply)
    }

    /// Each limited descriptor's counters (crate::metrics).
    fn count(&self, slots: &[Slot], outcomes: &[Outcome]) {
        for (slot, outcome) in slots.iter().zip(outcomes) {
            let (limit, hit) = match (slot, outcome) {
                (Slot::Blocked(l), _) => (l, Hit::Over),
                (Slot::Limited(l), Outcome::Exact(d)) if !d.allowed => (l, Hit::Over),
                (Slot::Limited(l), Outcome::Exact(d)) => {
                    (l, Hit::Within { used: Some((d.limit.saturating_sub(d.remaining), d.limit)) })
                }
                (Slot::Limited(l), Outcome::Member { allowed: true } | Outcome::Degraded(true)) => {
                    (l, Hit::Within { used: None })
                }
                (Slot::Limited(l), Outcome::Degraded(false)) => (l, Hit::Over),
                (Slot::Limited(l), _) => (l, Hit::Undecided),
                _ => continue,
            };
            self.metrics.hit(&limit.stat_key, limit.cost, limit.rule.shadow(), hit);
        }
    }

    /// The extension's releases (`rls_release`): RL.RELEASE each, answered OK whatever Redis says (a
    /// lease not given back ends by itself when its time is up).
    async fn release(&self, slots: &[Slot]) {
        let releases = slots.iter().filter_map(|s| match s {
            Slot::Release(l, id) => Some(async move {
                match self.limiter.release_id(&l.key, id).await {
                    Ok(held) => {
                        self.metrics.redis_answered();
                        tracing::debug!(key = %l.key, id, held, "lease released");
                    }
                    Err(e) => {
                        self.observe_failed(&e);
                        tracing::warn!(key = %l.key, error = %e, "a lease could not be released: it ends with its lease time");
                    }
                }
            }),
            _ => None,
        });
        futures_util::future::join_all(releases).await;
    }

    /// RL.ACQUIRE (within RL.ALL beside the other limits) under the request's lease id, held until
    /// its release; `Err(allowed)` when Redis could not decide and the failure policy did.
    async fn acquire(
        &self,
        limits: &[redis_ratelimit_client::Limit<'_>],
        id: &str,
    ) -> Result<Result<Decision, bool>, CallError> {
        match self.limiter.acquire_detached(limits, id).await {
            Ok(d) => {
                self.metrics.redis_answered();
                Ok(Ok(d))
            }
            Err(e) if ReplyClass::of(&e) == ReplyClass::Usage => Err(e),
            Err(e) => {
                self.observe_failed(&e);
                match self.options.on_failure {
                    OnFailure::Error => Err(e),
                    OnFailure::Policy => Ok(Err(self.limiter.failure_policy() != FailurePolicy::Closed)),
                }
            }
        }
    }

    /// Redis' decision over `limits`; a call it did not decide is the failure policy's (`Policy`) or
    /// the error (`Error`); the caller's mistake (a usage error) is always the error.
    async fn check(&self, limits: &[redis_ratelimit_client::Limit<'_>]) -> Result<Decision, CallError> {
        match self.limiter.check_strict(limits).await {
            Ok(d) => {
                self.metrics.redis_answered();
                Ok(d)
            }
            Err(e) if ReplyClass::of(&e) == ReplyClass::Usage => Err(e),
            Err(e) => {
                self.observe_failed(&e);
                match self.options.on_failure {
                    OnFailure::Policy => Ok(self.limiter.decide_failed(limits, e)),
                    OnFailure::Error => Err(e),
                }
            }
        }
    }

    /// A call Redis did not decide: an outage when it got no answer (or one of an outage's replies);
    /// a key that holds another limiter's state, or a server that cannot run the limiter, is Redis
    /// answering (docs/errors.md): not an outage.
    fn observe_failed(&self, e: &CallError) {
        match ReplyClass::of(e) {
            ReplyClass::Outage => self.metrics.redis_failed(),
            _ => self.metrics.redis_answered(),
        }
    }

    /// One call over `members` (indices of limited slots): their keys merged (a key twice is charged
    /// the sum of its costs), the describing decision given to the slots of the limiting key.
    async fn check_group(
        &self,
        slots: &[Slot],
        members: &[usize],
        outcomes: &mut [Outcome],
    ) -> Result<bool, CallError> {
        let mut groups: Vec<(&Limit, u64)> = Vec::with_capacity(members.len());
        let mut group_of = Vec::with_capacity(members.len());
        let mut by_key: HashMap<&str, usize> = HashMap::new();
        for &i in members {
            let Slot::Limited(limit) = &slots[i] else { continue };
            let g = *by_key.entry(limit.key.as_str()).or_insert_with(|| {
                groups.push((limit, 0));
                groups.len() - 1
            });
            groups[g].1 += limit.cost;
            group_of.push((i, g));
        }
        let limits: Vec<_> = groups
            .iter()
            .filter_map(|(l, cost)| {
                l.rule.policy().map(|p| redis_ratelimit_client::Limit::new(&l.key, p, *cost))
            })
            .collect();
        if limits.is_empty() {
            return Ok(true);
        }
        let lease = groups.iter().find_map(|(l, _)| l.lease.as_deref());
        let decision = match lease {
            None => self.check(&limits).await?,
            Some(id) => match self.acquire(&limits, id).await? {
                Ok(d) => d,
                Err(allowed) => {
                    for (i, _) in group_of {
                        outcomes[i] = Outcome::Degraded(allowed);
                    }
                    return Ok(allowed);
                }
            },
        };
        for (i, g) in group_of {
            outcomes[i] = if g == decision.limiting {
                Outcome::Exact(decision.clone())
            } else {
                Outcome::Member { allowed: decision.allowed }
            };
        }
        Ok(decision.allowed)
    }

    async fn atomic(&self, slots: &[Slot]) -> Result<Vec<Outcome>, CallError> {
        let mut outcomes = vec![Outcome::Skipped; slots.len()];
        let blocked =
            slots.iter().any(|s| matches!(s, Slot::Blocked(l) if !l.rule.shadow() && !l.rule.quota()));
        // quota_mode limits each on its own, after the enforced ones allowed: one over its limit
        // denies the request only when all are (envoyproxy/ratelimit's rule), so none vetoes another.
        let (quota, rest): (Vec<usize>, Vec<usize>) = (0..slots.len())
            .filter(|&i| matches!(slots[i], Slot::Limited(_)))
            .partition(|&i| matches!(&slots[i], Slot::Limited(l) if l.rule.quota()));
        let (shadow, enforced): (Vec<usize>, Vec<usize>) =
            rest.into_iter().partition(|&i| matches!(&slots[i], Slot::Limited(l) if l.rule.shadow()));
        if blocked {
            return Ok(outcomes);
        }
        if !self.one_slot(slots, &enforced) || !self.one_slot(slots, &shadow) {
            // Cannot be one RL.ALL (CROSSSLOT): each descriptor on its own.
            self.metrics.cross_slot.inc();
            tracing::debug!(
                "the request's keys are in different cluster slots: decided descriptor by descriptor"
            );
            return self.per_descriptor(slots).await;
        }
        let allowed = self.check_group(slots, &enforced, &mut outcomes).await?;
        // Shadow limits in a call of their own, after the enforced ones allowed: inside the same
        // all-or-nothing call a shadow denial would veto them and leave a served request uncharged.
        if allowed && !shadow.is_empty() {
            self.check_group(slots, &shadow, &mut outcomes).await?;
        }
        if allowed {
            for i in quota {
                self.check_group(slots, &[i], &mut outcomes).await?;
            }
        }
        Ok(outcomes)
    }

    /// True unless `members`' keys fall in more than one Redis Cluster slot (only possible with
    /// `RLS_HASH_TAG=descriptor` on a cluster).
    fn one_slot(&self, slots: &[Slot], members: &[usize]) -> bool {
        if !self.options.cluster || self.options.hash == HashTag::Domain {
            return true;
        }
        let mut keys = members.iter().filter_map(|&i| match &slots[i] {
            Slot::Limited(l) => Some(plan::keyslot(&l.key)),
            _ => None,
        });
        let first = keys.next();
        keys.all(|s| Some(s) == first)
    }

    async fn per_descriptor(&self, slots: &[Slot]) -> Result<Vec<Outcome>, CallError> {
        let calls = slots.iter().map(|slot| async move {
            match slot {
                Slot::Limited(l) => match (l.rule.policy(), l.lease.as_deref()) {
                    (Some(p), Some(id)) if l.rule.algorithm() == Algorithm::Concurrency => {
                        match self
                            .acquire(&[redis_ratelimit_client::Limit::new(&l.key, p, l.cost)], id)
                            .await?
                        {
                            Ok(d) => Ok(Outcome::Exact(d)),
                            Err(allowed) => Ok(Outcome::Degraded(allowed)),
                        }
                    }
                    (Some(p), _) => self
                        .check(&[redis_ratelimit_client::Limit::new(&l.key, p, l.cost)])
                        .await
                        .map(Outcome::Exact),
                    (None, _) => Ok(Outcome::Skipped),
                },
                _ => Ok(Outcome::Skipped),
            }
        });
        futures_util::future::join_all(calls).await.into_iter().collect()
    }

    fn reply(&self, slots: &[Slot], outcomes: &[Outcome]) -> RateLimitResponse {
        let mut statuses = Vec::with_capacity(slots.len());
        let mut overall = Code::Ok;
        // The status the headers describe: the first over the limit, else the fewest remaining.
        let mut describing: Option<(bool, u32, u64, u64)> = None;
        // quota_mode descriptors: (in the request, over their limit).
        let mut quotas = (0usize, 0usize);
        for (slot, outcome) in slots.iter().zip(outcomes) {
            let status = match (slot, outcome) {
                (Slot::Limited(limit), Outcome::Degraded(allowed)) => {
                    self.status(limit, *allowed, 0, 0, Duration::ZERO, &mut overall, &mut describing)
                }
                (Slot::Free | Slot::Release(..) | Slot::Refused(_), _)
                | (Slot::Limited(_), Outcome::Member { .. } | Outcome::Skipped) => {
                    DescriptorStatus { code: Code::Ok.into(), ..Default::default() }
                }
                (Slot::Unlimited, _) => DescriptorStatus {
                    code: Code::Ok.into(),
                    limit_remaining: u32::MAX,
                    ..Default::default()
                },
                (Slot::Blocked(limit), _) => {
                    let reset = Duration::from_secs(limit.rule.unit().seconds());
                    self.status(limit, false, 0, 0, reset, &mut overall, &mut describing)
                }
                (Slot::Limited(limit), Outcome::Exact(d)) => self.status(
                    limit,
                    d.allowed,
                    d.limit,
                    d.remaining,
                    d.reset_after,
                    &mut overall,
                    &mut describing,
                ),
            };
            if matches!(slot, Slot::Limited(l) | Slot::Blocked(l) if l.rule.quota()) {
                quotas.0 += 1;
                quotas.1 += usize::from(status.code == Code::OverLimit as i32);
            }
            statuses.push(status);
        }
        // quota_mode: over the limit when every quota descriptor of the request is.
        if quotas.0 > 0 && quotas.0 == quotas.1 {
            overall = Code::OverLimit;
        }
        if self.options.global_shadow {
            overall = Code::Ok;
        }
        let mut response_headers_to_add = Vec::new();
        if let (Some(names), Some((_, remaining, limit, reset))) = (&self.options.headers, describing) {
            let header = |key: &str, value: u64| HeaderValue {
                key: key.to_string(),
                value: value.to_string(),
                ..Default::default()
            };
            response_headers_to_add = vec![
                header(&names.limit, limit),
                header(&names.remaining, u64::from(remaining)),
                header(&names.reset, reset),
            ];
        }
        RateLimitResponse {
            overall_code: overall.into(),
            statuses,
            response_headers_to_add,
            ..Default::default()
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn status(
        &self,
        limit: &Limit,
        allowed: bool,
        module_limit: u64,
        remaining: u64,
        reset: Duration,
        overall: &mut Code,
        describing: &mut Option<(bool, u32, u64, u64)>,
    ) -> DescriptorStatus {
        let shadow = limit.rule.shadow();
        let quota = limit.rule.quota();
        let over = !allowed && !shadow;
        if over && !quota {
            *overall = Code::OverLimit;
        }
        let remaining = u32::try_from(remaining).unwrap_or(u32::MAX);
        let header_limit =
            if module_limit == 0 { u64::from(limit.rule.requests_per_unit()) } else { module_limit };
        let reset_secs = reset.as_secs() + u64::from(reset.subsec_nanos() > 0);
        let replace = match describing {
            None => true,
            Some((was_over, was_remaining, _, _)) => !*was_over && (over || remaining < *was_remaining),
        };
        if replace && !quota {
            *describing = Some((over, remaining, header_limit, reset_secs));
        }
        DescriptorStatus {
            code: if over { Code::OverLimit } else { Code::Ok }.into(),
            current_limit: Some(RateLimit {
                name: limit.rule.name().to_string(),
                requests_per_unit: limit.rule.requests_per_unit(),
                unit: ProtoUnit::try_from(limit.rule.unit().to_proto()).unwrap_or(ProtoUnit::Unknown).into(),
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(prost_types::Duration {
                seconds: i64::try_from(reset.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(reset.subsec_nanos()).unwrap_or(0),
            }),
            quota: None,
        }
    }
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.decide(request.get_ref()).await.map(Response::new)
    }
}
