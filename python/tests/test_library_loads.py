"""At most one FUNCTION LOAD per node at a time (the contract's engine machine): calls that find the
library missing while a load to that node is under way wait for it and take its answer, then send their
own FCALL; so does a call whose FCALL was answered before a load that has since finished (it read the
answer late). The drivers' coordination on its own (a load held open until every caller waits, a late
reader on a real server), and a cold stock server and a cold stock cluster under concurrent callers: every
decision exact, made by Redis, the library loaded once per node."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from redis_ratelimit import AsyncLimiter, FailurePolicy, Limiter, TokenBucket
from redis_ratelimit.drivers import AsyncDriver, SyncDriver, _SyncLoads
from redis_ratelimit.engine import Send, library
from conftest import Servers
from servers import HOST, LONG_DEADLINE, Cluster, Server, aclose

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
        return loads.run(None, load, time.monotonic() + LONG_DEADLINE, loads.loaded)

    with ThreadPoolExecutor(6) as pool:
        first = pool.submit(caller, True)
        others = [pool.submit(caller, False) for _ in range(5)]
        answers = [first.result()] + [f.result() for f in others]
    assert answers == ["ratelimit"] * 6 and sent == [1], "one load, its answer taken by all"
    assert loads.flights == {}
    assert loads.run(None, lambda: "again", time.monotonic() + 1, loads.loaded) == "again", \
        "a load by a call that knew of the last one is its own (the library was missing after it)"


def test_a_failed_load_is_every_waiter_s_failure() -> None:
    loads = _SyncLoads()
    started = threading.Event()
    release = threading.Event()

    def load() -> str:
        started.set()
        release.wait(LONG_DEADLINE)
        raise ValueError("refused")

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(loads.run, None, load, time.monotonic() + LONG_DEADLINE, loads.loaded)
        started.wait(LONG_DEADLINE)
        second = pool.submit(loads.run, None, lambda: "never sent", time.monotonic() + LONG_DEADLINE, loads.loaded)
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
        load = Send(("FUNCTION", "LOAD", "REPLACE", library()), None, True)
        answers = await asyncio.gather(*(driver._send(load, {}) for _ in range(8)))
        await aclose(client)
        return list(answers), sent

    answers, sent = asyncio.run(main())
    assert answers == [b"ratelimit"] * 8 and sent == 1


def library_load() -> Send:
    return Send(("FUNCTION", "LOAD", "REPLACE", library()), None, True)


def fcall_version() -> Send:
    return Send(("FCALL", "rl_version", 0), None)


def test_a_call_that_reads_its_fcall_s_answer_after_a_load_finished_takes_that_load(stock_server: Server) -> None:
    """Its 'function not found' is older than the library: it takes the finished load's answer and
    sends its FCALL again instead of loading a second time (a thread the scheduler left waiting)."""
    driver = SyncDriver(stock_server.client())
    other: list[Any] = []

    def another_call() -> Any:
        return (yield library_load())

    def late_call() -> Any:
        with pytest.raises(redis.exceptions.ResponseError, match="(?i)function not found"):
            yield fcall_version()
        other.append(driver.run(another_call(), LONG_DEADLINE))  # loads meanwhile, on the same driver
        loaded = yield library_load()
        return loaded, (yield fcall_version())

    loaded, version = driver.run(late_call(), LONG_DEADLINE)
    assert loaded == other[0] and version, "the other call's answer, then its own FCALL decided"
    assert loads(stock_server) == 1
    assert driver.run(another_call(), LONG_DEADLINE) == other[0] and loads(stock_server) == 2, \
        "a call that sent nothing before it loads: it knew of the last load"


def test_async_a_call_that_reads_its_fcall_s_answer_after_a_load_finished_takes_that_load(
        stock_server: Server) -> None:
    async def main() -> tuple[Any, Any, Any]:
        client = aioredis.Redis(host=HOST, port=stock_server.port)
        driver = AsyncDriver(client)
        real = driver._send_now
        late_fcall = fcall_version()
        answered, loaded = asyncio.Event(), asyncio.Event()

        async def late_reader(step: Send) -> Any:
            try:
                return await real(step)  # Redis answers now...
            finally:
                if step is late_fcall:
                    answered.set()
                    await loaded.wait()  # ...and the call reads it only after the other's load

        driver._send_now = late_reader  # type: ignore[method-assign]

        def another_call() -> Any:
            return (yield library_load())

        def late_call() -> Any:
            with pytest.raises(redis.exceptions.ResponseError, match="(?i)function not found"):
                yield late_fcall
            return (yield library_load()), (yield fcall_version())

        late = asyncio.ensure_future(driver.run(late_call(), LONG_DEADLINE))
        await asyncio.wait_for(answered.wait(), LONG_DEADLINE)
        other = await driver.run(another_call(), LONG_DEADLINE)
        loaded.set()
        took, version = await late
        await aclose(client)
        return other, took, version

    other, took, version = asyncio.run(main())
    assert took == other and version
    assert loads(stock_server) == 1


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
    assert loads(stock_server) == 1, "one load; the others waited for it or read their FCALL's answer after it"


def _loads_per_node(cluster: Cluster) -> dict[int, int]:
    return {node.port: loads(node) for node in cluster.nodes}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_cold_stock_cluster_under_concurrent_callers_loads_once_per_node_and_decides_exactly(
        servers: Servers, mode: str) -> None:
    """As client/tests/errors.rs and Go's TestColdStockClusterUnderLoad: a stock cluster at cold start (no
    library on any node, no engine known), many callers at once, failing closed: every decision Redis'
    (none degraded), each key's tokens taken exactly, at most one FUNCTION LOAD per node and the library
    on each, the engine 'not yet known' before the first decision and the library through FCALL after,
    no outage and the breaker never open."""
    cluster = servers.cluster(module=False)
    bucket = TokenBucket(capacity=6, per_second=0.001)
    users, each = (200, 8) if mode == "async" else (48, 8)  # threads for the sync limiter: fewer callers
    keys = [f"rl:{{user:{u}}}:api" for u in range(users)]  # over the three primaries' slots
    if mode == "sync":
        limiter: Any = Limiter(cluster.client(), FailurePolicy.closed(), deadline=LONG_DEADLINE)
        assert str(limiter.engine) == "not yet known"
        barrier = threading.Barrier(users)

        def one(key: str) -> list[Any]:
            barrier.wait(LONG_DEADLINE)
            return [limiter.check(key, bucket) for _ in range(each)]

        with ThreadPoolExecutor(users) as pool:
            decisions = [d for got in pool.map(one, keys) for d in got]
        limiter.client.close()
    else:
        async def main() -> tuple[Any, list[Any]]:
            alimiter = AsyncLimiter(aioredis.RedisCluster(host=HOST, port=cluster.nodes[0].port),
                                    FailurePolicy.closed(), deadline=LONG_DEADLINE)
            assert str(alimiter.engine) == "not yet known"
            await alimiter.client.initialize()  # the slot map, as the README says to before traffic

            async def one(key: str) -> list[Any]:
                return [await alimiter.check(key, bucket) for _ in range(each)]

            got = await asyncio.gather(*(one(k) for k in keys))
            await aclose(alimiter.client)
            return alimiter, [d for g in got for d in g]

        limiter, decisions = asyncio.run(main())
    degraded = [d for d in decisions if d.degraded]
    assert degraded == [], f"{len(degraded)} of {len(decisions)} degraded"
    assert sum(d.allowed for d in decisions) == users * 6, "each key's 6 tokens, exactly"
    counted = _loads_per_node(cluster)
    assert all(n <= 1 for n in counted.values()), f"at most one FUNCTION LOAD per node: {counted}"
    for node in cluster.nodes:
        with node.client() as r:
            assert r.function_list(library="ratelimit"), f"the library on port {node.port}"
    assert str(limiter.engine) == "the Lua library through FCALL"
    assert limiter.counts.outage == 0 and limiter.breaker.opened == 0
