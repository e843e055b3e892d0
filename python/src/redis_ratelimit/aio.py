"""`AsyncLimiter`: `Limiter` (limiter.py) on `redis.asyncio` (`Redis`, a Sentinel `master_for` client,
`RedisCluster`): the same methods, awaited; the whole call, connect included, within the deadline."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Sequence, TypeVar

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from .base import LimiterBase, Plan, Verified
from .command import Arg, Limit
from .decision import Decision, Inspection, Taken
from .drivers import AsyncClient, AsyncDriver
from .engine import module_command
from .errors import CallError
from .hold import AsyncHoldMixin
from .permit import AsyncAcquireMixin
from .policy import Policy
from .volume import Ahead, Wait, Woken
from .wait import AsyncWaitMixin

__all__ = ["AsyncLimiter"]

T = TypeVar("T")


class AsyncLimiter(AsyncHoldMixin, AsyncAcquireMixin, AsyncWaitMixin, LimiterBase[AsyncClient]):
    """``AsyncLimiter(redis.asyncio.Redis(...), FailurePolicy.open(), ...)``: `Limiter`'s settings and
    methods, awaited."""

    def _bind(self, client: AsyncClient) -> None:
        self._cluster = isinstance(client, AsyncRedisCluster)
        self._driver = AsyncDriver(client)
        self._aheads: set[asyncio.Future[None]] = set()  # batches taken ahead, in flight

    async def check(self, key: str, policy: Policy, cost: int = 1) -> Decision:
        return await self._decide(self._check_all([(key, policy, cost)], strict=False))

    async def check_all(self, limits: Sequence[Limit]) -> Decision:
        return await self._decide(self._check_all(limits, strict=False))

    async def check_strict(self, key: str, policy: Policy, cost: int = 1) -> Decision:
        return await self._run(self._check_all([(key, policy, cost)], strict=True))

    async def check_all_strict(self, limits: Sequence[Limit]) -> Decision:
        return await self._run(self._check_all(limits, strict=True))

    async def take(self, key: str, policy: Policy, max: int) -> Taken:
        return await self._run(self._take(key, policy, max, strict=False))

    async def take_strict(self, key: str, policy: Policy, max: int) -> Taken:
        return await self._run(self._take(key, policy, max, strict=True))

    async def refund(self, key: str, policy: Policy, units: int) -> Decision:
        return await self._run(self._refund(key, policy, units))

    async def peek(self, key: str, policy: Policy | None = None) -> Inspection:
        return await self._run(self._peek(key, policy))

    async def call(self, command: str, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        return await self._send(module_command(command, keys, args))

    async def verify(self) -> Verified:
        inspected = await self._send(self.VERIFY_INSPECT)
        return self._verified(inspected, await self._send(self.VERIFY_PEEK))

    async def aclose(self) -> int:
        """`Limiter.close`: every unit held given back (after the batches taken ahead landed); the
        units given back."""
        await asyncio.gather(*self._aheads, return_exceptions=True)
        given: list[list[Arg] | CallError] = []
        for refund in self.volume.release_all(self.clock()):
            try:
                await self._send(refund)
                given.append(refund)
            except CallError as error:
                given.append(error)
        return self._closed(given)

    async def _decide(self, plan: Plan[Decision]) -> Decision:
        steps = self._local_steps(plan)
        if steps is None:
            return await self._run(plan)
        try:
            send = next(steps)
            waited_until = 0.0  # the end of this check's waits for calls bringing units (its deadline)
            while True:
                if isinstance(send, Wait):  # for a call bringing units for this key
                    waited_until = waited_until or time.monotonic() + self.deadline
                    woken = asyncio.Event()
                    if send.subscribe(woken.set):
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(woken.wait(), max(0.0, waited_until - time.monotonic()))
                    send = steps.send(Woken(self.clock(), time.monotonic() < waited_until))
                    continue
                if isinstance(send, Ahead):  # off the caller's path
                    task = asyncio.ensure_future(self._take_ahead(send))
                    self._aheads.add(task)
                    task.add_done_callback(self._aheads.discard)
                    send = steps.send(None)
                    continue
                try:
                    reply = await self._send(send.cmd)
                except CallError:
                    if send.required:
                        raise
                    reply = None
                send = steps.send(reply)
        except StopIteration as done:
            return self._counted(done.value)
        except CallError as error:
            if plan.degrade is None:
                raise
            return plan.degrade(error)
        finally:
            steps.close()

    async def _take_ahead(self, ahead: Ahead) -> None:
        """Sends a batch taken ahead; its units are held when it lands (lost if it fails)."""
        reply = None
        try:
            reply = await self._send(ahead.cmd)
        except CallError:
            pass
        finally:
            ahead.landed(reply)

    async def _run(self, plan: Plan[T]) -> T:
        try:
            return plan.parse(await self._send(plan.cmd))
        except CallError as error:
            if plan.degrade is None:
                raise
            return plan.degrade(error)

    async def _send(self, cmd: Sequence[Arg]) -> Any:
        self._admit()
        try:
            reply = await self._driver.run(self.engine.run(cmd), self.deadline)
        except CallError as error:
            raise self._failed(error, cmd) from None
        self._observe(None, cmd)
        return reply
