"""The local fallback: while Redis cannot decide, each application instance limits on its own with
the same algorithms and its share of the limit (``limit / instances``, at least 1; a token bucket's
rate is shared too). Imprecise by design: a rough bound that stays available. As
``client/src/fallback.rs``.

The sliding log, which keeps every request, is approximated by the sliding counter (constant memory
per key). Memory is bounded: past ``MAX_KEYS`` keys, state that has expired is dropped first, then
everything (a fresh start errs towards allowing, as failing open does).

Thread-safe (one lock, held for one decision); time is a parameter (``now`` in ns since the epoch) so
the algorithms are tested with explicit times.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from .command import Limit
from .contract import CONTRACT
from .decision import Decision
from .local_kinds import Outcome, Params, Verdict, decide, lease_op, refund, take
from .policy import Policy

__all__ = ["LocalLimiter", "MAX_KEYS"]

#: The most keys kept (the contract's `fallback.max_keys`): past it, expired state goes first, then everything.
MAX_KEYS: int = CONTRACT["fallback"]["max_keys"]



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
        """Takes as many whole tokens as the token bucket's share holds, up to ``max_units``, as
        RL.TAKE: the decision and the number taken. Other kinds: a denial that never fits."""
        now = _now(now)
        params = Params.of(policy, self.instances)
        with self._lock:
            outcome, taken = take(params, self._state(key, now), now, max_units)
            self._store(key, outcome, now, 1)
        return _decision(outcome.verdict, 0, degraded), taken

    def refund(self, key: str, policy: Policy, units: int, *, now: int | None = None) -> None:
        """Gives ``units`` back (token buckets and windows), as RL.REFUND."""
        now = _now(now)
        params = Params.of(policy, self.instances)
        with self._lock:
            outcome = refund(params, self._state(key, now), now, units)
            if outcome is not None:
                self._store(key, outcome, now, 0)

    def _decide(
        self, limits: Sequence[Limit], lease_id: str | None, now: int | None, degraded: bool
    ) -> Decision:
        now = _now(now)
        with self._lock:
            outcomes = [
                decide(Params.of(policy, self.instances), self._state(key, now), now, cost, lease_id)
                for key, policy, cost in limits
            ]
            if not outcomes:
                return _decision(Verdict(True, 0, 0, 0, 0), 0, degraded)
            limiting = _limiting(outcomes)
            if all(o.verdict.allowed for o in outcomes):
                self._make_room(len(limits), now)
                for (key, _, _), outcome in zip(limits, outcomes):
                    self._store(key, outcome, now, 0)
            return _decision(outcomes[limiting].verdict, limiting, degraded)

    def _lease_op(self, key: str, lease_id: str, lease_ns: int | None, now: int | None) -> bool:
        now = _now(now)
        with self._lock:
            done, outcome = lease_op(self._state(key, now), now, lease_id, lease_ns)
            if outcome is not None:
                self._store(key, outcome, now, 0)
            return done

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
