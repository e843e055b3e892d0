"""`Limiter`: rate limits on a synchronous redis-py client (`redis.Redis`, a Sentinel `master_for`
client, `redis.RedisCluster`). One call per check under a deadline; when Redis cannot decide, the
failure policy does, visibly (``degraded``), behind a circuit breaker. `AsyncLimiter` (aio.py) is the
same on `redis.asyncio`; both are `LimiterBase` (base.py) plus their I/O."""

from __future__ import annotations

import threading
import time
from typing import Any, Sequence, TypeVar

from redis.cluster import RedisCluster

from .base import LimiterBase, Plan, Verified
from .command import Arg, Limit
from .decision import Decision, Inspection, Taken
from .drivers import SyncClient, SyncDriver
from .engine import module_command
from .errors import CallError
from .hold import HoldMixin
from .permit import AcquireMixin
from .policy import Policy
from .volume import Ahead, Wait, Woken
from .wait import WaitMixin

__all__ = ["Limiter"]

T = TypeVar("T")


class Limiter(HoldMixin, AcquireMixin, WaitMixin, LimiterBase[SyncClient]):
    """``Limiter(redis.Redis(...), FailurePolicy.open(), *, backend=Backend.AUTO, deadline=0.1,
    breaker=None, name="default")``; `LimiterBase` says what each setting does."""

    def _bind(self, client: SyncClient) -> None:
        self._cluster = isinstance(client, RedisCluster)
        self._driver = SyncDriver(client)

    def check(self, key: str, policy: Policy, cost: int = 1) -> Decision:
        """One limit: Redis' decision, or the failure policy's (``degraded``), or a local one (the
        pre-check, batched units: ``local``). Never raises CallError."""
        return self._decide(self._check_all([(key, policy, cost)], strict=False))

    def check_all(self, limits: Sequence[Limit]) -> Decision:
        """Several limits ``(key, policy, cost)`` of any kinds in one atomic call (RL.TOKEN when all
        are token buckets, RL.ALL otherwise): allowed only when every one allows, and then it takes from
        all; a denial takes from none. ``limiting`` says which limit the decision describes."""
        return self._decide(self._check_all(limits, strict=False))

    def check_strict(self, key: str, policy: Policy, cost: int = 1) -> Decision:
        """Like `check` without the failure policy: raises CallError when Redis does not decide.
        Always one call (no pre-check, no batched units)."""
        return self._run(self._check_all([(key, policy, cost)], strict=True))

    def check_all_strict(self, limits: Sequence[Limit]) -> Decision:
        return self._run(self._check_all(limits, strict=True))

    def take(self, key: str, policy: Policy, max: int) -> Taken:
        """As many whole tokens as the token bucket holds now, up to `max` (RL.TAKE), or the failure
        policy's grant (open: all, closed: none, fallback: the in-process share)."""
        return self._run(self._take(key, policy, max, strict=False))

    def take_strict(self, key: str, policy: Policy, max: int) -> Taken:
        return self._run(self._take(key, policy, max, strict=True))

    def refund(self, key: str, policy: Policy, units: int) -> Decision:
        """Gives `units` back (RL.REFUND; token buckets, fixed windows, sliding counters); the state
        after it. Raises CallError."""
        return self._run(self._refund(key, policy, units))

    def peek(self, key: str, policy: Policy | None = None) -> Inspection:
        """What `key` holds, read-only (RL.INSPECT); with its policy, what a request would meet now.
        Raises CallError."""
        return self._run(self._peek(key, policy))

    def call(self, command: str, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """The raw engine call (``call("RL.FIXED", [key], [limit, window, cost])``): the module's
        reply, through the engine in use, NOSCRIPT handled; the breaker and the deadline apply, the
        failure policy does not. Raises CallError."""
        return self._send(module_command(command, keys, args))

    def verify(self) -> Verified:
        """The start-up check: the engine answers RL.INSPECT and a peek of RL.TOKEN for this user;
        which engine it is and why. Raises CallError (ConfigurationError: no engine works here)."""
        return self._verified(self._send(self.VERIFY_INSPECT), self._send(self.VERIFY_PEEK))

    def close(self) -> int:
        """Gives every unit held back to Redis (batched policies; those of a window that is over are
        gone): the units given back. Every refund is tried; the first that failed is raised after
        (its units are lost). The client stays open: it is the caller's."""
        given: list[list[Arg] | CallError] = []
        for refund in self.volume.release_all(self.clock()):
            try:
                self._send(refund)
                given.append(refund)
            except CallError as error:
                given.append(error)
        return self._closed(given)

    def _decide(self, plan: Plan[Decision]) -> Decision:
        steps = self._local_steps(plan)
        if steps is None:
            return self._run(plan)
        try:
            send = next(steps)
            waited_until = 0.0  # the end of this check's waits for calls bringing units (its deadline)
            while True:
                if isinstance(send, Wait):  # for a call bringing units for this key
                    waited_until = waited_until or time.monotonic() + self.deadline
                    woken = threading.Event()
                    if send.subscribe(woken.set):
                        woken.wait(max(0.0, waited_until - time.monotonic()))
                    send = steps.send(Woken(self.clock(), time.monotonic() < waited_until))
                    continue
                if isinstance(send, Ahead):  # no background here: right after the decision
                    self._take_ahead(send)
                    send = steps.send(None)
                    continue
                try:
                    reply = self._send(send.cmd)
                except CallError:
                    if send.required:
                        raise
                    reply = None  # a refund lost: its units with it
                send = steps.send(reply)
        except StopIteration as done:
            return self._counted(done.value)
        except CallError as error:
            if plan.degrade is None:
                raise
            return plan.degrade(error)
        finally:
            steps.close()

    def _take_ahead(self, ahead: Ahead) -> None:
        """Sends a batch taken ahead; its units are held when it lands (lost if it fails)."""
        try:
            reply = self._send(ahead.cmd)
        except CallError:
            reply = None
        ahead.landed(reply)

    def _run(self, plan: Plan[T]) -> T:
        try:
            return plan.parse(self._send(plan.cmd))
        except CallError as error:
            if plan.degrade is None:
                raise
            return plan.degrade(error)

    def _send(self, cmd: Sequence[Arg]) -> Any:
        self._admit()
        try:
            reply = self._driver.run(self.engine.run(cmd), self.deadline)
        except CallError as error:
            raise self._failed(error, cmd) from None
        self._observe(None, cmd)
        return reply
