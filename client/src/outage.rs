//! Outages as events. An outage starts when a call gets no answer from Redis and ends when a call is
//! answered again: one log line (warning) at each end, the start saying what failed and which policy
//! decides, the end how long it lasted and how many decisions the failure policy made, of which
//! allowed; between them, at most one reminder per 10 s, whose count of lines held back is this
//! outage's own. The same events as counters (`counters.rs`).
//!
//! A configuration fault (the module's command unknown or refused to this user) is not an outage:
//! Redis answers, and waiting does not help. It is logged at error level, saying what to fix, at
//! most once a minute, and [`Outages::misconfigured`] says so until Redis decides again.
//!
//! Nor is a conflict (a key holding another limiter's state, or another type): logged at error
//! level once per key, with how to recover, and counted (docs/errors.md).

use crate::counters;
use crate::error::CallError;
use crate::failure::FailurePolicy;
use crate::log_throttle::LogThrottle;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) struct Outages {
    current: Mutex<Option<Outage>>,
    /// Whether `current` holds an outage: an answered call (every call, most of the time) reads
    /// this instead of taking the lock.
    under_way: AtomicBool,
    reminder: LogThrottle,
    /// One throttle per cause of a fault (the rule its answer matched): each is said once a minute.
    fault_logs: Mutex<HashMap<String, LogThrottle>>,
    misconfigured: AtomicBool,
    /// The keys whose conflict was logged (at most `MAX_CONFLICT_KEYS`; past that, one line a minute).
    conflicts: Mutex<HashSet<String>>,
    conflict_log: LogThrottle,
}

/// How many conflicting keys are each logged once; more are logged at most once a minute.
const MAX_CONFLICT_KEYS: usize = 1024;

/// The outage under way.
struct Outage {
    since: Instant,
    decisions: u64,
    allowed: u64,
    /// The engine in use when it began.
    engine: &'static str,
}

impl Outages {
    pub(crate) fn new() -> Outages {
        Outages {
            current: Mutex::new(None),
            under_way: AtomicBool::new(false),
            reminder: LogThrottle::new(Duration::from_secs(10)),
            fault_logs: Mutex::new(HashMap::new()),
            misconfigured: AtomicBool::new(false),
            conflicts: Mutex::new(HashSet::new()),
            conflict_log: LogThrottle::new(Duration::from_secs(60)),
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<Outage>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A call got no answer (`error`): the start of an outage, unless one is under way.
    /// `engine`: the engine in use when it began, as the engine machine reports it. True when this
    /// call began one.
    pub(crate) fn failed(
        &self,
        limiter: &Arc<str>,
        error: &CallError,
        policy: FailurePolicy,
        engine: &'static str,
        now: Instant,
    ) -> bool {
        let mut current = self.current();
        if current.is_some() {
            return false;
        }
        *current = Some(Outage { since: now, decisions: 0, allowed: 0, engine });
        self.under_way.store(true, Relaxed);
        drop(current);
        self.reminder.restart(now);
        tracing::warn!(limiter = %limiter, %error, ?policy, engine,
            "Redis outage: no answer from Redis; the failure policy decides until it answers again");
        true
    }

    /// A call was answered: the end of the outage under way, if any; when Redis `decided` it, the end
    /// of a configuration fault too (an answer of another class, a conflict or a fault, is Redis
    /// answering without deciding: the limiter stays misconfigured until one is decided).
    pub(crate) fn answered(&self, limiter: &Arc<str>, decided: bool, now: Instant) {
        // Reads first: the common answered call writes no shared cache line and takes no lock.
        if decided && self.misconfigured.load(Relaxed) {
            self.misconfigured.store(false, Relaxed);
        }
        if !self.under_way.load(Relaxed) {
            return;
        }
        let mut current = self.current();
        self.under_way.store(false, Relaxed);
        let Some(outage) = current.take() else { return };
        drop(current);
        let lasted = now.saturating_duration_since(outage.since);
        tracing::warn!(limiter = %limiter, ?lasted, decisions = outage.decisions, allowed = outage.allowed,
            engine = outage.engine, "Redis outage over: Redis answers again and decides");
    }

    /// An answer that says a key of the call (`keys`) holds another limiter's state or another type:
    /// logged once per key, counted.
    pub(crate) fn conflict(&self, limiter: &Arc<str>, keys: &str, error: &CallError, now: Instant) {
        let first = {
            let mut seen = self.conflicts.lock().unwrap_or_else(|e| e.into_inner());
            if seen.contains(keys) {
                return;
            }
            (seen.len() < MAX_CONFLICT_KEYS) && seen.insert(keys.to_string())
        };
        let log = || {
            tracing::error!(limiter = %limiter, keys, %error,
                "rate limit key conflict: the key holds another limiter's state or another type (a limit whose kind changed, or a key named twice); the failure policy decides for it until it expires or is deleted (docs/errors.md)");
        };
        if first {
            log();
        } else {
            self.conflict_log.maybe(now, |_| log());
        }
    }

    /// An answer that says the limiter cannot work with this server as configured.
    pub(crate) fn fault(
        &self,
        limiter: &Arc<str>,
        command: &str,
        error: &CallError,
        engine: &'static str,
        now: Instant,
    ) {
        self.misconfigured.store(true, Relaxed);
        let cause = format!("{command} {}", crate::reply_class::cause(error));
        let mut logs = self.fault_logs.lock().unwrap_or_else(|e| e.into_inner());
        let log = logs.entry(cause).or_insert_with(|| LogThrottle::new(Duration::from_secs(60)));
        log.maybe(now, |suppressed| {
            let fix = what_to_fix(command, error);
            tracing::error!(limiter = %limiter, %error, suppressed, engine,
                "rate limiter misconfigured (Redis answers: this is no outage); {fix}; meanwhile the failure policy decides");
        });
    }

    /// The failure policy decided (`allowed` or not) a call Redis did not decide: counted in the
    /// outage under way; outside one (a fault, an unexpected reply), a warning at most every 10 s.
    pub(crate) fn decided(
        &self,
        limiter: &Arc<str>,
        allowed: bool,
        error: &CallError,
        policy: FailurePolicy,
    ) {
        let mut current = self.current();
        if let Some(outage) = current.as_mut() {
            outage.decisions += 1;
            outage.allowed += u64::from(allowed);
            let (decisions, since, engine) = (outage.decisions, outage.since, outage.engine);
            drop(current);
            counters::outage_decision(limiter, allowed);
            self.reminder.maybe(Instant::now(), |suppressed| {
                tracing::warn!(limiter = %limiter, %error, ?policy, decisions, lasting = ?since.elapsed(), engine,
                    suppressed, "Redis outage goes on: degraded decisions by the failure policy");
            });
            return;
        }
        drop(current);
        if self.misconfigured() {
            return;
        }
        self.reminder.maybe(Instant::now(), |suppressed| {
            tracing::warn!(limiter = %limiter, %error, ?policy, suppressed,
                "Redis did not decide: degraded decision by the failure policy");
        });
    }

    /// True since an answer said the limiter is misconfigured, until Redis decides again.
    pub(crate) fn misconfigured(&self) -> bool {
        self.misconfigured.load(Relaxed)
    }
}

/// What to change, for a fault on `command`.
fn what_to_fix(command: &str, error: &CallError) -> String {
    let text = match error {
        CallError::Redis(e) => crate::reply_class::reply_text(e),
        other => other.to_string(),
    };
    if text.starts_with("NOPERM") {
        format!(
            "this Redis user may not run {command}: grant it the module's commands, e.g. \
             ACL SETUSER <user> ~rl:* +@ratelimit"
        )
    } else if !text.to_ascii_lowercase().contains(crate::reply_class::UNKNOWN_COMMAND) {
        format!("Redis answered {command} with an error the limiter cannot work with ({text})")
    } else {
        format!(
            "this server does not know {command}: load the ratelimit module (--loadmodule \
             /path/to/libredis_ratelimit.so), or undo a rename-command of it"
        )
    }
}
