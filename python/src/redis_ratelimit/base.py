"""What `Limiter` (sync) and `AsyncLimiter` share, without I/O: the settings, the engine, the breaker,
the commands each method sends, how a reply is read, and what the failure policy answers when Redis
does not. The two classes only send (`limiter.py`, `aio.py`)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, Tuple, TypedDict, TypeVar, Union

from redis.crc import key_slot

from . import command
from .breaker import Breaker
from .command import Arg, Limit
from .decision import Decision, Inspection, Taken
from .engine import Backend, Engine
from .errors import (
    BreakerOpenError,
    CallError,
    ConfigurationError,
    DeadlineError,
    ReplyError,
    UnreachableError,
    UsageError,
)
from .failure_policy import FailurePolicy
from .policy import Policy

__all__ = ["LimiterBase", "Plan", "Verified", "VERIFY_KEY", "one_slot"]

log = logging.getLogger("redis_ratelimit")

# The key verify() reads and peeks at (nothing is written): inside docs/deployment.md's `~rl:*`.
VERIFY_KEY = "rl:verify"

#: Seconds a whole call may take, connect included, unless a limiter is given another.
DEFAULT_DEADLINE = 0.1

T = TypeVar("T")
C = TypeVar("C")  # the redis-py client a limiter sends on (sync or asyncio)
BreakerSetting = Union[Breaker, Tuple[int, float], None]


class Verified(TypedDict):
    """What `verify()` found: the engine in use (``module``, ``functions``, ``scripts``) and why."""

    engine: str
    why: str


class LimiterBase(Generic[C]):
    """The settings and the sans-I/O half of a limiter on a redis-py client of type C. ``failure`` is
    required: what a check answers when Redis cannot (``FailurePolicy.open()``, ``.closed()``,
    ``.fallback(instances=N)``). ``backend`` picks the engine (module, FCALL, EVALSHA or the first that
    answers), ``deadline`` bounds a whole call in seconds, connect included, ``breaker`` is a `Breaker`
    or ``(failures, cooldown)``, and ``name`` tells limiters apart in `repr` and the fallback."""

    def __init__(
        self,
        client: C,
        failure: FailurePolicy,
        *,
        backend: Backend = Backend.AUTO,
        deadline: float = DEFAULT_DEADLINE,
        breaker: BreakerSetting = None,
        name: str = "default",
    ) -> None:
        if not isinstance(failure, FailurePolicy):
            raise TypeError("a limiter needs its failure policy: FailurePolicy.open(), .closed() or "
                            f".fallback(instances=N), not {failure!r}")
        if not deadline > 0:
            raise ValueError(f"the deadline must be a number of seconds > 0, not {deadline!r}")
        self.failure = failure
        self.engine = Engine(Backend(backend))
        self.deadline = float(deadline)
        self.breaker = breaker if isinstance(breaker, Breaker) else Breaker(*(breaker or ()))
        self.name = name
        if self.breaker.name is None:
            self.breaker.name = name
        self._misconfigured = False
        # The outage under way: its cause as logged (None: Redis answers), since when, and the failure
        # policy's count of decisions when it began.
        self._cause: str | None = None
        self._cause_since = 0.0
        self._cause_decisions = 0
        self._cause_lock = threading.Lock()
        self.client = client
        self._cluster = False  # on a cluster client: the keys of one call must share a slot
        self._bind(client)

    def _bind(self, client: C) -> None:
        """Sets up the I/O half on the client (its driver, and `_cluster` on a cluster client)."""
        raise NotImplementedError

    @property
    def misconfigured(self) -> bool:
        """True since Redis answered that the limiter cannot work with it as configured (no engine's
        command known: the module not loaded and FCALL/EVALSHA unknown, or refused to this user by its
        ACL: NOPERM), until Redis answers again. The failure policy decides meanwhile (and the ASGI
        middleware's outage answer says ``misconfigured``, not ``unavailable``)."""
        return self._misconfigured

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, failure={self.failure!r}, deadline={self.deadline}, "
                f"engine={self.engine.describe()[0].value}, breaker_open={self.breaker.open})")

    # Before and after a call.

    def _admit(self) -> None:
        if not self.breaker.allow():
            raise BreakerOpenError()

    def _observe(self, error: CallError | None) -> None:
        """Tells the breaker how a call that went to Redis ended: an error reply (a bad argument) is
        Redis answering; no answer counts against it; an answer saying the limiter cannot work here
        (no engine, NOPERM) opens it at once."""
        if isinstance(error, (DeadlineError, UnreachableError)):
            # A failover or a restart may land on another kind of server: the engine is chosen anew.
            self.engine.forget()
            self.breaker.failure(self._outage(error))
        elif isinstance(error, ConfigurationError):
            self._misconfigured = True
            self.breaker.fault(self._outage(error))
        else:
            self._misconfigured = False
            self._answered()
            self.breaker.success()

    def _outage(self, error: CallError) -> str:
        """Logs the cause of an outage (logger ``redis_ratelimit``, a warning naming this limiter) when
        it is not of the kind last logged (a deadline, a connection failure, a configuration fault);
        returns it. Calls turned away by the open breaker change no
        cause: its probes do."""
        cause = f"{type(error).__name__}: {error}"
        with self._cause_lock:
            # A cause is its kind: connections refused, then reset, then refused again are one outage.
            if self._cause is not None and self._cause.split(":", 1)[0] == type(error).__name__:
                return cause
            first = self._cause is None
            self._cause = cause
            if first:
                self._cause_since = time.monotonic()
                self._cause_decisions = self.failure.decisions
        log.warning("limiter %r: Redis did not decide (%s): the failure policy %r decides meanwhile%s",
                    self.name, cause, self.failure, "" if first else " (the cause changed)",
                    extra={"limiter": self.name, "cause": cause})
        return cause

    def _answered(self) -> None:
        """Logs the end of an outage, once."""
        if self._cause is None:  # the common case, without the lock
            return
        with self._cause_lock:
            if self._cause is None:
                return
            self._cause = None
            took = time.monotonic() - self._cause_since
            degraded = self.failure.decisions - self._cause_decisions
        log.warning("limiter %r: Redis answers again after %.1f s (%d degraded decisions meanwhile)",
                    self.name, took, degraded, extra={"limiter": self.name, "cause": None})

    # What each method sends, how its reply reads, and what it answers when Redis does not (None:
    # the *_strict methods raise). Each raises UsageError when its call cannot be built.

    def _check_all(self, limits: Sequence[Limit], strict: bool) -> Plan[Decision]:
        limits = [(key, policy, cost) for key, policy, cost in limits]
        if self._cluster:
            one_slot([key for key, _, _ in limits])
        degrade = None if strict else (lambda e: self.failure.decide(limits, e))
        return Plan(command.decide(limits), Decision.from_reply, degrade)

    def _take(self, key: str, policy: Policy, most: int, strict: bool) -> Plan[Taken]:
        def degrade(error: CallError) -> Taken:
            decision, taken = self.failure.take(key, policy, most, error)
            return Taken(decision, taken)

        return Plan(command.take(key, policy, most), Taken.from_reply, None if strict else degrade)

    def _refund(self, key: str, policy: Policy, units: int) -> Plan[Decision]:
        return Plan(command.refund(key, policy, units), Decision.from_reply, None)

    def _peek(self, key: str, policy: Policy | None) -> Plan[Inspection]:
        return Plan(command.inspect(key, policy), Inspection.from_reply, None)

    # verify(): RL.INSPECT (read-only, on a key that need not exist), then RL.TOKEN with cost 0 (a
    # peek: writes nothing); under AUTO these calls choose the engine.
    VERIFY_INSPECT: list[Arg] = command.inspect(VERIFY_KEY, None)
    VERIFY_PEEK: list[Arg] = ["RL.TOKEN", VERIFY_KEY, 1, 1, 0]

    def _verified(self, inspected: Any, peeked: Any) -> Verified:
        if inspected is not None and not isinstance(inspected, (list, dict)):
            raise ReplyError(f"RL.INSPECT answered {inspected!r}, not what the ratelimit module answers")
        Decision.from_reply(peeked)
        engine, why = self.engine.describe()
        return Verified(engine=engine.value, why=why)


@dataclass(frozen=True)
class Plan(Generic[T]):
    """One method's call: the command, how its reply reads, and the failure policy's answer."""

    cmd: list[Arg]
    parse: Callable[[Any], T]
    degrade: Callable[[CallError], T] | None


def one_slot(keys: Sequence[Any]) -> None:
    """Raises UsageError unless `keys` map to one cluster slot: one call's keys must (Redis Cluster
    answers CROSSSLOT otherwise, which no failure policy should turn into a decision). A hash tag puts
    keys in one slot: ``rl:{user:42}:login`` and ``rl:{user:42}:api``."""
    slots = {key_slot(k if isinstance(k, bytes) else str(k).encode()) for k in keys}
    if len(slots) > 1:
        raise UsageError(f"the keys of one call map to {len(slots)} different cluster slots: {list(keys)!r}; "
                         "give them one hash tag (rl:{user:42}:login, rl:{user:42}:api)")
