"""What a limiter does when Redis cannot decide (unreachable, slower than the deadline, breaker open).
There is no default: each limiter states its choice. As ``FailurePolicy`` in ``client/src/limiter.rs``:

- ``FailurePolicy.open()``: allow. The API stays available during an outage, unprotected meanwhile.
- ``FailurePolicy.closed()``: deny (retry after 1 s). What the limiter guards is protected, and a
  Redis outage becomes an API outage.
- ``FailurePolicy.fallback(instances)``: decide in this process at the limit divided by ``instances``
  (the application instances sharing it): one token bucket for every rate limit, leases for concurrency
  limits (``local_fallback.py``): a rough bound that stays available.

Every decision made here is ``degraded=True`` and counted (``decisions``, ``allowed``); the limiter
logs why Redis did not decide, once per change of cause (``LimiterBase._observe``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Literal

from .decision import Decision
from .command import Limit
from .local_fallback import LocalLimiter
from .policy import Policy

__all__ = ["FailurePolicy"]

Kind = Literal["open", "closed", "fallback"]


class FailurePolicy:
    """Build with ``open()``, ``closed()`` or ``fallback(instances)``. A fallback policy holds its
    in-process state: give each limiter its own policy value (two limiters sharing one share its
    budget)."""

    __slots__ = ("kind", "instances", "local", "decisions", "allowed", "_lock")

    def __init__(self, kind: Kind, instances: int = 1) -> None:
        if kind not in ("open", "closed", "fallback"):
            raise ValueError(f"failure policy: unknown kind {kind!r}")
        if instances < 1:
            raise ValueError("failure policy: instances must be at least 1")
        self.kind: Kind = kind
        self.instances = instances
        self.local: LocalLimiter | None = LocalLimiter(instances) if kind == "fallback" else None
        self.decisions = 0
        self.allowed = 0
        self._lock = threading.Lock()

    @staticmethod
    def open() -> FailurePolicy:
        return FailurePolicy("open")

    @staticmethod
    def closed() -> FailurePolicy:
        return FailurePolicy("closed")

    @staticmethod
    def fallback(instances: int) -> FailurePolicy:
        return FailurePolicy("fallback", instances)

    @property
    def holds_leases(self) -> bool:
        """True when a degraded permit holds a lease (of the in-process fallback)."""
        return self.local is not None

    def decide(self, limits: Sequence[Limit], error: BaseException | None) -> Decision:
        """The degraded decision over ``limits`` ((key, policy, cost) each) that Redis did not make
        (``error`` says why): allowed under open, denied (retry after 1 s) under closed, the
        in-process limiter's decision under fallback."""
        if self.local is not None:
            decision = self.local.decide(limits)
        else:
            decision = _fixed(self.kind == "open", limits)
        return self._decided(decision, error)

    def acquire(self, limits: Sequence[Limit], lease_id: str, error: BaseException | None) -> Decision:
        """``decide`` for an acquisition: under fallback the concurrency limits take leases held by
        ``lease_id`` in the in-process limiter (release and renew them there)."""
        if self.local is not None:
            return self._decided(self.local.acquire(limits, lease_id), error)
        return self._decided(_fixed(self.kind == "open", limits), error)

    def take(
        self, key: str, policy: Policy, max_units: int, error: BaseException | None
    ) -> tuple[Decision, int]:
        """A partial grant Redis did not decide: open grants all ``max_units``, closed none, fallback
        as many as the in-process bucket's share holds."""
        if self.local is not None:
            decision, taken = self.local.take(key, policy, max_units)
        else:
            decision = _fixed(self.kind == "open", [(key, policy, max_units)])
            taken = max_units if decision.allowed else 0
        return self._decided(decision, error), taken

    def _decided(self, decision: Decision, error: BaseException | None) -> Decision:
        # The cause (error) is logged by the limiter that met it, once per change of cause.
        with self._lock:
            self.decisions += 1
            self.allowed += decision.allowed
        return decision

    def __repr__(self) -> str:
        if self.kind == "fallback":
            return f"FailurePolicy.fallback(instances={self.instances})"
        return f"FailurePolicy.{self.kind}()"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FailurePolicy):
            return NotImplemented
        return (self.kind, self.instances) == (other.kind, other.instances)

    def __hash__(self) -> int:
        return hash((self.kind, self.instances))


def _fixed(allow: bool, limits: Sequence[Limit]) -> Decision:
    """Open's or closed's decision: the first limit's size, nothing known about its state."""
    limit = limits[0][1].limit if limits else 0
    return Decision(
        allowed=allow,
        limit=limit,
        remaining=limit if allow else 0,
        retry_after=0.0 if allow else 1.0,
        reset_after=0.0,
        limiting=0,
        degraded=True,
    )
