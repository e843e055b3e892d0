"""At most one FUNCTION LOAD per node at a time (the contract's engine machine): calls that find the
library missing while a load to that node is under way wait for it and take its answer, then send their
own FCALL. The drivers' coordination on its own (a load held open until every caller waits), and a cold
stock server under concurrent callers: every decision exact, made by Redis."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis.asyncio as aioredis

from redis_ratelimit import AsyncLimiter, FailurePolicy, Limiter, TokenBucket
from redis_ratelimit.drivers import AsyncDriver, _SyncLoads
from redis_ratelimit.engine import Send
from servers import HOST, LONG_DEADLINE, Server, aclose

LOAD = Send(("FUNCTION", "LOAD", "REPLACE", "#!lua name=x"), None, True)


def test_sync_calls_meeting_a_load_under_way_wait_for_it_and_take_its_answer() -> None:
    loads = _SyncLoads()
    sent: list[int] = []
    waiting = threading.Barrier(6)  # five callers and the load itself

    def load() -> str:
        sent.append(1)
        waiting.wait(timeout=LONG_DEADLINE)  # held open until the other five are in
        time.sleep(0.05)  # and a little longer: they are waiting on it, not sending their own
        return "ratelimit"

    def caller(first: bool) -> Any:
        if not first:
            while not loads.flights:  # the first one's load is under way
                time.sleep(0.001)
            waiting.wait(timeout=LONG_DEADLINE)
        return loads.run(None, load, time.monotonic() + LONG_DEADLINE)

    with ThreadPoolExecutor(6) as pool:
        first = pool.submit(caller, True)
        others = [pool.submit(caller, False) for _ in range(5)]
        answers = [first.result()] + [f.result() for f in others]
    assert answers == ["ratelimit"] * 6 and sent == [1], "one load, its answer taken by all"
    assert loads.flights == {}
    assert loads.run(None, lambda: "again", time.monotonic() + 1) == "again", "a later load is its own"


def test_a_failed_load_is_every_waiter_s_failure() -> None:
    loads = _SyncLoads()
    started = threading.Event()
    release = threading.Event()

    def load() -> str:
        started.set()
        release.wait(LONG_DEADLINE)
        raise ValueError("refused")

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(loads.run, None, load, time.monotonic() + LONG_DEADLINE)
        started.wait(LONG_DEADLINE)
        second = pool.submit(loads.run, None, lambda: "never sent", time.monotonic() + LONG_DEADLINE)
        while not second.running():
            time.sleep(0.001)
        time.sleep(0.05)
        release.set()
        for f in (first, second):
            with pytest.raises(ValueError, match="refused"):
                f.result()


def test_async_calls_meeting_a_load_under_way_wait_for_it(stock_server: Server) -> None:
    async def main() -> tuple[list[Any], int]:
        client = aioredis.Redis(host=HOST, port=stock_server.port)
        driver = AsyncDriver(client)
        sent = 0
        real = driver._send_now

        async def counted(step: Send) -> Any:
            nonlocal sent
            sent += 1
            await asyncio.sleep(0.05)  # the others arrive while it is under way
            return await real(step)

        driver._send_now = counted  # type: ignore[method-assign]
        from redis_ratelimit.engine import library
        load = Send(("FUNCTION", "LOAD", "REPLACE", library()), None, True)
        answers = await asyncio.gather(*(driver._send(load) for _ in range(8)))
        await aclose(client)
        return list(answers), sent

    answers, sent = asyncio.run(main())
    assert answers == [b"ratelimit"] * 8 and sent == 1


def loads(server: Server) -> int:
    with server.client() as r:
        return int(r.info("commandstats").get("cmdstat_function|load", {}).get("calls", 0))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_cold_stock_server_under_concurrent_callers_decides_every_call_exactly(stock_server: Server,
                                                                                 mode: str) -> None:
    """Thirty-two callers at once, no library loaded: each decision is Redis' (none degraded), each
    counted once (remaining 99 down to 68), the library loaded."""
    bucket = TokenBucket(capacity=100, per_second=0.001)
    callers = 32
    if mode == "sync":
        limiter = Limiter(stock_server.client(), FailurePolicy.closed(), deadline=LONG_DEADLINE)
        barrier = threading.Barrier(callers)

        def one(_: int) -> Any:
            barrier.wait(LONG_DEADLINE)
            return limiter.check("rl:cold", bucket)

        with ThreadPoolExecutor(callers) as pool:
            decisions = list(pool.map(one, range(callers)))
    else:
        async def main() -> list[Any]:
            alimiter = AsyncLimiter(aioredis.Redis(host=HOST, port=stock_server.port), FailurePolicy.closed(),
                                    deadline=LONG_DEADLINE)
            got = await asyncio.gather(*(alimiter.check("rl:cold", bucket) for _ in range(callers)))
            await aclose(alimiter.client)
            return list(got)

        decisions = asyncio.run(main())
    assert not any(d.degraded for d in decisions) and all(d.allowed for d in decisions)
    assert sorted(d.remaining for d in decisions) == list(range(100 - callers, 100))
    assert loads(stock_server) >= 1
