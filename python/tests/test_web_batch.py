"""The middleware's decisions of concurrent requests, sent to Redis together (web/batch.py): each is
still its own atomic decision, answered as `check_all` answers it, on the module, on the Lua library
(loaded by the first calls), and by the failure policy when Redis is gone."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import redis.asyncio as aioredis

from redis_ratelimit import AsyncLimiter, FailurePolicy, TokenBucket
from redis_ratelimit.web.batch import Batcher
from servers import HOST, LONG_DEADLINE, Server

BUCKET = TokenBucket(25, 0.01)


def batcher_on(server: Server, failure: FailurePolicy | None = None) -> Batcher:
    # A long deadline: a loaded machine must not turn these answers into the failure policy's.
    limiter = AsyncLimiter(aioredis.Redis(host=HOST, port=server.port), failure or FailurePolicy.open(),
                           deadline=LONG_DEADLINE)
    batcher = Batcher(limiter)
    assert batcher.enabled
    return batcher


async def wave(batcher: Batcher, n: int, key: str = "rl:{ip:192.0.2.1}:api") -> list[Any]:
    return await asyncio.gather(*[batcher.check_all([(key, BUCKET, 1)]) for _ in range(n)])


async def test_concurrent_decisions_share_round_trips_and_stay_exact(module_server: Server) -> None:
    batcher = batcher_on(module_server)
    decisions = await wave(batcher, 60)
    assert sum(d.allowed for d in decisions) == 25
    assert sorted(d.remaining for d in decisions if d.allowed) == list(range(25))
    assert not any(d.degraded for d in decisions)
    assert batcher.batched == 60 and batcher.batches < 60
    # Two limits in one atomic call, batched beside single ones: the same answers as check_all's.
    both = [("rl:{user:ada}:api", TokenBucket(2, 0.01), 1), ("rl:{user:ada}:all", TokenBucket(5, 0.01), 1)]
    answers = await asyncio.gather(*[batcher.check_all(both) for _ in range(3)], *[
        batcher.check_all([("rl:{x}:k", BUCKET, 1)]) for _ in range(2)])
    assert [d.allowed for d in answers] == [True, True, False, True, True]
    assert answers[2].limiting == 0 and answers[2].limit == 2


async def test_on_the_library_the_first_calls_load_it_and_then_share_round_trips(stock_server: Server) -> None:
    batcher = batcher_on(stock_server)
    key = f"rl:{{ip:{uuid.uuid4()}}}:api"  # the stock server is shared: a key of its own
    first = await wave(batcher, 40, key)
    assert sum(d.allowed for d in first) == 25 and not any(d.degraded for d in first)
    assert (await batcher.limiter.verify())["engine"] == "functions"
    before = batcher.batches
    second = await wave(batcher, 10, key)
    assert not any(d.allowed or d.degraded for d in second)
    assert batcher.batches > before, "FCALL batched once the engine is known"


async def test_redis_gone_the_failure_policy_decides_each(servers: Any) -> None:
    server = servers.redis(module=True)
    closed = batcher_on(server, FailurePolicy.closed())
    opened = batcher_on(server, FailurePolicy.open())
    assert all(d.allowed for d in await wave(opened, 3))
    server.stop()
    denied = await wave(closed, 5)
    allowed = await wave(opened, 5)
    assert all(d.degraded and not d.allowed for d in denied)
    assert all(d.degraded and d.allowed for d in allowed)


async def test_a_hung_redis_costs_a_batched_round_one_deadline(servers: Any) -> None:
    """SIGSTOP: the kernel keeps the connections, nothing answers; every request of the round gets the
    failure policy's answer once the limiter's deadline (0.3 s here) has passed, not a socket timeout."""
    server = servers.redis(module=True)
    limiter = AsyncLimiter(aioredis.Redis(host=HOST, port=server.port), FailurePolicy.open(), deadline=0.3)
    batcher = Batcher(limiter)
    assert all(d.allowed and not d.degraded for d in await wave(batcher, 3))
    server.hang()
    try:
        started = time.monotonic()
        decisions = await wave(batcher, 8)
        assert time.monotonic() - started < 2.0  # 0.3 s and a loaded machine's slack; forever without
        assert all(d.allowed and d.degraded for d in decisions)
    finally:
        server.resume()


async def test_a_cancelled_request_leaves_the_others_of_its_round_answered(module_server: Server) -> None:
    import pytest

    batcher = batcher_on(module_server)
    leader = asyncio.ensure_future(batcher.check_all([("rl:{a}:k", BUCKET, 1)]))
    joiner = asyncio.ensure_future(batcher.check_all([("rl:{b}:k", BUCKET, 1)]))
    await asyncio.sleep(0)  # the leader waits for its round; the other has joined it
    leader.cancel()
    decision = await asyncio.wait_for(joiner, 5)
    assert decision.allowed and decision.remaining == 24 and not decision.degraded
    with pytest.raises(asyncio.CancelledError):
        await leader
