//! Token budgets over Envoy's two calls (Envoy AI Gateway's `apply_on_stream_done`): a descriptor whose
//! rule has an `estimate` and that carries the request id entry (`RLS_HOLD_ENTRY`) is held, not
//! charged, by the request's first call (RL.HOLD of the estimate under the id), and settled by its
//! second (RL.SETTLE FINAL with that call's hits_addend: the token usage). The two are told apart by
//! the cost: a call whose held descriptors cost at most 1 is the request-path call (RL.HOLD, which a
//! retry replies to as the first and takes nothing twice; never a settle), one costing more is the
//! stream-done call. A stream-done call whose usage is at most 1 is therefore read as a request-path
//! call: it meets the hold and changes nothing, and the hold ends by `RLS_HOLD_ABANDON`.

use super::{Combine, OnFailure, Outcome, Service};
use crate::plan::Slot;
use redis_ratelimit_client::{command, CallError, Decision, HoldLimit, HoldOptions, ReplyClass, Settlement};
use tonic::Status;

/// The held slots of a request and their request id: the limited, enforced slots whose rule has an
/// `estimate` and whose descriptor named a request id. Several ids in one request are refused.
pub(super) fn held(slots: &[Slot]) -> Result<Option<(String, Vec<usize>)>, Status> {
    let mut id: Option<&str> = None;
    let mut held = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        let Slot::Limited(l) = slot else { continue };
        let Some(hold) = l.hold.as_deref() else { continue };
        if l.rule.estimate().is_none() || l.rule.shadow() || l.rule.quota() {
            continue;
        }
        if id.is_some_and(|id| id != hold) {
            return Err(Status::invalid_argument("the descriptors of one request carry one request id"));
        }
        id = Some(hold);
        held.push(i);
    }
    Ok(id.map(|id| (id.to_string(), held)))
}

/// `members`' keys, each once, with `units` of each summed (a key twice is one group): the groups and
/// each member's group.
fn groups(
    slots: &[Slot],
    members: &[usize],
    units: impl Fn(&crate::plan::Limit) -> u64,
) -> (Vec<(String, u64)>, Vec<usize>) {
    let mut groups: Vec<(String, u64)> = Vec::new();
    let mut of = Vec::with_capacity(members.len());
    for &i in members {
        let Slot::Limited(l) = &slots[i] else { unreachable!("members are limited slots") };
        let g = match groups.iter().position(|(k, _)| *k == l.key) {
            Some(g) => g,
            None => {
                groups.push((l.key.clone(), 0));
                groups.len() - 1
            }
        };
        groups[g].1 += units(l);
        of.push(g);
    }
    (groups, of)
}

/// The decision over groups given to their members: exact for the group it describes.
fn give(outcomes: &mut [Outcome], members: &[usize], of: &[usize], d: &Decision) {
    for (&i, &g) in members.iter().zip(of) {
        outcomes[i] =
            if g == d.limiting { Outcome::Exact(d.clone()) } else { Outcome::Member { allowed: d.allowed } };
    }
}

impl Service {
    /// The request's ledger: the contract's default for its first held key (in the limits' slot).
    fn ledger(slots: &[Slot], held: &[usize]) -> String {
        let Slot::Limited(first) = &slots[held[0]] else { unreachable!("held slots are limited") };
        command::ledger_of(&first.key)
    }

    /// A request with held slots: a request-path call (every held slot costs at most 1) holds them,
    /// with the request's other enforced limits charged exactly in the same atomic call; a stream-done
    /// call (a held slot costs more) settles them, or is charged as without holds when no hold of its
    /// id exists.
    pub(super) async fn hold_or_settle(
        &self,
        slots: &mut [Slot],
        id: &str,
        held: &[usize],
    ) -> Result<Vec<Outcome>, CallError> {
        let ledger = Self::ledger(slots, held);
        let (usage, of) = groups(slots, held, |l| l.cost);
        if usage.iter().all(|(_, cost)| *cost <= 1) {
            // The request-path call, or Envoy retrying it: RL.HOLD replies to a retry as to the first.
            return self.hold(slots, &ledger, id, held).await;
        }
        let actual: Vec<(&str, u64)> = usage.iter().map(|(k, u)| (k.as_str(), *u)).collect();
        match self.limiter.settle_detached(&ledger, id, &actual).await {
            Ok(Settlement::Settled(d)) => {
                self.metrics.redis_answered();
                tracing::debug!(%ledger, id, "a hold settled");
                let mut outcomes = self.decide_rest(slots, held).await?;
                give(&mut outcomes, held, &of, &d);
                Ok(outcomes)
            }
            Ok(Settlement::GaveUp(e)) => {
                self.observe_failed(&e);
                if self.options.on_failure == OnFailure::Error {
                    return Err(e);
                }
                let mut outcomes = self.decide_rest(slots, held).await?;
                for &i in held {
                    outcomes[i] = Outcome::Degraded(true);
                }
                Ok(outcomes)
            }
            // No hold of this id (it ended, or was never made): charged as it would be without holds.
            Ok(Settlement::NoHold | Settlement::Nothing) => {
                self.metrics.redis_answered();
                self.decide_rest(slots, &[]).await
            }
            Err(e) => {
                self.observe_failed(&e);
                Err(e)
            }
        }
    }

    /// RL.HOLD of the held slots' estimates and the other plain enforced limits' costs (exact).
    async fn hold(
        &self,
        slots: &mut [Slot],
        ledger: &str,
        id: &str,
        held: &[usize],
    ) -> Result<Vec<Outcome>, CallError> {
        let exact: Vec<usize> = (0..slots.len())
            .filter(|i| !held.contains(i))
            .filter(|&i| {
                matches!(&slots[i], Slot::Limited(l) if l.lease.is_none() && !l.rule.shadow() && !l.rule.quota() && l.rule.policy().is_some())
            })
            .collect();
        let (estimates, held_of) = groups(slots, held, |l| l.rule.estimate().unwrap_or(l.cost));
        let (costs, exact_of) = groups(slots, &exact, |l| l.cost);
        let policy_of = |key: &str| {
            slots.iter().find_map(|s| match s {
                Slot::Limited(l) if l.key == key => l.rule.policy(),
                _ => None,
            })
        };
        let mut limits: Vec<HoldLimit<'_>> = Vec::new();
        for ((key, units), exact) in
            estimates.iter().map(|g| (g, false)).chain(costs.iter().map(|g| (g, true)))
        {
            let Some(policy) = policy_of(key) else { continue };
            limits.push(if exact {
                HoldLimit::exact(key, policy, *units)
            } else {
                HoldLimit::estimate(key, policy, *units)
            });
        }
        let options = HoldOptions::default()
            .id(id)
            .ttl(self.options.holds.ttl)
            .abandon(self.options.holds.abandon)
            .ledger(ledger);
        let decision = match self.limiter.hold_detached(&limits, &options).await {
            Ok(d) => {
                self.metrics.redis_answered();
                d
            }
            Err(e) if ReplyClass::of(&e) == ReplyClass::Usage => return Err(e),
            Err(e) => {
                self.observe_failed(&e);
                if self.options.on_failure == OnFailure::Error {
                    return Err(e);
                }
                let plain: Vec<_> = limits.iter().map(|l| l.limit).collect();
                self.limiter.decide_failed(&plain, e)
            }
        };
        let members: Vec<usize> = held.iter().chain(&exact).copied().collect();
        let of: Vec<usize> =
            held_of.iter().copied().chain(exact_of.iter().map(|g| g + estimates.len())).collect();
        let mut outcomes = if decision.allowed {
            self.decide_rest(slots, &members).await?
        } else {
            vec![Outcome::Skipped; slots.len()]
        };
        give(&mut outcomes, &members, &of, &decision);
        Ok(outcomes)
    }

    /// The slots other than `done` decided as without holds (`done` set aside meanwhile).
    async fn decide_rest(&self, slots: &mut [Slot], done: &[usize]) -> Result<Vec<Outcome>, CallError> {
        let aside: Vec<(usize, Slot)> =
            done.iter().map(|&i| (i, std::mem::replace(&mut slots[i], Slot::Free))).collect();
        let outcomes = match self.options.combine {
            Combine::Atomic => self.atomic(slots).await,
            Combine::PerDescriptor => self.per_descriptor(slots).await,
        };
        for (i, slot) in aside {
            slots[i] = slot;
        }
        outcomes
    }
}
