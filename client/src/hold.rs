//! Budgets whose cost is known only after the work (LLM tokens): [`Limiter::hold`] holds an estimate
//! (RL.HOLD) and returns a [`Hold`], a guard that reports usage as it comes ([`Hold::add`], RL.SETTLE
//! PARTIAL) and settles the actual once ([`Hold::settle`], RL.SETTLE FINAL); docs/commands.md.

use crate::command::{self, Limit};
use crate::connection::Transport;
use crate::decision::Decision;
use crate::error::CallError;
use crate::limiter::{now_ns, parse_decision, Limiter};
use crate::permit::new_id;
use crate::reply_class::ReplyClass;
pub use ratelimit_core::hold::Abandon;
use ratelimit_core::hold::Mode;
use redis::Value;
use std::time::Duration;

/// How many times a settle (or an add) that met an outage is sent, each within the limiter's deadline.
pub const SETTLE_ATTEMPTS: u32 = 3;

/// One limit of a hold: a key, its policy and the units to take now. An *estimate* of a kind that
/// holds (token bucket, fixed window, sliding counter) is held and settled later; an *exact* limit
/// (the prompt's tokens, the request count) is charged as given and never settled. Limits of other
/// kinds are decided as in [`Limiter::check_all`] and not held.
#[derive(Debug, Clone, Copy)]
pub struct HoldLimit<'a> {
    pub limit: Limit<'a>,
    pub exact: bool,
}

impl<'a> HoldLimit<'a> {
    /// `units` held under the hold's id, settled by [`Hold::add`] and [`Hold::settle`].
    pub fn estimate(key: &'a str, policy: &'a crate::Policy, units: u64) -> HoldLimit<'a> {
        HoldLimit { limit: Limit::new(key, policy, units), exact: false }
    }

    /// `units` charged exactly: the hold's settles do not name this limit, so it stays charged.
    pub fn exact(key: &'a str, policy: &'a crate::Policy, units: u64) -> HoldLimit<'a> {
        HoldLimit { limit: Limit::new(key, policy, units), exact: true }
    }
}

/// A hold's id, time to live, abandon policy and ledger.
#[derive(Debug, Clone)]
pub struct HoldOptions {
    id: Option<String>,
    ttl: Duration,
    abandon: Abandon,
    ledger: Option<String>,
}

impl Default for HoldOptions {
    /// A random id, a ttl of [`HoldOptions::DEFAULT_TTL`], [`Abandon::Charge`] (the contract's
    /// `abandon_default`), the ledger named after the first key's hash tag.
    fn default() -> Self {
        HoldOptions { id: None, ttl: Self::DEFAULT_TTL, abandon: Abandon::Charge, ledger: None }
    }
}

impl HoldOptions {
    /// Five minutes (core's `hold::DEFAULT_TTL_SECS`, the contract's `holds.ttl_default_secs`): a
    /// long stream's time.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(ratelimit_core::hold::DEFAULT_TTL_SECS);

    /// The hold's id (1 to 256 bytes; default 128 random bits): the request's id, so that a retried
    /// request's hold takes nothing twice.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// How long the hold lasts unsettled (whole milliseconds, at most a day).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// What becomes of the hold if it is never settled.
    pub fn abandon(mut self, abandon: Abandon) -> Self {
        self.abandon = abandon;
        self
    }

    /// The ledger key (default `rl:holds:{<the first key's hash tag>}`); in a cluster it must share
    /// the limits' slot.
    pub fn ledger(mut self, ledger: impl Into<String>) -> Self {
        self.ledger = Some(ledger.into());
        self
    }
}

/// What a settle came to.
#[derive(Debug)]
pub enum Settlement {
    /// Settled (now, or by an earlier settle of the same id, whose reply this is): `allowed` false when
    /// a held limit went past its hold and has nothing left.
    Settled(Decision),
    /// Redis holds no hold of this id (it ended, or was settled longer than its ttl ago): nothing changed.
    NoHold,
    /// Nothing to settle: the hold was denied, decided by the failure policy, or holds no estimate.
    Nothing,
    /// Redis did not answer after [`SETTLE_ATTEMPTS`] tries (logged): the hold ends by its abandon policy.
    GaveUp(CallError),
}

/// An open hold (see [`Limiter::hold`]). Leaving its scope after [`settle`](Hold::settle) or
/// [`cancel`](Hold::cancel) sends nothing more. Leaving it unsettled (an error, a cancelled future, a
/// client that went away, or simply no settle) applies its abandon policy now, as a FINAL: under
/// [`Abandon::Charge`] (the default) each held limit settles at the larger of its estimate and the
/// usage last reported for it by [`add`](Hold::add) (nothing goes back: billing-safe); under
/// [`Abandon::Return`] at the usage last reported (0 when none): the unused part goes back. Exact
/// limits are never named. That is what Redis would do when the hold's ttl ends, done now.
/// [`close`](Hold::close)`.await` does it and says how it went; dropping the hold does it in the
/// background on the current tokio runtime (without a runtime, nothing is sent and the hold ends by
/// its abandon policy when its ttl does). To give everything back (the work failed before anything
/// was billed), call [`cancel`](Hold::cancel) in the error path.
#[derive(Debug)]
#[must_use = "dropping an unsettled hold applies its abandon policy at once"]
pub struct Hold {
    decision: Decision,
    open: Option<Open>,
}

/// What an allowed hold in Redis needs to settle.
#[derive(Debug)]
struct Open {
    limiter: Limiter,
    ledger: String,
    id: String,
    abandon: Abandon,
    /// The held keys, each once (Redis refuses a key twice), with its estimate.
    held: Vec<(String, u64)>,
    /// The usage last reported for each held key (0 where none was).
    usage: Vec<u64>,
    settled: bool,
}

impl Hold {
    /// The hold's decision (RL.ALL's): `degraded` when the failure policy made it.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    pub fn allowed(&self) -> bool {
        self.decision.allowed
    }

    /// The id it is held under in Redis (None: nothing is held there).
    pub fn id(&self) -> Option<&str> {
        self.open.as_ref().map(|o| o.id.as_str())
    }

    /// The usage so far (a running total) on every held limit (RL.SETTLE PARTIAL): usage past the hold
    /// is charged as it comes. True when the stream should stop: a held limit went past its hold and
    /// has nothing left. An outage is retried and then logged, and does not stop the stream.
    pub async fn add(&mut self, usage: u64) -> Result<bool, CallError> {
        let all = self.every(usage);
        self.add_each(&all.iter().map(|(k, u)| (k.as_str(), *u)).collect::<Vec<_>>()).await
    }

    /// As [`add`](Self::add), per held key.
    pub async fn add_each(&mut self, usage: &[(&str, u64)]) -> Result<bool, CallError> {
        let Some(open) = self.open.as_mut() else { return Ok(false) };
        open.record(usage);
        match open.send(Mode::Partial, usage).await? {
            Settlement::Settled(d) => Ok(!d.allowed),
            _ => Ok(false),
        }
    }

    /// The actual usage of every held limit (RL.SETTLE FINAL): the difference goes back or is charged
    /// in the hold's own window, once. Settling again is safe (Redis replies as the first time).
    pub async fn settle(&mut self, actual: u64) -> Result<Settlement, CallError> {
        let all = self.every(actual);
        self.settle_each(&all.iter().map(|(k, u)| (k.as_str(), *u)).collect::<Vec<_>>()).await
    }

    /// As [`settle`](Self::settle), per held key; a held key not named stays charged as held.
    pub async fn settle_each(&mut self, actual: &[(&str, u64)]) -> Result<Settlement, CallError> {
        let Some(open) = self.open.as_mut() else { return Ok(Settlement::Nothing) };
        open.settled = true;
        open.send(Mode::Final, actual).await
    }

    /// Gives the whole hold back (FINAL with 0 for every held limit): the explicit way to refund an
    /// estimate, e.g. when the upstream call failed before anything was billed. Leaving the hold's
    /// scope unsettled does not cancel it (it applies the abandon policy).
    pub async fn cancel(&mut self) -> Result<Settlement, CallError> {
        self.settle(0).await
    }

    /// Ends the hold: after a settle or a cancel nothing is sent ([`Settlement::Nothing`]); otherwise
    /// its abandon policy is applied now, as a FINAL (see [`Hold`]): what dropping it does in the
    /// background.
    pub async fn close(mut self) -> Result<Settlement, CallError> {
        match self.open.take() {
            Some(open) if !open.settled => open.abandon().await,
            _ => Ok(Settlement::Nothing),
        }
    }

    /// `units` for every held key.
    fn every(&self, units: u64) -> Vec<(String, u64)> {
        self.open.iter().flat_map(|o| o.held.iter().map(|(k, _)| (k.clone(), units))).collect()
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let Some(open) = self.open.take().filter(|o| !o.settled) else { return };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = open.abandon().await;
            });
        }
    }
}

impl Open {
    fn record(&mut self, usage: &[(&str, u64)]) {
        for (key, units) in usage {
            if let Some(i) = self.held.iter().position(|(k, _)| k == key) {
                self.usage[i] = *units;
            }
        }
    }

    /// What each held key settles at when the hold is left unsettled: under CHARGE the larger of its
    /// estimate and its last usage (nothing goes back), under RETURN its last usage (0 when none).
    fn abandoned(&self) -> Vec<(&str, u64)> {
        let at = |estimate: u64, used: u64| match self.abandon {
            Abandon::Charge => estimate.max(used),
            Abandon::Return => used,
        };
        self.held
            .iter()
            .zip(&self.usage)
            .map(|((k, estimate), &used)| (k.as_str(), at(*estimate, used)))
            .collect()
    }

    /// The abandon policy applied now, as a FINAL.
    async fn abandon(mut self) -> Result<Settlement, CallError> {
        self.settled = true;
        let usage = self.abandoned();
        self.send(Mode::Final, &usage).await
    }

    /// FINAL with 0 for every held key: everything back.
    async fn cancel(mut self) -> Result<Settlement, CallError> {
        self.settled = true;
        let usage: Vec<(&str, u64)> = self.held.iter().map(|(k, _)| (k.as_str(), 0)).collect();
        self.send(Mode::Final, &usage).await
    }

    async fn send(&self, mode: Mode, usage: &[(&str, u64)]) -> Result<Settlement, CallError> {
        send_settle(&self.limiter, &self.ledger, &self.id, mode, usage).await
    }
}

/// RL.SETTLE, sent again on an outage up to [`SETTLE_ATTEMPTS`] times with the same id (a repeat
/// counts once), then logged and given up. Other errors (the caller's mistake) are returned.
async fn send_settle(
    limiter: &Limiter,
    ledger: &str,
    id: &str,
    mode: Mode,
    usage: &[(&str, u64)],
) -> Result<Settlement, CallError> {
    let cmd = command::settle(ledger, id, mode, usage)?;
    let mut pause = Duration::from_millis(20);
    for attempt in 1..=SETTLE_ATTEMPTS {
        match limiter.query(&cmd).await {
            Ok(Value::Nil) => return Ok(Settlement::NoHold),
            Ok(value) => return parse_decision(value).map(Settlement::Settled),
            Err(e) if ReplyClass::of(&e) != ReplyClass::Outage => return Err(e),
            Err(e) if attempt == SETTLE_ATTEMPTS => {
                let mode_word = Mode::WORDS[mode as usize];
                match mode {
                    Mode::Final => tracing::warn!(limiter = %limiter.name(), ledger, id, mode = mode_word,
                        error = %e, attempts = SETTLE_ATTEMPTS,
                        "a hold's settle did not reach Redis: given up; the hold ends by its abandon policy"),
                    Mode::Partial => tracing::warn!(limiter = %limiter.name(), ledger, id, mode = mode_word,
                        error = %e, attempts = SETTLE_ATTEMPTS,
                        "a hold's usage report did not reach Redis: given up; the hold stays open"),
                }
                return Ok(Settlement::GaveUp(e));
            }
            Err(_) => {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
        }
    }
    unreachable!("the last attempt returns")
}

impl Limiter {
    /// Holds estimates of limits whose cost is known only after the work (RL.HOLD): allowed only when
    /// every limit allows, and then all are taken; a denial takes and records nothing. The estimates
    /// are held under the hold's id until [`Hold::settle`] reports the actual.
    ///
    /// When Redis cannot decide, the failure policy does (`degraded`) and the hold is local: it holds
    /// nothing in Redis and its settles do nothing ([`Settlement::Nothing`]). A hold left unanswered
    /// (the deadline passed, the connection was lost) may still have been held: nothing is sent for
    /// it (a retry with the same id meets it and takes nothing), and it ends by its abandon policy
    /// when its ttl does. A call that cannot be
    /// built, or that Redis refuses as the caller's mistake (an invalid ttl or id), is returned as an
    /// error.
    ///
    /// ```no_run
    /// # use redis_ratelimit_client::{HoldLimit, HoldOptions, Limiter, Policy};
    /// # async fn f(limiter: Limiter) -> Result<(), Box<dyn std::error::Error>> {
    /// let tpm = Policy::fixed_window(100_000, std::time::Duration::from_secs(60))?;
    /// let max_tokens = 1_500;
    /// let limits = [HoldLimit::estimate("rl:{key:42}:tpm", &tpm, max_tokens)];
    /// let mut hold = limiter.hold(&limits, HoldOptions::default().id("req-7f3a")).await?;
    /// if !hold.allowed() {
    ///     return Ok(()); // 429, retry after hold.decision().retry_after
    /// }
    /// // ... the model's response; usage.total_tokens == 1212
    /// hold.settle(1212).await?; // 288 tokens go back
    /// # Ok(())
    /// # }
    /// ```
    pub async fn hold(&self, limits: &[HoldLimit<'_>], options: HoldOptions) -> Result<Hold, CallError> {
        let plain: Vec<Limit<'_>> = limits.iter().map(|l| l.limit).collect();
        let id = options.id.unwrap_or_else(new_id);
        let ledger =
            options.ledger.unwrap_or_else(|| command::ledger_of(plain.first().map_or("", |l| l.key)));
        let cmd = command::hold(&ledger, &id, options.ttl, options.abandon, &plain)?;
        if let Transport::Local(local) = self.backend() {
            // The in-process backend: decided here, nothing held.
            let decision = local.decide(&plain, now_ns(), false);
            self.record(&decision, false);
            return Ok(Hold { decision, open: None });
        }
        let result = self.send_decision(&cmd, &plain).await;
        let held: Vec<(String, u64)> = limits
            .iter()
            .filter(|l| !l.exact && command::holds(l.limit.policy.kind()))
            .map(|l| (l.limit.key.to_string(), l.limit.cost))
            .collect();
        let usage = vec![0; held.len()];
        let open =
            Open { limiter: self.clone(), ledger, id, abandon: options.abandon, held, usage, settled: false };
        let holds = !open.held.is_empty();
        let decision = match result {
            Ok(d) if d.allowed && holds => {
                self.record(&d, false);
                return Ok(Hold { decision: d, open: Some(open) });
            }
            Ok(d) => {
                if d.degraded && !d.allowed && holds {
                    // Held, then refused for too few replicas (`WaitTimeout::Deny`): given back.
                    tokio::spawn(open.cancel());
                }
                self.record(&d, false);
                d
            }
            Err(e) if ReplyClass::of(&e) == ReplyClass::Usage => return Err(e),
            // Unanswered (a deadline, a lost connection): it may have reached Redis and held. Nothing
            // is sent for it: a cancel would settle a hold that the caller's retry with the same id
            // then meets as allowed, taking nothing. Such a hold ends by its abandon policy.
            Err(e) => self.settle(&plain, Err(e)),
        };
        Ok(Hold { decision, open: None })
    }

    /// Holds as [`hold`](Self::hold) does, but keeps no guard: the hold is settled by
    /// [`settle_detached`](Self::settle_detached) with the same ledger and id, from anywhere (another
    /// process, a later request), or ends by its abandon policy. For a holder that does not see the
    /// work end: the rate limit service, whose settle comes in a later request from Envoy. No failure
    /// policy: Redis' decision, or the reason there is none.
    pub async fn hold_detached(
        &self,
        limits: &[HoldLimit<'_>],
        options: &HoldOptions,
    ) -> Result<Decision, CallError> {
        let plain: Vec<Limit<'_>> = limits.iter().map(|l| l.limit).collect();
        let id = options.id.as_deref().ok_or(CallError::Usage("a detached hold needs its id"))?;
        let ledger = self.ledger_for(options, &plain);
        let cmd = command::hold(&ledger, id, options.ttl, options.abandon, &plain)?;
        let decision = self.send_decision(&cmd, &plain).await?;
        self.record(&decision, false);
        Ok(decision)
    }

    /// RL.SETTLE FINAL of a hold held under `id` in `ledger` (the hold's [`HoldOptions::ledger`], or its default): each
    /// key's actual. Retried on an outage as [`Hold::settle`] is.
    pub async fn settle_detached(
        &self,
        ledger: &str,
        id: &str,
        actual: &[(&str, u64)],
    ) -> Result<Settlement, CallError> {
        send_settle(self, ledger, id, Mode::Final, actual).await
    }

    fn ledger_for(&self, options: &HoldOptions, limits: &[Limit<'_>]) -> String {
        options.ledger.clone().unwrap_or_else(|| command::ledger_of(limits.first().map_or("", |l| l.key)))
    }
}
