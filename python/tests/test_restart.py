"""A Redis restart (the process stopped, a new one started on the same port): the limiter's pooled
connections were closed by the old server. The first call after it, and 10 concurrent calls right after
it, are Redis' decisions, never the failure policy's, and the breaker stays closed, whether the client
was made with `from_url` (no `Retry` in redis-py) or `Redis(host=, port=)` (a default `Retry` in
redis-py 6+): the limiter sends a call that met a closed connection again once, on a new connection,
within its deadline."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import pytest
import redis
import redis.asyncio

from conftest import Servers
from redis_ratelimit import AsyncLimiter, Decision, FailurePolicy, Limiter, TokenBucket
from servers import HOST, Server, aclose

BUCKET = TokenBucket(capacity=1000, per_second=1.0)
CONCURRENT = 10
# Behaviour, not speed (as conftest's make_limiter): the library is loaded again within it.
DEADLINE = 2.0

SYNC: dict[str, Callable[[Server], redis.Redis]] = {
    "from_url": lambda s: redis.Redis.from_url(s.url),
    "host_port": lambda s: redis.Redis(host=HOST, port=s.port),
}
ASYNC: dict[str, Callable[[Server], redis.asyncio.Redis]] = {
    "from_url": lambda s: redis.asyncio.from_url(s.url),
    "host_port": lambda s: redis.asyncio.Redis(host=HOST, port=s.port),
}
KINDS = [pytest.param(True, id="module"), pytest.param(False, id="stock")]


def _answered(decisions: list[Decision], limiter: Any, when: str) -> None:
    degraded = [d for d in decisions if d.degraded]
    assert not degraded, f"{len(degraded)} of {len(decisions)} degraded {when}"
    assert limiter.breaker.opened == 0, f"the breaker opened {when}"
    assert limiter.failure.decisions == 0


@pytest.mark.parametrize("module", KINDS)
@pytest.mark.parametrize("constructor", sorted(SYNC))
def test_sync_limiter_after_a_restart(servers: Servers, module: bool, constructor: str) -> None:
    server = servers.redis(module=module)
    client = SYNC[constructor](server)
    limiter = Limiter(client, FailurePolicy.open(), deadline=DEADLINE)
    try:
        with ThreadPoolExecutor(CONCURRENT) as pool:
            def together() -> list[Decision]:
                return list(pool.map(lambda _: limiter.check("rl:{r}:k", BUCKET), range(CONCURRENT)))

            _answered(together(), limiter, "before the restart")  # 10 connections in the pool
            server.restart()
            _answered([limiter.check("rl:{r}:k", BUCKET)], limiter, "on the first call after a restart")
            _answered(together(), limiter, "on the calls right after it")
            server.restart()
            _answered(together(), limiter, "on 10 concurrent calls right after a restart")
    finally:
        client.close()


@pytest.mark.parametrize("module", KINDS)
@pytest.mark.parametrize("constructor", sorted(ASYNC))
def test_async_limiter_after_a_restart(servers: Servers, module: bool, constructor: str) -> None:
    server = servers.redis(module=module)

    async def main() -> None:
        client = ASYNC[constructor](server)
        limiter = AsyncLimiter(client, FailurePolicy.open(), deadline=DEADLINE)
        loop = asyncio.get_running_loop()

        async def together() -> list[Decision]:
            return list(await asyncio.gather(*(limiter.check("rl:{r}:k", BUCKET) for _ in range(CONCURRENT))))

        try:
            _answered(await together(), limiter, "before the restart")  # 10 connections in the pool
            await loop.run_in_executor(None, server.restart)  # the event loop runs meanwhile, as in an app
            _answered([await limiter.check("rl:{r}:k", BUCKET)], limiter, "on the first call after a restart")
            _answered(await together(), limiter, "on the calls right after it")
            await loop.run_in_executor(None, server.restart)
            _answered(await together(), limiter, "on 10 concurrent calls right after a restart")
        finally:
            await aclose(client)

    asyncio.run(main())

