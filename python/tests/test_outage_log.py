"""Outages in the logs: through the logger `redis_ratelimit` (a handler on it sees every line), one
warning per change of cause (not throttled: a kill 1 s after a SIGSTOP logs its own cause), each naming
the limiter and the cause; the breaker's lines name them too. Against a real server, hung (SIGSTOP) then
killed then started again, on the sync and the asyncio limiter."""

from __future__ import annotations

import logging
import time
from typing import Any, Iterator

import pytest

from conftest import Lines, MakeLimiter
from redis.backoff import NoBackoff
from redis.retry import Retry

from redis_ratelimit import Breaker, FailurePolicy, TokenBucket
from servers import Server

BUCKET = TokenBucket(capacity=1000, per_second=1000.0)
# redis.asyncio.Redis(host=, port=) retries a refused connection with a back-off of its own (redis-py
# 6+), which outlasts a 0.1 s deadline: the cause is then the deadline (README). Without it, the
# connection's own failure is the cause.
NO_RETRY = {"retry": Retry(NoBackoff(), 0)}


def _for(seconds: float, limiter: Any) -> int:
    """Checks for `seconds`; how many were degraded."""
    end, degraded = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        degraded += limiter.check("rl:{log}:k", BUCKET).degraded
        time.sleep(0.02)
    return degraded


def test_each_cause_is_logged_once_with_the_limiter_name(
        module_server: Server, make_limiter: MakeLimiter, lines: Lines) -> None:
    limiter = make_limiter(module_server, FailurePolicy.open(), name="checkout", deadline=0.1, client=NO_RETRY,
                           breaker=Breaker(failures=3, cooldown=0.3))
    assert not limiter.check("rl:{log}:k", BUCKET).degraded
    module_server.hang()
    assert _for(1.0, limiter) > 0
    module_server.stop()  # killed 1 s after the SIGSTOP: its own cause, logged at once
    assert _for(1.5, limiter) > 0
    module_server.start()
    end = time.monotonic() + 10
    while limiter.check("rl:{log}:k", BUCKET).degraded:
        assert time.monotonic() < end, "Redis never decided again"
        time.sleep(0.05)

    assert all(r.name.startswith("redis_ratelimit") for r in lines.records)
    ours = [m for m in lines.messages() if m.startswith("limiter 'checkout': ")]
    assert ours == lines.messages(), f"a line without the limiter's name: {lines.messages()}"
    outage = [m for m in ours if "Redis did not decide" in m]
    assert len(outage) == 2, outage
    assert "DeadlineError" in outage[0] and "FailurePolicy.open()" in outage[0]
    assert "UnreachableError" in outage[1] and "the cause changed" in outage[1]
    opened = [m for m in ours if "circuit breaker open" in m]
    assert len(opened) == 1 and "DeadlineError" in opened[0] and "3 failures in a row" in opened[0], opened
    assert sum("circuit breaker closed" in m for m in ours) == 1
    back = [m for m in ours if "Redis answers again after" in m]
    assert len(back) == 1 and "degraded decisions meanwhile" in back[0], ours
    by_cause = [getattr(r, "cause", "") for r in lines.records if "Redis did not decide" in r.getMessage()]
    assert [c.split(":")[0] for c in by_cause] == ["DeadlineError", "UnreachableError"]
    assert all(getattr(r, "limiter") == "checkout" for r in lines.records)
    assert all(r.levelno == logging.WARNING for r in lines.records)


def test_a_lasting_outage_is_one_line(servers: Any, make_limiter: MakeLimiter, lines: Lines) -> None:
    server = servers.redis(module=False)
    server.stop()
    limiter = make_limiter(server, FailurePolicy.closed(), name="api", deadline=0.1, client=NO_RETRY,
                           breaker=Breaker(failures=1000))
    assert _for(0.5, limiter) > 5
    assert len(lines.messages()) == 1, lines.messages()
    assert "limiter 'api'" in lines.messages()[0] and "UnreachableError" in lines.messages()[0]
