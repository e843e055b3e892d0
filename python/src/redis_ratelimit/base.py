"""What `Limiter` (sync) and `AsyncLimiter` share, without I/O: the settings, the engine, the breaker,
the commands each method sends, how a reply is read, and what the failure policy answers when Redis
does not. The two classes only send (`limiter.py`, `aio.py`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, Tuple, TypedDict, TypeVar, Union

from redis.crc import key_slot

from . import command
from .breaker import Breaker
from .command import Arg, Limit
from .decision import Decision, Inspection, Taken
from .answers import Answers, Counts
from .contract import CALLS, ERRORS, key_positions
from .contract import command as contract_command
from .engine import Backend, Engine
from .errors import BreakerOpenError, CallError, ReplyError, UsageError
from .reply_class import ReplyClass, behaviour
from .failure_policy import FailurePolicy
from .policy import Policy, TokenBucket
from .volume import Steps, Volume

__all__ = ["LimiterBase", "Plan", "Verified", "VERIFY_KEY", "one_slot"]

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
    or ``(failures, cooldown)``, and ``name`` tells limiters apart in `repr` and the fallback.
    ``local_precheck`` (off by default) keeps a check Redis denied denied in this process until the
    ``retry_after`` Redis gave, without a round trip (docs/high-volume.md); a policy's ``batch`` takes
    units for this process to spend locally, given back by ``close()``."""

    def __init__(
        self,
        client: C,
        failure: FailurePolicy,
        *,
        backend: Backend = Backend.AUTO,
        deadline: float = DEFAULT_DEADLINE,
        breaker: BreakerSetting = None,
        name: str = "default",
        local_precheck: bool = False,
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
        #: What it said and counted of the answers that were not decisions (`answers.py`).
        self.answers = Answers(name, failure)
        #: The pre-check and the batched units (`volume.py`), on the clock `clock` (monotonic ns).
        self.volume = Volume(precheck=bool(local_precheck))
        self.clock: Callable[[], int] = time.monotonic_ns
        self.client = client
        self._cluster = False  # on a cluster client: the keys of one call must share a slot
        self._bind(client)

    def _bind(self, client: C) -> None:
        """Sets up the I/O half on the client (its driver, and `_cluster` on a cluster client)."""
        raise NotImplementedError

    @property
    def misconfigured(self) -> bool:
        """True since Redis answered that the limiter cannot work with it as configured (no engine's
        command known: the module not loaded and FCALL/EVALSHA unknown; refused to this user by its
        ACL: NOPERM; a reply no rule knows), until Redis decides again. The failure policy decides
        meanwhile (and the web layers' outage answer says ``misconfigured``, not ``unavailable``)."""
        return self.answers.misconfigured

    @property
    def counts(self) -> Counts:
        """Counts of the answers that were not decisions: ``outage`` (outages started),
        ``misconfigured``, ``conflicts``, ``usage_errors`` (docs/errors.md); and ``local``, the
        decisions made without a round trip (docs/high-volume.md)."""
        return self.answers.counts

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, failure={self.failure!r}, deadline={self.deadline}, "
                f"engine={self.engine.state}, breaker_open={self.breaker.open})")

    # Before and after a call.

    def _admit(self) -> None:
        if not self.breaker.allow():
            raise BreakerOpenError()

    def _observe(self, error: CallError | None, cmd: Sequence[Arg] = ()) -> None:
        """Tells the logs, the counters and the breaker how a call that went to Redis ended (`cmd`:
        its command), by the class of its answer, as the contract's behaviour for it says (its
        ``log``, ``counter`` and ``breaker``)."""
        if error is None:
            self.answers.decided()
            self.breaker.success()
            return
        cls = error.reply_class
        how = behaviour(cls)
        cause: str | None = None
        if how.log == "outage":
            # A failover or a restart may land on another kind of server: the engine is chosen anew.
            engine = str(self.engine)
            self.engine.no_answer()
            cause = self.answers.outage(error, engine)
        else:
            self.answers.answered()
            if how.log == "once_per_cause":
                self.answers.fault(error, _name(cmd))
            elif how.log == "once_per_key":
                self.answers.conflict(keys_of(cmd), error)
        if how.counter != "outage":  # an outage is counted once, when it starts
            self.answers.count(how.counter)
        if how.breaker == "failure":
            self.breaker.failure(cause)
        elif how.breaker == "answered":  # as a decision: the failures in a row end, a probe closes it
            self.breaker.success()

    def _failed(self, error: CallError, cmd: Sequence[Arg]) -> BaseException:
        """Observes a call that ended in `error`; what it raises: `error`, or the UsageError its class
        raises to the caller."""
        self._observe(error, cmd)
        if behaviour(error.reply_class).decision == "raise":
            usage = UsageError.of_reply(getattr(error, "reply", str(error)))
            usage.__cause__ = error
            return usage
        return error

    def _refused(self, error: UsageError) -> UsageError:
        """Counts a call refused before sending as the caller's mistake; returns it, to raise."""
        self.answers.count(behaviour(ReplyClass.USAGE).counter)
        return error

    # What each method sends, how its reply reads, and what it answers when Redis does not (None:
    # the *_strict methods raise). Each raises UsageError when its call cannot be built.

    def _check_all(self, limits: Sequence[Limit], strict: bool) -> Plan[Decision]:
        try:
            limits = [(key, policy, cost) for key, policy, cost in limits]
            if self._cluster:
                one_slot([key for key, _, _ in limits])
            cmd = command.decide(limits)
        except UsageError as e:
            raise self._refused(e) from None
        degrade = None if strict else (lambda e: self.failure.decide(limits, e))
        return Plan(cmd, Decision.from_reply, degrade, limits)

    def _local_steps(self, plan: Plan[Decision]) -> Steps | None:
        """The steps of a check that may be decided here (the pre-check on, or a batched limit); None:
        one plain call."""
        if not self.volume.applies(plan.limits):
            return None
        return self.volume.check(plan.limits, self.clock())

    @staticmethod
    def _closed(given: list[list[Arg] | CallError]) -> int:
        """The units the refunds of `close()` gave back (each its command or its error); raises the
        first error."""
        for refund in given:
            if isinstance(refund, CallError):
                raise refund
        return sum(int(refund[-1]) for refund in given if not isinstance(refund, CallError))

    def _counted(self, decision: Decision) -> Decision:
        if decision.local:
            self.answers.count("local")
        return decision

    def _take(self, key: str, policy: Policy, most: int, strict: bool) -> Plan[Taken]:
        def degrade(error: CallError) -> Taken:
            decision, taken = self.failure.take(key, policy, most, error)
            return Taken(decision, taken)

        try:
            cmd = command.take(key, policy, most)
        except UsageError as e:
            raise self._refused(e) from None
        return Plan(cmd, Taken.from_reply, None if strict else degrade)

    def _refund(self, key: str, policy: Policy, units: int) -> Plan[Decision]:
        try:
            return Plan(command.refund(key, policy, units), Decision.from_reply, None)
        except UsageError as e:
            raise self._refused(e) from None

    def _peek(self, key: str, policy: Policy | None) -> Plan[Inspection]:
        try:
            return Plan(command.inspect(key, policy), Inspection.from_reply, None)
        except UsageError as e:
            raise self._refused(e) from None

    # verify(): RL.INSPECT (read-only, on a key that need not exist), then RL.TOKEN with cost 0 (a
    # peek: writes nothing); under AUTO these calls choose the engine.
    VERIFY_INSPECT: list[Arg] = command.inspect(VERIFY_KEY, None)
    VERIFY_PEEK: list[Arg] = [TokenBucket.KIND.command, VERIFY_KEY, 1, 1, 0]

    def _verified(self, inspected: Any, peeked: Any) -> Verified:
        if inspected is not None and not isinstance(inspected, (list, dict)):
            raise ReplyError(f"{CALLS['inspect'][0]} answered {inspected!r}, not what the ratelimit module answers")
        Decision.from_reply(peeked)
        engine, why = self.engine.describe()
        return Verified(engine=engine.value if engine is not None else self.engine.reports(), why=why)


@dataclass(frozen=True)
class Plan(Generic[T]):
    """One method's call: the command, how its reply reads, and the failure policy's answer."""

    cmd: list[Arg]
    parse: Callable[[Any], T]
    degrade: Callable[[CallError], T] | None
    limits: Sequence[Limit] = ()


def one_slot(keys: Sequence[Any]) -> None:
    """Raises UsageError (CROSSSLOT, the contract's text) unless `keys` map to one cluster slot: one
    call's keys must (Redis Cluster answers CROSSSLOT otherwise, which no failure policy should turn
    into a decision). A hash tag puts keys in one slot: ``rl:{user:42}:login`` and ``rl:{user:42}:api``."""
    slots = {key_slot(k if isinstance(k, bytes) else str(k).encode()) for k in keys}
    if len(slots) > 1:
        raise UsageError.of_reply(ERRORS["render"]["cross_slot"])


def keys_of(cmd: Sequence[Arg]) -> list[str]:
    """The keys a module command names (by the contract's key rule); none for another command."""
    if not cmd or contract_command(_name(cmd)) is None:
        return []
    return [_text(cmd[1 + i]) for i in key_positions(_name(cmd), cmd[1:])]


def _name(cmd: Sequence[Arg]) -> str:
    return _text(cmd[0]).upper() if cmd else ""


def _text(arg: Arg) -> str:
    return arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)
