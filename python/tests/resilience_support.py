"""What the resilience tests share (test_seed, test_failure, test_acquire, test_wait): a server with
either engine, limiters on it, and the commands a server has run."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import pytest
import redis
import redis.asyncio

from conftest import EngineCase
from redis_ratelimit import AsyncLimiter, FailurePolicy, Limiter, TokenBucket
from servers import HOST, LONG_DEADLINE, Server


def sync_client(server: Server) -> redis.Redis:
    return redis.Redis(host=HOST, port=server.port)


def async_client(server: Server) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(host=HOST, port=server.port)


# Behaviour tests get a deadline a loaded machine meets (as conftest's make_limiter); the deadline
# tests give their own.
BEHAVIOUR_DEADLINE = LONG_DEADLINE


def limiter(server: Server, failure: FailurePolicy | None = None, **settings: Any) -> Limiter:
    settings.setdefault("deadline", BEHAVIOUR_DEADLINE)
    return Limiter(sync_client(server), failure or FailurePolicy.closed(), **settings)


def async_limiter(server: Server, failure: FailurePolicy | None = None, **settings: Any) -> AsyncLimiter:
    settings.setdefault("deadline", BEHAVIOUR_DEADLINE)
    return AsyncLimiter(async_client(server), failure or FailurePolicy.closed(), **settings)


def on(engine: EngineCase, failure: FailurePolicy | None = None, **settings: Any) -> Limiter:
    """A Limiter on conftest's `engine` (a server and the backend to ask for)."""
    return limiter(engine.server, failure, backend=engine.backend, **settings)


def async_on(engine: EngineCase, failure: FailurePolicy | None = None, **settings: Any) -> AsyncLimiter:
    """An AsyncLimiter on conftest's `engine`."""
    return async_limiter(engine.server, failure, backend=engine.backend, **settings)


def warm_up(engine: EngineCase) -> None:
    """The library loaded on a stock server (one decision under the behaviour deadline), so a limiter
    with a tight deadline meets a ready server."""
    assert not on(engine).check("rl:warm-up", TokenBucket(capacity=1, per_second=1.0), 0).degraded


def commands_run(r: redis.Redis) -> dict[str, int]:
    """The server's calls per command since it started (INFO commandstats), INFO itself left out;
    `r`: one connection kept for this (each new one adds its HELLO)."""
    stats: dict[str, Any] = r.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    calls.pop("info", None)
    return calls


def eventually(what: str, done: Callable[[], bool], timeout: float = 10.0) -> None:
    """Waits for something the code under test does in the background; fails after `timeout`."""
    end = time.monotonic() + timeout
    while not done():
        if time.monotonic() > end:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(0.01)


@pytest.fixture
def stopped_port(servers: Any) -> Iterator[Server]:
    """A server started and stopped at once: nothing listens on its port."""
    server: Server = servers.redis(module=False)
    server.stop()
    yield server
