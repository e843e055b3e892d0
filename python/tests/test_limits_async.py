"""The `limits` storage for asyncio (`async+ratelimit://`), through `limits.aio.strategies`: on a module
server and on a stock server through the Lua library, concurrent hits, reads, reset, a cluster."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
from limits import RateLimitItemPerMinute
from limits.aio import strategies
from limits.storage import storage_from_string

import redis_ratelimit.contrib.limits  # noqa: F401  (registers the schemes)
from redis_ratelimit import CallError
from redis_ratelimit.contrib.limits import AsyncRatelimitStorage
from clock import clear_of_minute_edge
from servers import HOST, LONG_DEADLINE, SENTINEL_SERVICE, Server, free_port

Strategy = type[strategies.FixedWindowRateLimiter | strategies.MovingWindowRateLimiter
                 | strategies.SlidingWindowCounterRateLimiter]
STRATEGIES: list[Strategy] = [strategies.FixedWindowRateLimiter, strategies.MovingWindowRateLimiter,
                              strategies.SlidingWindowCounterRateLimiter]


@pytest.fixture(params=["module", "lua"])
def server(request: pytest.FixtureRequest, servers: Any) -> Server:
    s: Server = servers.redis(module=request.param == "module")
    return s


def storage_on(server: Server, **options: Any) -> AsyncRatelimitStorage:
    options.setdefault("deadline", LONG_DEADLINE)  # behaviour, not the deadline: a loaded machine may be slow
    storage = storage_from_string(f"async+ratelimit://{HOST}:{server.port}/0", **options)
    assert isinstance(storage, AsyncRatelimitStorage)
    return storage


async def test_the_engine_is_the_module_or_the_library(server: Server) -> None:
    assert (await storage_on(server).verify())["engine"] == ("module" if server.module else "functions")


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.__name__)
async def test_each_strategy_allows_the_limit_then_denies(server: Server, strategy: Strategy) -> None:
    storage = storage_on(server)
    limiter = strategy(storage)
    item = RateLimitItemPerMinute(5)
    assert [await limiter.hit(item, "ada") for _ in range(7)] == [True] * 5 + [False] * 2
    assert not await limiter.test(item, "ada")
    stats = await limiter.get_window_stats(item, "ada")
    assert stats.remaining == 0
    assert time.time() < stats.reset_time <= time.time() + 60.5
    assert await limiter.hit(item, "bob", cost=5)
    assert not await limiter.hit(item, "bob")
    await limiter.clear(item, "bob")
    assert (await limiter.get_window_stats(item, "bob")).remaining == 5


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.__name__)
async def test_concurrent_hits_admit_exactly_the_limit(server: Server, strategy: Strategy) -> None:
    limiter = strategy(storage_on(server, deadline=10.0))  # 200 calls queued on one loop at once
    item = RateLimitItemPerMinute(50)
    results = await asyncio.gather(*(limiter.hit(item, "crowd") for _ in range(200)))
    assert results.count(True) == 50


async def test_reads_and_reset(server: Server) -> None:
    storage = storage_on(server, key_prefix="aio")
    item = RateLimitItemPerMinute(3)
    key = item.key_for("ada")
    assert [await storage.incr(key, 60) for _ in range(4)] == [1, 2, 3, 4]
    assert await storage.get(key) == 3
    assert time.time() < await storage.get_expiry(key) <= time.time() + 60.01
    assert await storage.acquire_entry(key, 3, 60, amount=2)
    clear_of_minute_edge()
    assert (await storage.get_moving_window(key, 3, 60))[1] == 2
    assert await storage.acquire_sliding_window_entry(key, 3, 60, amount=3)
    previous, _, current, _ = await storage.get_sliding_window(key, 60)
    assert (previous, current) == (0, 3)
    assert await storage.check()
    assert await storage.reset() == 3
    assert await storage.get(key) == 0


async def test_every_call_on_a_hung_server_ends_within_its_deadline(servers: Any) -> None:
    server = servers.redis(module=True)
    storage = storage_on(server, deadline=0.3)
    assert await storage.check()
    server.hang()
    try:
        limiter = strategies.FixedWindowRateLimiter(storage)
        calls: list[Any] = [lambda: limiter.hit(RateLimitItemPerMinute(1), "a"), lambda: storage.clear("k"),
                            storage.reset]
        for call in calls:
            started = time.monotonic()
            with pytest.raises((CallError, redis.RedisError)):
                await call()
            assert time.monotonic() - started < 2.0  # 0.3 s, and a loaded machine's slack; forever without
        started = time.monotonic()
        assert not await storage.check()
        assert time.monotonic() - started < 2.0
    finally:
        server.resume()


async def test_cluster(servers: Any) -> None:
    cluster = servers.cluster(module=True)
    hosts = ",".join(f"{h}:{p}" for h, p in cluster.startup_nodes)
    storage: Any = storage_from_string(f"async+ratelimit+cluster://{hosts}?deadline=5")
    item = RateLimitItemPerMinute(2)
    for strategy in STRATEGIES:
        limiter = strategy(storage)
        for who in range(10):
            assert [await limiter.hit(item, str(who)) for _ in range(3)] == [True, True, False]
    assert await storage.reset() == 30


async def test_sentinel(servers: Any) -> None:
    sentinel = servers.sentinel(module=False)
    hosts = ",".join(f"{h}:{p}" for h, p in sentinel.sentinels)
    storage: Any = storage_from_string(f"async+ratelimit+sentinel://{hosts}/{SENTINEL_SERVICE}?deadline=5")
    item = RateLimitItemPerMinute(2)
    for strategy in STRATEGIES:
        assert [await strategy(storage).hit(item, "ada") for _ in range(3)] == [True, True, False]
    assert (await storage.verify())["engine"] == "functions"


async def test_nothing_listens() -> None:
    storage: Any = storage_from_string(f"async+ratelimit://{HOST}:{free_port()}/0", deadline=0.5)
    assert not await storage.check()
    with pytest.raises(CallError):
        await strategies.FixedWindowRateLimiter(storage).hit(RateLimitItemPerMinute(1), "ada")
