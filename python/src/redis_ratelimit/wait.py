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

The logic is one generator of steps (``_steps``) that the sync and async drivers run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, NamedTuple

from . import command
from .command import Limit
from .decision import Decision
from .errors import CallError, UsageError
from .policy import Policy, TokenBucket
from .resilience import Request, decision_of, guarded, guarded_async

__all__ = ["WaitMixin", "AsyncWaitMixin", "jittered", "next_try"]

MIN_SLEEP = 0.001


class _Ask(NamedTuple):
    """One call: reservations within ``max_wait`` (token buckets), the others deciding now."""

    max_wait: float


class _Sleep(NamedTuple):
    seconds: float
    reserved: bool  # taken already: given back if the sleep is interrupted


def jittered(seconds: float, rand: Callable[[float, float], float] = random.uniform) -> float:
    """``seconds`` plus a random extra of up to a tenth of it (up to 1 ms for short waits)."""
    return seconds + rand(0.0, max(seconds / 10, MIN_SLEEP))


def next_try(retry_after: float, policy: Policy) -> float:
    """How long to sleep after a denial of ``retry_after`` by ``policy``: a token bucket can be asked
    again as soon as the wait is within one refill (a reservation's longest); any other limit once
    its ``retry_after`` is over; plus jitter, and at least 1 ms."""
    if isinstance(policy, TokenBucket):
        retry_after = max(0.0, retry_after - policy.period)  # a full refill
    return max(jittered(retry_after), MIN_SLEEP)


def _steps(
    limits: Sequence[Limit], max_wait: float, clock: Callable[[], float]
) -> Generator[_Ask | _Sleep, Decision | None, Decision]:
    give_up = clock() + max_wait
    reserving = any(isinstance(p, TokenBucket) for _, p, _ in limits)
    while True:
        left = max(0.0, give_up - clock())
        decision = yield _Ask(left)
        assert decision is not None
        if decision.degraded:
            return decision
        if decision.allowed:
            if reserving and (decision.retry_after or 0.0) > 0:
                yield _Sleep(decision.retry_after or 0.0, reserved=True)
                decision = dataclasses.replace(decision, retry_after=0.0)
            return decision
        if decision.retry_after is None or left <= 0 or decision.retry_after > left:
            return decision
        limiting = limits[min(decision.limiting, len(limits) - 1)][1]
        yield _Sleep(min(next_try(decision.retry_after, limiting), left), reserved=False)


def _reserve(limits: Sequence[Limit], max_wait: float) -> Request | None:
    """The call reserving the token buckets among ``limits`` within ``max_wait`` while the others
    decide now; None when none reserves (then it is ``check_all``)."""
    if not any(isinstance(p, TokenBucket) for _, p, _ in limits):
        return None
    wait = f"{int(max_wait * 1000) / 1000:.3f}"  # whole ms, rounded down: never past max_wait
    if len(limits) == 1:
        key, policy, cost = limits[0]
        return Request("RL.RESERVE", [key], [*policy.params, cost, wait])
    cmd: list[Any] = ["RL.ALL"]
    for key, policy, cost in limits:
        if isinstance(policy, TokenBucket):
            cmd += [key, "RESERVE", *policy.params, cost, wait]
        else:  # its own command's arguments, as a group
            cmd += [key, policy.KIND.group, *command.decide([(key, policy, cost)])[2:]]
    return Request.of(cmd)


def _refundable(limits: Sequence[Limit]) -> list[Limit]:
    """What an allowed call took that can be given back."""
    return [(k, p, c) for k, p, c in limits if c > 0 and p.KIND.refunds]


def _limits(limits: Sequence[Limit]) -> list[Limit]:
    if not limits:
        raise UsageError("no limits to wait for")
    return [(str(k), p, c) for k, p, c in limits]


class WaitMixin:
    """``Limiter.until_ready`` and ``until_ready_all``: inherit them (they use the limiter's ``call``,
    ``check_all``, ``refund`` and ``failure``)."""

    def until_ready(self, key: str, policy: Policy, cost: int = 1, max_wait: float = 1.0) -> Decision:
        """Waits (sleeping this thread) until ``cost`` fits under ``policy`` at ``key``, for at most
        ``max_wait`` seconds: see the module's text."""
        return self.until_ready_all([(key, policy, cost)], max_wait)

    def until_ready_all(self, limits: Sequence[Limit], max_wait: float = 1.0) -> Decision:
        """``until_ready`` for several limits ``(key, policy, cost)`` checked together, as
        ``check_all`` does, in one call each time."""
        limits = _limits(limits)
        steps = _steps(limits, max_wait, time.monotonic)
        step = next(steps)
        while True:
            result: Decision | None = None
            if isinstance(step, _Ask):
                result = self._ask(limits, step.max_wait)
            else:
                try:
                    time.sleep(step.seconds)
                except BaseException:
                    if step.reserved:
                        self._give_back(limits)
                    raise
            try:
                step = steps.send(result)
            except StopIteration as done:
                decision: Decision = done.value
                return decision

    def _ask(self, limits: list[Limit], max_wait: float) -> Decision:
        limiter: Any = self
        request = _reserve(limits, max_wait)
        if request is None:
            checked: Decision = limiter.check_all(limits)
            return checked
        try:
            return decision_of(guarded(limiter, request))
        except CallError as e:
            degraded: Decision = limiter.failure.decide(limits, e)
            return degraded

    def _give_back(self, limits: list[Limit]) -> None:
        limiter: Any = self
        for key, policy, cost in _refundable(limits):
            try:
                limiter.refund(key, policy, cost)
            except CallError:
                pass  # the reservation then simply runs its course


class AsyncWaitMixin:
    """``AsyncLimiter.until_ready`` and ``until_ready_all``: inherit them."""

    async def until_ready(
        self, key: str, policy: Policy, cost: int = 1, max_wait: float = 1.0
    ) -> Decision:
        """As ``Limiter.until_ready``."""
        return await self.until_ready_all([(key, policy, cost)], max_wait)

    async def until_ready_all(self, limits: Sequence[Limit], max_wait: float = 1.0) -> Decision:
        """As ``Limiter.until_ready_all``; a waiter cancelled while it sleeps on a reservation, or
        while its reservation is on the way, gives it back before the cancellation goes on."""
        limits = _limits(limits)
        steps = _steps(limits, max_wait, time.monotonic)
        step = next(steps)
        while True:
            result: Decision | None = None
            if isinstance(step, _Ask):
                result = await self._ask(limits, step.max_wait)
            else:
                try:
                    await asyncio.sleep(step.seconds)
                except asyncio.CancelledError:
                    if step.reserved:
                        await asyncio.shield(self._give_back(limits))
                    raise
            try:
                step = steps.send(result)
            except StopIteration as done:
                decision: Decision = done.value
                return decision

    async def _ask(self, limits: list[Limit], max_wait: float) -> Decision:
        limiter: Any = self
        request = _reserve(limits, max_wait)
        if request is None:
            checked: Decision = await limiter.check_all(limits)
            return checked
        call = asyncio.ensure_future(guarded_async(limiter, request))
        try:
            return decision_of(await asyncio.shield(call))
        except CallError as e:
            degraded: Decision = limiter.failure.decide(limits, e)
            return degraded
        except asyncio.CancelledError:
            # Cancelled while the reservation is on the way: once it is answered (within the
            # deadline), what it took goes back.
            await asyncio.shield(self._give_back_once_answered(call, limits))
            raise

    async def _give_back_once_answered(self, call: asyncio.Future[Any], limits: list[Limit]) -> None:
        try:
            allowed = decision_of(await call).allowed
        except CallError:
            return
        if allowed:
            await self._give_back(limits)

    async def _give_back(self, limits: list[Limit]) -> None:
        limiter: Any = self
        for key, policy, cost in _refundable(limits):
            try:
                await limiter.refund(key, policy, cost)
            except CallError:
                pass  # the reservation then simply runs its course
