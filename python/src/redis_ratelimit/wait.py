"""Waiting for capacity, for workers and batch jobs: ``limiter.until_ready(key, policy, cost, max_wait)``
returns the decision once ``cost`` fits (allowed: use it now) or the denial waiting could not get
past. As ``client/src/wait.rs``:

- A token bucket is waited for by reservation (RL.RESERVE): one call takes the tokens from the
  bucket's future and says how long to sleep, so waiters are served in the order they asked. A
  waiter interrupted while it sleeps (a cancelled task, ``asyncio.wait_for``'s timeout, a signal)
  gives its tokens back (RL.REFUND).
- The other kinds cannot reserve: while one denies, the waiter sleeps its ``retry_after`` plus a
  random extra of up to a tenth of it (so waiters denied together do not come back together).
- It returns at once when the request can never fit (``retry_after`` None), when the wait needed is
  longer than ``max_wait``, and when the decision is degraded (an outage is no capacity to wait for).

The logic is one generator of steps (``_steps``) that the sync and async drivers run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable, Generator
from typing import Any, NamedTuple

from .decision import Decision
from .errors import CallError
from .policy import Policy, TokenBucket
from .resilience import Request, decision_of, guarded, guarded_async

__all__ = ["WaitMixin", "AsyncWaitMixin", "jittered", "next_try"]

MIN_SLEEP = 0.001


class _Ask(NamedTuple):
    """One call: a reservation within ``max_wait`` (token buckets), or a check."""

    max_wait: float


class _Sleep(NamedTuple):
    seconds: float
    reserved: bool  # tokens reserved: given back if the sleep is interrupted


def _is_bucket(policy: Policy) -> bool:
    return isinstance(policy, TokenBucket)


def jittered(seconds: float, rand: Callable[[float, float], float] = random.uniform) -> float:
    """``seconds`` plus a random extra of up to a tenth of it (up to 1 ms for short waits)."""
    return seconds + rand(0.0, max(seconds / 10, MIN_SLEEP))


def next_try(retry_after: float, policy: Policy) -> float:
    """How long to sleep after a denial of ``retry_after``: a token bucket can be asked again as soon
    as the wait is within one refill (a reservation's longest); any other limit once its
    ``retry_after`` is over; plus jitter, and at least 1 ms."""
    if _is_bucket(policy):
        retry_after = max(0.0, retry_after - policy.period)  # a full refill
    return max(jittered(retry_after), MIN_SLEEP)


def _steps(
    policy: Policy, max_wait: float, clock: Callable[[], float]
) -> Generator[_Ask | _Sleep, Decision | None, Decision]:
    give_up = clock() + max_wait
    while True:
        left = max(0.0, give_up - clock())
        decision = yield _Ask(left)
        assert decision is not None
        if decision.degraded:
            return decision
        if decision.allowed:
            wait = decision.retry_after or 0.0
            if wait > 0 and _is_bucket(policy):
                yield _Sleep(wait, reserved=True)
                decision = dataclasses.replace(decision, retry_after=0.0)
            return decision
        if decision.retry_after is None or left <= 0 or decision.retry_after > left:
            return decision
        yield _Sleep(min(next_try(decision.retry_after, policy), left), reserved=False)


def _reserve(key: str, policy: Policy, cost: int, max_wait: float) -> Request:
    wait = f"{int(max_wait * 1000) / 1000:.3f}"  # whole ms, rounded down: never past max_wait
    return Request("RL.RESERVE", [key], [*policy.params, cost, wait])


def _degraded(limiter: Any, key: str, policy: Policy, cost: int, error: CallError) -> Decision:
    decision: Decision = limiter.failure.decide([(key, policy, cost)], error)
    return decision


class WaitMixin:
    """``Limiter.until_ready``: inherit it (the limiter provides ``call``, ``check``, ``refund``,
    ``failure``)."""

    def until_ready(self, key: str, policy: Policy, cost: int = 1, max_wait: float = 1.0) -> Decision:
        """Waits (sleeping this thread) until ``cost`` fits under ``policy`` at ``key``, for at most
        ``max_wait`` seconds: see the module's text."""
        limiter: Any = self
        steps = _steps(policy, max_wait, time.monotonic)
        step = next(steps)
        while True:
            result: Decision | None = None
            if isinstance(step, _Ask):
                result = self._ask(key, policy, cost, step.max_wait)
            else:
                try:
                    time.sleep(step.seconds)
                except BaseException:
                    if step.reserved:
                        try:
                            limiter.refund(key, policy, cost)
                        except CallError:
                            pass  # the reservation then simply runs its course
                    raise
            try:
                step = steps.send(result)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _ask(self, key: str, policy: Policy, cost: int, max_wait: float) -> Decision:
        limiter: Any = self
        if not _is_bucket(policy):
            decision: Decision = limiter.check(key, policy, cost)
            return decision
        try:
            return decision_of(guarded(limiter, _reserve(key, policy, cost, max_wait)))
        except CallError as e:
            return _degraded(limiter, key, policy, cost, e)


class AsyncWaitMixin:
    """``AsyncLimiter.until_ready``: inherit it."""

    async def until_ready(
        self, key: str, policy: Policy, cost: int = 1, max_wait: float = 1.0
    ) -> Decision:
        """As ``Limiter.until_ready``; a waiter cancelled while it sleeps on a reservation gives its
        tokens back before the cancellation goes on."""
        limiter: Any = self
        steps = _steps(policy, max_wait, time.monotonic)
        step = next(steps)
        while True:
            result: Decision | None = None
            if isinstance(step, _Ask):
                result = await self._ask(key, policy, cost, step.max_wait)
            else:
                try:
                    await asyncio.sleep(step.seconds)
                except asyncio.CancelledError:
                    if step.reserved:
                        await asyncio.shield(_refund_quietly(limiter, key, policy, cost))
                    raise
            try:
                step = steps.send(result)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def _ask(self, key: str, policy: Policy, cost: int, max_wait: float) -> Decision:
        limiter: Any = self
        if not _is_bucket(policy):
            decision: Decision = await limiter.check(key, policy, cost)
            return decision
        try:
            return decision_of(await guarded_async(limiter, _reserve(key, policy, cost, max_wait)))
        except CallError as e:
            return _degraded(limiter, key, policy, cost, e)


async def _refund_quietly(limiter: Any, key: str, policy: Policy, cost: int) -> None:
    try:
        await limiter.refund(key, policy, cost)
    except CallError:
        pass  # the reservation then simply runs its course
