//! Batched units (docs/high-volume.md, the contract's `batching`): a policy with a `batch` takes up to
//! that many units per call and spends them here, without a round trip, until its lease ends. The
//! rules only, no I/O: [`Batches::plan`] says what a check does now (decide locally, or call Redis
//! asking extras, and which held units to give back first), [`Batches::answer`] takes Redis' answer.
//! Every unit spent here was taken from Redis first: never admitted beyond the limit.

use crate::batching::{window_end, WindowEnd, AHEAD, GROW, MAX_KEYS, REFUND_MARGIN, SHARE, START, SWEEP};
use crate::command::Limit;
use crate::decision::Decision;
use crate::policy::Policy;
use ratelimit_core::kind::LimiterKind;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Units to give back with RL.REFUND.
#[derive(Debug, Clone, PartialEq)]
pub struct Refund {
    pub key: String,
    pub policy: Policy,
    pub units: u64,
}

/// What a check does.
#[derive(Debug)]
pub struct Plan {
    /// Held units to give back first (expired).
    pub refunds: Vec<Refund>,
    pub action: Action,
    /// Batches to take ahead, off the caller's path (a local decision left a key's units below a
    /// quarter of its batch).
    pub ahead: Vec<Ahead>,
}

/// A batch taken ahead for one limit: `RL.* key ... units` with no request of its own; its answer
/// goes to [`Batches::answer`] as a call of that one limit at cost 0 with `asked`.
#[derive(Debug)]
pub struct Ahead {
    pub key: String,
    pub policy: Policy,
    pub asked: Asked,
}

#[derive(Debug)]
pub enum Action {
    /// Decided here from held units.
    Local(Decision),
    /// One call, each limit asking its cost plus `extras[i]`.
    Call(Asked),
    /// A call asking a batch for one of these limits is in flight in this process: wait for its
    /// answer (it brings units), then plan again. One batch call per key at a time keeps the
    /// units held and in flight per key at most `batch - 1`.
    Wait(Arc<Flight>),
}

/// A batch call in flight: done when its answer (or its failure) is in.
#[derive(Debug, Default)]
pub struct Flight {
    done: AtomicBool,
    pub notify: tokio::sync::Notify,
}

impl Flight {
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    fn land(&self) {
        self.done.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
}

/// A call's batch: per limit, the extra units asked and the batch size they came from (None: the
/// limit keeps no state from this call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub extras: Vec<u64>,
    pub sizes: Vec<Option<u64>>,
}

impl Asked {
    pub fn any_extra(&self) -> bool {
        self.extras.iter().any(|e| *e > 0)
    }

    /// The same call without extras (a denied batch: the request itself may fit), at size 1.
    pub fn without_extras(&self) -> Asked {
        Asked {
            extras: vec![0; self.extras.len()],
            sizes: self.sizes.iter().map(|s| s.map(|_| START)).collect(),
        }
    }

    /// `limits` with each one's cost raised by its extra.
    pub fn with_extras<'a>(&self, limits: &[Limit<'a>]) -> Vec<Limit<'a>> {
        limits.iter().zip(&self.extras).map(|(l, e)| Limit { cost: l.cost + e, ..*l }).collect()
    }
}

struct State {
    key: String,
    policy: Policy,
    held: u64,
    size: u64,
    /// When the answer that gave the units came.
    since: Instant,
    until: Instant,
    window_end: Option<Instant>,
    last: Decision,
    /// This state's batch call in flight.
    flight: Option<Arc<Flight>>,
}

impl State {
    /// A batch to take ahead when the units held fell below a quarter of the size, none is in
    /// flight and the lease goes on: the next size, at most what keeps held and in flight below
    /// `batch`.
    fn ahead(&mut self, now: Instant) -> Option<Ahead> {
        let batch = self.policy.batch()?;
        if self.flight.is_some() || self.held * AHEAD >= self.size || now >= self.until {
            return None;
        }
        let size = self.size.saturating_mul(GROW).min(batch.max).min((self.last.remaining / SHARE).max(1));
        let units = size.min(batch.max - 1 - self.held.min(batch.max - 1));
        if units == 0 {
            return None;
        }
        self.flight = Some(Arc::default());
        Some(Ahead {
            key: self.key.clone(),
            policy: self.policy.clone(),
            asked: Asked { extras: vec![units], sizes: vec![Some(size)] },
        })
    }

    /// The expired units to give back at `now`, if they still belong to a window that is going on.
    fn expire(&mut self, now: Instant) -> Option<Refund> {
        if now < self.until || self.held == 0 {
            return None;
        }
        let units = std::mem::take(&mut self.held);
        let open = self.window_end.is_none_or(|end| now + REFUND_MARGIN < end);
        open.then(|| Refund { key: self.key.clone(), policy: self.policy.clone(), units })
    }
}

#[derive(Default)]
struct Table {
    states: HashMap<String, State>,
    next_sweep: Option<Instant>,
}

/// The batched units of one limiter.
#[derive(Default)]
pub struct Batches {
    table: Mutex<Table>,
}

fn id(limit: &Limit<'_>) -> String {
    let [p1, p2] = limit.policy.params();
    format!("{}\n{}\n{p1}\n{p2}", limit.key, limit.policy.kind().group())
}

impl Batches {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What a check of `limits` does at `now`.
    pub fn plan(&self, limits: &[Limit<'_>], now: Instant) -> Plan {
        let n = limits.len();
        let unbatched = || Action::Call(Asked { extras: vec![0; n], sizes: vec![None; n] });
        if limits.iter().all(|l| l.policy.batch().is_none()) {
            return Plan { refunds: vec![], action: unbatched(), ahead: vec![] };
        }
        let mut t = self.lock();
        let ids: Vec<String> = limits.iter().map(id).collect();
        let mut refunds = sweep(&mut t, &ids, now);
        for i in &ids {
            if let Some(r) = t.states.get_mut(i).and_then(|s| s.expire(now)) {
                refunds.push(r);
            }
        }
        let holding: Vec<bool> = limits
            .iter()
            .zip(&ids)
            .map(|(l, i)| {
                l.policy.batch().is_some()
                    && t.states.get(i).is_some_and(|s| now < s.until && s.held >= l.cost)
            })
            .collect();
        if holding.iter().all(|h| *h) {
            let mut local: Vec<Decision> = vec![];
            let mut ahead = vec![];
            for (l, i) in limits.iter().zip(&ids) {
                let s = t.states.get_mut(i).expect("held");
                s.held -= l.cost;
                ahead.extend(s.ahead(now));
                local.push(Decision {
                    remaining: s.last.remaining + s.held,
                    reset_after: s.last.reset_after.saturating_sub(now - s.since),
                    retry_after: Some(Duration::ZERO),
                    limiting: 0,
                    local: true,
                    ..s.last.clone()
                });
            }
            // All allowed: the most restrictive is the one with the fewest left (first on ties).
            let limiting = (0..local.len()).min_by_key(|j| local[*j].remaining).unwrap_or(0);
            let decision = Decision { limiting, ..local[limiting].clone() };
            return Plan { refunds, action: Action::Local(decision), ahead };
        }
        let flying = limits.iter().zip(&ids).zip(&holding).find_map(|((l, i), holds)| {
            (l.policy.batch().is_some() && !holds).then(|| t.states.get(i)?.flight.clone()).flatten()
        });
        if let Some(flight) = flying {
            return Plan { refunds, action: Action::Wait(flight), ahead: vec![] };
        }
        let mut asked = Asked { extras: vec![0; n], sizes: vec![None; n] };
        for (j, (l, i)) in limits.iter().zip(&ids).enumerate() {
            let Some(batch) = l.policy.batch() else { continue };
            // In a call of several limits only a bucket batches: a window's end is known only from
            // an answer about that limit alone.
            if (n > 1 && l.policy.kind() != LimiterKind::TokenBucket) || holding[j] {
                continue;
            }
            let size = match t.states.get(i) {
                None if t.states.len() >= MAX_KEYS => continue,
                None => START,
                Some(s) => {
                    let adapted =
                        if now < s.until { s.size.saturating_mul(GROW) } else { (s.size / GROW).max(1) };
                    adapted.min((s.last.remaining / SHARE).max(1))
                }
            };
            let size = size.min(batch.max).max(1);
            asked.extras[j] = size - 1;
            asked.sizes[j] = Some(size);
            if let Some(s) = t.states.get_mut(i).filter(|_| size > 1) {
                s.flight = Some(Arc::default());
            }
        }
        Plan { refunds, action: Action::Call(asked), ahead: vec![] }
    }

    /// Redis' `answer` to the call `asked` for `limits` at `now`: the held units and sizes change;
    /// returns the decision to give the caller (its `remaining` counts the units held here).
    pub fn answer(&self, limits: &[Limit<'_>], asked: &Asked, answer: Decision, now: Instant) -> Decision {
        if asked.sizes.iter().all(Option::is_none) {
            return answer;
        }
        let mut t = self.lock();
        land(&mut t, limits, asked);
        if answer.degraded {
            return answer;
        }
        let mut decision = answer.clone();
        for (j, l) in limits.iter().enumerate() {
            let (Some(size), Some(batch)) = (asked.sizes[j], l.policy.batch()) else { continue };
            let i = id(l);
            if !answer.allowed {
                if let Some(s) = t.states.get_mut(&i) {
                    s.size = START;
                }
                continue;
            }
            let end = match window_end(l.policy.kind()).unwrap_or(WindowEnd::None) {
                WindowEnd::None => None,
                WindowEnd::Reset => Some(now + answer.reset_after),
                WindowEnd::ResetMinusWindow => {
                    Some(now + answer.reset_after.saturating_sub(l.policy.window_length()))
                }
            };
            let lease_end = now + batch.lease;
            let until = end.map_or(lease_end, |e| lease_end.min(e.checked_sub(REFUND_MARGIN).unwrap_or(now)));
            // Units held from a window that has ended meanwhile do not carry into the next one.
            let ended = |s: &State| s.window_end.zip(end).is_some_and(|(old, new)| new > old + REFUND_MARGIN);
            let held_before = t.states.get(&i).map_or(0, |s| if ended(s) { 0 } else { s.held });
            let s = State {
                key: l.key.to_string(),
                policy: l.policy.clone(),
                held: held_before + asked.extras[j],
                size,
                since: now,
                until,
                window_end: end,
                last: answer.clone(),
                flight: None,
            };
            if n_is_limiting(limits.len(), answer.limiting, j) {
                decision.remaining += s.held;
            }
            t.states.insert(i, s);
        }
        decision
    }

    /// The batch calls in flight now.
    pub fn flights(&self) -> Vec<Arc<Flight>> {
        self.lock().states.values().filter_map(|s| s.flight.clone()).collect()
    }

    /// A flight that did not land within a deadline (its caller gave up: a dropped future) is
    /// forgotten, so that the next check asks again.
    pub fn abandon(&self, flight: &Arc<Flight>) {
        for s in self.lock().states.values_mut() {
            if s.flight.as_ref().is_some_and(|f| Arc::ptr_eq(f, flight)) {
                s.flight = None;
            }
        }
        flight.land();
    }

    /// The call `asked` for `limits` failed (no answer): its waiters plan again.
    pub fn failed(&self, limits: &[Limit<'_>], asked: &Asked) {
        if asked.sizes.iter().any(Option::is_some) {
            land(&mut self.lock(), limits, asked);
        }
    }

    /// Every held unit, to give back (the limiter is closing); the states are forgotten.
    pub fn drain(&self, now: Instant) -> Vec<Refund> {
        let mut t = self.lock();
        let mut out: Vec<(String, Refund)> = t
            .states
            .drain()
            .filter(|(_, s)| s.held > 0 && s.window_end.is_none_or(|end| now + REFUND_MARGIN < end))
            .map(|(i, s)| (i, Refund { key: s.key, policy: s.policy, units: s.held }))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.into_iter().map(|(_, r)| r).collect()
    }

    /// Units held now for the limit (tests and vectors).
    pub fn held(&self, limit: &Limit<'_>) -> u64 {
        self.lock().states.get(&id(limit)).map_or(0, |s| s.held)
    }
}

/// The batch calls of `asked` are in: their waiters wake.
fn land(t: &mut Table, limits: &[Limit<'_>], asked: &Asked) {
    for (l, size) in limits.iter().zip(&asked.sizes) {
        if size.is_some() {
            if let Some(f) = t.states.get_mut(&id(l)).and_then(|s| s.flight.take()) {
                f.land();
            }
        }
    }
}

/// Whether the answer's fields describe limit `j` of `n` (its `remaining` then counts our units).
fn n_is_limiting(n: usize, limiting: usize, j: usize) -> bool {
    n == 1 || limiting == j
}

/// Every `SWEEP`, the expired states of keys other than this check's: their units to give back
/// (in the order of their ids), the states forgotten.
fn sweep(t: &mut Table, ids: &[String], now: Instant) -> Vec<Refund> {
    let due = *t.next_sweep.get_or_insert(now + SWEEP);
    if now < due {
        return vec![];
    }
    t.next_sweep = Some(now + SWEEP);
    let mut expired: Vec<String> =
        t.states.iter().filter(|(i, s)| now >= s.until && !ids.contains(i)).map(|(i, _)| i.clone()).collect();
    expired.sort();
    expired.into_iter().filter_map(|i| t.states.remove(&i).and_then(|mut s| s.expire(now))).collect()
}
