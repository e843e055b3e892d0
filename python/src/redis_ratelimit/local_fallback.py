"""The local fallback: while Redis cannot decide, each application instance limits on its own, at its
share of each limit. Imprecise by design: a rough bound that stays available. As
``client/src/fallback.rs``, held to it by ``contract/vectors/fallback.json``.

One algorithm serves every kind whose contract ``fallback`` is ``token_bucket`` (every kind but
concurrency): core's token bucket (GCRA) of the policy's ``limit`` refilled over its ``period``, shared
by the instances: ``limit / instances`` tokens (at least 1), refilled ``instances`` times slower. A
token bucket is then itself at its share; a window or a log lets an instance admit at most its share
in a burst, plus what refills meanwhile (in any period, at most the share plus ``limit / instances``).
The kinds whose ``fallback`` is ``leases`` (concurrency) keep leases, acquired, renewed and released
here. A new kind needs nothing of its own here.

Memory is bounded: past ``MAX_KEYS`` keys, state that has expired is dropped first, then everything (a
fresh start errs towards allowing, as failing open does). Thread-safe (one lock, held for one
decision); time is a parameter (``now`` in ns since the epoch) so the algorithm is tested with
explicit times. Integer nanoseconds throughout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import NamedTuple

from .command import Limit
from .contract import CONTRACT
from .contract import kind as contract_kind
from .decision import Decision
from .policy import MAX_HORIZON_NS, Policy

__all__ = ["LocalLimiter", "MAX_KEYS"]

#: The most keys kept (the contract's `fallback.max_keys`): past it, expired state goes first, then everything.
MAX_KEYS: int = CONTRACT["fallback"]["max_keys"]


class Verdict(NamedTuple):
    allowed: bool
    limit: int
    remaining: int
    retry_after_ns: int | None  # None: never fits
    reset_after_ns: int


class Outcome(NamedTuple):
    verdict: Verdict
    state: object | None = None  # None: nothing to write; a bucket's TAT (int) or leases (dict)
    expires_at: int = 0
    repair: bool = False  # an impossible state replaced: written even when the combination is denied


class Bucket(NamedTuple):
    """Core's `TokenBucket` (GCRA): ``capacity`` tokens, one per ``interval`` ns; a full refill takes
    ``tau`` ns, of which ``slack`` (below one interval) is rounding that counts as full."""

    capacity: int
    interval: int
    tau: int
    slack: int

    @staticmethod
    def of(policy: Policy, instances: int) -> Bucket | None:
        """``TokenBucket::per_period(limit, limit, period).share(instances)``; None for a kind that
        keeps leases, or when the clock cannot express it (a period within ``limit`` ns of the horizon)."""
        if _leases(policy):
            return None
        limit, period = policy.limit, policy.period_ns
        interval = -(-period // limit)
        whole = Bucket(limit, interval, interval * limit, min(interval * limit - period, interval - 1))
        if whole.tau > MAX_HORIZON_NS:
            return None
        capacity = max(1, limit // instances)
        shared = Bucket(capacity, interval * instances, interval * instances * capacity, 0)
        # A share the clock cannot express: the whole bucket (as core's share does).
        return whole if shared.tau > MAX_HORIZON_NS else shared

    def backlog(self, tat: int | None, now: int) -> tuple[int, bool]:
        """The backlog a stored TAT leaves, and whether it is impossible (more than two full refills
        ahead: a clock fault, counted as an empty bucket)."""
        stored = 0 if tat is None else max(0, tat - now)
        depth = self.tau + self.slack
        return (depth, True) if stored > 2 * depth else (stored, False)

    def reserve(self, tat: int | None, now: int, cost: int, max_wait: int = 0) -> Outcome:
        """Core's `TokenBucket::reserve_tat`: ``cost`` tokens now, or from the future within ``max_wait``."""
        depth = self.tau + self.slack
        backlog, repair = self.backlog(tat, now)

        def verdict(allowed: bool, backlog: int, retry: int | None) -> Verdict:
            return Verdict(allowed, self.capacity, max(0, depth - backlog) // self.interval, retry,
                           max(0, backlog - self.slack))

        def unchanged(v: Verdict) -> Outcome:
            return Outcome(v, now + self.tau, now + self.tau, True) if repair else Outcome(v)

        if cost > self.capacity:
            return unchanged(verdict(False, backlog, None))
        if cost == 0:
            return unchanged(verdict(True, backlog, 0))
        after = backlog + cost * self.interval
        wait = max(0, after - depth)
        if wait > min(max(max_wait, 0), self.tau - self.slack):
            return unchanged(verdict(False, backlog, wait))
        return Outcome(verdict(True, after, wait), now + after, now + after)


def _leases(policy: Policy) -> bool:
    return bool(contract_kind(policy.kind.name)["fallback"] == "leases")


def _never(limit: int) -> Outcome:
    return Outcome(Verdict(False, limit, 0, None, 0))


def _decide(policy: Policy, instances: int, state: object | None, now: int, cost: int,
            lease_id: str | None) -> Outcome:
    """One request of ``cost`` (a lease's weight, held by ``lease_id``) at this instance's share."""
    limit = max(1, policy.limit // instances)
    if cost < 0:
        return _never(limit)
    if _leases(policy):
        if lease_id is None:
            return _never(limit)  # a check cannot take a lease it could never release
        held = state if isinstance(state, dict) else None
        return _acquire(limit, policy.period_ns, held, now, max(cost, 1), lease_id)
    bucket = Bucket.of(policy, instances)
    if bucket is None:
        return _never(limit)
    return bucket.reserve(state if isinstance(state, int) else None, now, cost)


Held = dict[str, tuple[int, int]]  # lease id -> (end ns, weight)


def _live(held: Held | None, now: int) -> Held:
    return {} if held is None else {i: e for i, e in held.items() if e[0] > now}


def _acquire(limit: int, lease: int, stored: Held | None, now: int, weight: int, lease_id: str) -> Outcome:
    """Core's `Leases` decision: a lease of ``weight`` for ``lease_id`` (a retry by a holder is the
    same request: the same slot, for longer)."""
    held = _live(stored, now)
    end = now + lease
    if lease_id in held:
        held[lease_id] = (end, held[lease_id][1])
    else:
        used = sum(w for _, w in held.values())
        if used + weight > limit:
            retry: int | None = None  # a weight above the limit never fits
            if weight <= limit:
                freed = 0
                for lease_end, w in sorted(held.values()):
                    freed += w
                    retry = lease_end - now
                    if used - freed + weight <= limit:
                        break
            last = max((e for e, _ in held.values()), default=now) - now
            return Outcome(Verdict(False, limit, limit - used, retry, last))
        held[lease_id] = (end, weight)
    used = sum(w for _, w in held.values())
    last = max(e for e, _ in held.values())
    return Outcome(Verdict(True, limit, limit - used, 0, last - now), held, last)


class LocalLimiter:
    """An in-process limiter deciding with ``limit / instances`` of each policy, per key."""

    def __init__(self, instances: int = 1) -> None:
        if instances < 1:
            raise ValueError("fallback: instances must be at least 1")
        self.instances = instances
        self._lock = threading.Lock()
        # key -> (state, expires at ns)
        self._entries: dict[str, tuple[object, int]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def decide(
        self, limits: Sequence[Limit], *, now: int | None = None, degraded: bool = True
    ) -> Decision:
        """Decides ``limits`` together, all or nothing, as RL.ALL does. Concurrency limits take no
        lease here (a check could never release it): use ``acquire``."""
        return self._decide(limits, None, now, degraded)

    def acquire(
        self, limits: Sequence[Limit], lease_id: str, *, now: int | None = None, degraded: bool = True
    ) -> Decision:
        """``decide``, the concurrency limits among them taking leases held by ``lease_id`` (the
        cost is the lease's weight)."""
        return self._decide(limits, lease_id, now, degraded)

    def release(self, key: str, lease_id: str, *, now: int | None = None) -> bool:
        """Frees the lease ``lease_id`` holds at ``key``, as RL.RELEASE: True when it held one."""
        return self._lease_op(key, lease_id, None, now)

    def renew(self, key: str, lease: float, lease_id: str, *, now: int | None = None) -> bool:
        """Extends the lease of ``lease_id`` at ``key`` to ``lease`` seconds from now, as RL.RENEW:
        True when it still held one; never re-acquires."""
        return self._lease_op(key, lease_id, int(lease * 1e9), now)

    def take(
        self, key: str, policy: Policy, max_units: int, *, now: int | None = None, degraded: bool = True
    ) -> tuple[Decision, int]:
        """Takes as many whole tokens as the bucket's share holds, up to ``max_units``, as RL.TAKE:
        the decision and the number taken."""
        now = _now(now)
        bucket = Bucket.of(policy, self.instances)
        if bucket is None:
            return _decision(_never(max(1, policy.limit // self.instances)).verdict, 0, degraded), 0
        with self._lock:
            stored = self._state(key, now)
            tat = stored if isinstance(stored, int) else None
            available = bucket.reserve(tat, now, 0).verdict.remaining
            taken = max(min(available, max_units), 1)
            outcome = bucket.reserve(tat, now, taken)
            self._store(key, outcome, now, 1)
        return _decision(outcome.verdict, 0, degraded), taken if outcome.verdict.allowed else 0

    def refund(self, key: str, policy: Policy, units: int, *, now: int | None = None) -> None:
        """Gives ``units`` back to the bucket's share (the kinds that take refunds), as RL.REFUND."""
        now = _now(now)
        bucket = Bucket.of(policy, self.instances)
        if not policy.kind.refunds or bucket is None:
            return
        with self._lock:
            stored = self._state(key, now)
            backlog, _ = bucket.backlog(stored if isinstance(stored, int) else None, now)
            if backlog and units:
                tat = now + max(0, backlog - min(units, bucket.capacity) * bucket.interval)
                self._store(key, Outcome(Verdict(True, 0, 0, 0, 0), tat, tat), now, 0)

    def _decide(
        self, limits: Sequence[Limit], lease_id: str | None, now: int | None, degraded: bool
    ) -> Decision:
        now = _now(now)
        with self._lock:
            outcomes = [
                _decide(policy, self.instances, self._state(key, now), now, cost, lease_id)
                for key, policy, cost in limits
            ]
            if not outcomes:
                return _decision(Verdict(True, 0, 0, 0, 0), 0, degraded)
            limiting = _limiting(outcomes)
            allowed = all(o.verdict.allowed for o in outcomes)
            self._make_room(len(limits), now)
            for (key, _, _), outcome in zip(limits, outcomes):
                if allowed or outcome.repair:
                    self._store(key, outcome, now, 0)
            return _decision(outcomes[limiting].verdict, limiting, degraded)

    def _lease_op(self, key: str, lease_id: str, lease_ns: int | None, now: int | None) -> bool:
        """RL.RENEW (``lease_ns`` given) or RL.RELEASE (None) of ``lease_id``'s lease at ``key``."""
        now = _now(now)
        with self._lock:
            stored = self._state(key, now)
            held = _live(stored if isinstance(stored, dict) else None, now)
            if lease_id not in held:
                return False
            if lease_ns is None:
                del held[lease_id]
            else:
                held[lease_id] = (now + lease_ns, held[lease_id][1])
            last = max((e for e, _ in held.values()), default=now)
            self._store(key, Outcome(Verdict(True, 0, 0, 0, 0), held, last), now, 0)
            return True

    def _state(self, key: str, now: int) -> object | None:
        entry = self._entries.get(key)
        if entry is None or entry[1] <= now:
            return None
        return entry[0]

    def _store(self, key: str, outcome: Outcome, now: int, more: int) -> None:
        if outcome.state is None:
            return
        if outcome.expires_at <= now:
            self._entries.pop(key, None)
            return
        if more:
            self._make_room(more, now)
        self._entries[key] = (outcome.state, outcome.expires_at)

    def _make_room(self, more: int, now: int) -> None:
        if len(self._entries) + more <= MAX_KEYS:
            return
        self._entries = {k: e for k, e in self._entries.items() if e[1] > now}
        if len(self._entries) + more > MAX_KEYS:
            self._entries.clear()


def _now(now: int | None) -> int:
    return time.time_ns() if now is None else now


def _limiting(outcomes: list[Outcome]) -> int:
    """The limit a combined decision describes: the longest denial (never fits first), else the
    fewest left."""
    denied = [i for i, o in enumerate(outcomes) if not o.verdict.allowed]
    if denied:
        never = [i for i in denied if outcomes[i].verdict.retry_after_ns is None]
        if never:
            return never[0]
        return max(denied, key=lambda i: outcomes[i].verdict.retry_after_ns or 0)
    return min(range(len(outcomes)), key=lambda i: outcomes[i].verdict.remaining)


def _secs(ns: int) -> float:
    """Rounded up to whole milliseconds, as the module's replies are."""
    return -(-ns // 1_000_000) / 1000


def _decision(v: Verdict, limiting: int, degraded: bool) -> Decision:
    return Decision(
        allowed=v.allowed,
        limit=v.limit,
        remaining=v.remaining,
        retry_after=None if v.retry_after_ns is None else _secs(v.retry_after_ns),
        reset_after=_secs(v.reset_after_ns),
        limiting=limiting,
        degraded=degraded,
    )
