"""Waiting for capacity, for workers and batch jobs: ``limiter.until_ready(key, policy, cost, max_wait)``
returns the decision once ``cost`` fits (allowed: use it now) or the denial waiting could not get
past; ``until_ready_all(limits, max_wait)`` does so for several limits checked together. As
``client/src/wait.rs``:

- Token buckets are waited for by reservation (RL.RESERVE, or RESERVE groups of RL.ALL): one call
  takes the tokens from the bucket's future and says how long to sleep, so waiters are served in the
  order they asked. A waiter interrupted while it sleeps (a cancelled task, ``asyncio.wait_for``'s
  timeout, a signal) gives back what it took (RL.REFUND); a cancelled task does so also when the
  cancellation comes while its reservation is on the way.
- The other kinds cannot reserve (they decide now): while one denies, the waiter sleeps its
  ``retry_after`` plus a random extra of up to a tenth of it (so waiters denied together do not come
  back together) and asks again.
- It returns at once when the request can never fit (``retry_after`` None), when the wait needed is
  longer than ``max_wait``, and when the decision is degraded (an outage is no capacity to wait for).

``take_within(key, bucket, min, max, max_wait)`` is a worker's batch: it waits for at least ``min``
tokens and takes as many more as the bucket holds, up to ``max``, in one reservation
(RL.RESERVE ... UPTO max), with the same turns, sleeps and refunds; ``take_within_strict`` is the
same without the failure policy (CallError when Redis does not decide), as the Rust client's.

The logic is one generator of steps (``wait_steps.steps``) that the sync and async drivers run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .command import Limit
from .decision import Decision, Taken
from .errors import CallError
from .policy import Policy
from .request_steps import Request, decision_of, guarded, guarded_async
from .wait_steps import (NOTHING, Ask, Asked, batch, jittered, limits_of, next_try, refundable, reserve, steps, taken,
                        with_wait)

__all__ = ["WaitMixin", "AsyncWaitMixin", "jittered", "next_try"]


class WaitMixin:
    """``Limiter.until_ready``, ``until_ready_all``, ``take_within`` and ``take_within_strict``: inherit them (they use the
    limiter's ``call``, ``check_all``, ``refund`` and ``failure``)."""

    def until_ready(self, key: str, policy: Policy, cost: int = 1, max_wait: float = 1.0) -> Decision:
        """Waits (sleeping this thread) until ``cost`` fits under ``policy`` at ``key``, for at most
        ``max_wait`` seconds: see the module's text."""
        return self.until_ready_all([(key, policy, cost)], max_wait)

    def until_ready_all(self, limits: Sequence[Limit], max_wait: float = 1.0) -> Decision:
        """``until_ready`` for several limits ``(key, policy, cost)`` checked together, as
        ``check_all`` does, in one call each time."""
        limits = limits_of(limits)
        return self._wait(limits, max_wait, lambda left: self._ask(limits, left)).decision

    def take_within(self, key: str, policy: Policy, min: int, max: int, max_wait: float = 1.0) -> Taken:
        """A batch: at least ``min`` tokens of the token bucket ``policy`` at ``key`` within
        ``max_wait``, and as many more as it holds, up to ``max`` (``taken``: 0 when no batch of
        ``min`` could be had). Under the failure policy as ``take``, without waiting."""
        request = batch(key, policy, min, max, 0)
        limits: list[Limit] = [(key, policy, min)]
        return taken(self._wait(limits, max_wait, lambda left: self._askbatch(request, limits, max, left)))

    def take_within_strict(self, key: str, policy: Policy, min: int, max: int, max_wait: float = 1.0) -> Taken:
        """Like ``take_within`` without the failure policy: Redis' grant, or CallError when Redis
        does not decide. The breaker and the deadline still apply."""
        request = batch(key, policy, min, max, 0)
        limits: list[Limit] = [(key, policy, min)]
        return taken(self._wait(limits, max_wait, lambda left: self._askbatch(request, limits, max, left, True)))

    def _wait(self, limits: list[Limit], max_wait: float, ask: Callable[[float], Asked]) -> Asked:
        walk = steps(limits, max_wait, time.monotonic)
        step = next(walk)
        asked = Asked(NOTHING, [])
        while True:
            result: Decision | None = None
            if isinstance(step, Ask):
                asked = ask(step.max_wait)
                result = asked.decision
            else:
                try:
                    time.sleep(step.seconds)
                except BaseException:
                    if step.reserved:
                        self._give_back(asked.took)
                    raise
            try:
                step = walk.send(result)
            except StopIteration as done:
                return Asked(done.value, asked.took)

    def _ask(self, limits: list[Limit], max_wait: float) -> Asked:
        limiter: Any = self
        request = reserve(limits, max_wait)
        try:
            if request is None:
                decision: Decision = limiter.check_all(limits)
            else:
                decision = decision_of(guarded(limiter, request))
        except CallError as e:
            decision = limiter.failure.decide(limits, e)
        return Asked(decision, refundable(limits) if decision.allowed else [])

    def _askbatch(self, request: Request, limits: list[Limit], most: int, max_wait: float,
                  strict: bool = False) -> Asked:
        limiter: Any = self
        key, policy, _ = limits[0]
        try:
            taken = Taken.from_reply(guarded(limiter, with_wait(request, max_wait)))
        except CallError as e:
            if strict:
                raise
            taken = Taken(*limiter.failure.take(key, policy, most, e))
        return Asked(taken.decision, [(key, policy, taken.taken)] if taken.taken else [])

    def _give_back(self, took: list[Limit]) -> None:
        limiter: Any = self
        for key, policy, units in took:
            try:
                limiter.refund(key, policy, units)
            except CallError:
                pass  # the reservation then simply runs its course


class AsyncWaitMixin:
    """``AsyncLimiter.until_ready``, ``until_ready_all``, ``take_within`` and ``take_within_strict``:
    inherit them."""

    async def until_ready(
        self, key: str, policy: Policy, cost: int = 1, max_wait: float = 1.0
    ) -> Decision:
        """As ``Limiter.until_ready``."""
        return await self.until_ready_all([(key, policy, cost)], max_wait)

    async def until_ready_all(self, limits: Sequence[Limit], max_wait: float = 1.0) -> Decision:
        """As ``Limiter.until_ready_all``; a waiter cancelled while it sleeps on a reservation, or
        while its reservation is on the way, gives it back before the cancellation goes on."""
        limits = limits_of(limits)
        return (await self._wait(limits, max_wait, lambda left: self._ask(limits, left))).decision

    async def take_within(
        self, key: str, policy: Policy, min: int, max: int, max_wait: float = 1.0
    ) -> Taken:
        """As ``Limiter.take_within``."""
        request = batch(key, policy, min, max, 0)
        limits: list[Limit] = [(key, policy, min)]
        asked = await self._wait(limits, max_wait, lambda left: self._askbatch(request, limits, max, left))
        return taken(asked)

    async def take_within_strict(
        self, key: str, policy: Policy, min: int, max: int, max_wait: float = 1.0
    ) -> Taken:
        """As ``Limiter.take_within_strict``."""
        request = batch(key, policy, min, max, 0)
        limits: list[Limit] = [(key, policy, min)]
        asked = await self._wait(limits, max_wait, lambda left: self._askbatch(request, limits, max, left, True))
        return taken(asked)

    async def _wait(
        self, limits: list[Limit], max_wait: float, ask: Callable[[float], Awaitable[Asked]]
    ) -> Asked:
        walk = steps(limits, max_wait, time.monotonic)
        step = next(walk)
        asked = Asked(NOTHING, [])
        while True:
            result: Decision | None = None
            if isinstance(step, Ask):
                asked = await ask(step.max_wait)
                result = asked.decision
            else:
                try:
                    await asyncio.sleep(step.seconds)
                except asyncio.CancelledError:
                    if step.reserved:
                        await asyncio.shield(self._give_back(asked.took))
                    raise
            try:
                step = walk.send(result)
            except StopIteration as done:
                return Asked(done.value, asked.took)

    async def _ask(self, limits: list[Limit], max_wait: float) -> Asked:
        limiter: Any = self
        request = reserve(limits, max_wait)
        if request is None:
            decision: Decision = await limiter.check_all(limits)
            return Asked(decision, refundable(limits) if decision.allowed else [])

        def read(reply: Any) -> Asked:
            decision = decision_of(reply)
            return Asked(decision, refundable(limits) if decision.allowed else [])

        try:
            return await self._reserved(request, read)
        except CallError as e:
            return Asked(limiter.failure.decide(limits, e), [])

    async def _askbatch(self, request: Request, limits: list[Limit], most: int, max_wait: float,
                        strict: bool = False) -> Asked:
        limiter: Any = self
        key, policy, _ = limits[0]

        def read(reply: Any) -> Asked:
            taken = Taken.from_reply(reply)
            return Asked(taken.decision, [(key, policy, taken.taken)] if taken.taken else [])

        try:
            return await self._reserved(with_wait(request, max_wait), read)
        except CallError as e:
            if strict:
                raise
            decision, _ = limiter.failure.take(key, policy, most, e)
            return Asked(decision, [])

    async def _reserved(self, request: Request, read: Callable[[Any], Asked]) -> Asked:
        """Sends a reservation; cancelled while it is on the way, gives back what it took once it
        is answered (within the deadline), then lets the cancellation go on."""
        call = asyncio.ensure_future(guarded_async(self, request))
        try:
            return read(await asyncio.shield(call))
        except asyncio.CancelledError:
            await asyncio.shield(self._give_back_once_answered(call, read))
            raise

    async def _give_back_once_answered(self, call: asyncio.Future[Any], read: Callable[[Any], Asked]) -> None:
        try:
            took = read(await call).took
        except CallError:
            return
        await self._give_back(took)

    async def _give_back(self, took: list[Limit]) -> None:
        limiter: Any = self
        for key, policy, units in took:
            try:
                await limiter.refund(key, policy, units)
            except CallError:
                pass  # the reservation then simply runs its course


