"""Rate strings (`parse_rate`, `parse_rates`): `limits`' grammar, held to `limits`' own parser (the
same strings accepted, read as the same amount and window), as the window policy asked for; and one
through the middleware against a real Redis."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from limits import parse_many

import redis.asyncio as aioredis
from redis_ratelimit import (AsyncLimiter, FailurePolicy, FixedWindow, PolicyError, SlidingCounter, SlidingLog,
                             TokenBucket, parse_rate, parse_rates)
from redis_ratelimit.web import RateLimitConfig, RateLimitMiddleware, Route
from servers import HOST, LONG_DEADLINE, Server

STRINGS = [
    "10/minute", "10/minutes", "5 per 15 minutes", "5 per 15 minute", "1/second", "100 / day", "3 per hour",
    "2/2 months", "1/year", "10/MINUTE", "  7 per  3  seconds  ", "1/second; 5/minute", "1/second, 5/minute",
    "1/second|5/minute|100/day",
    # refused by both
    "10/fortnight", "ten/minute", "10 minute", "", "/minute", "10/", "10/min", "10/minutess", "1/second;",
]


@pytest.mark.parametrize("text", STRINGS)
def test_the_grammar_is_limits_own(text: str) -> None:
    try:
        theirs = [(item.amount, item.get_expiry()) for item in parse_many(text)]
    except ValueError:
        theirs = None
    try:
        ours = [(p.limit, p.period) for p in parse_rates(text, FixedWindow)]
    except ValueError:
        ours = None
    assert ours == theirs


def test_the_kind_is_the_sliding_counter_unless_named() -> None:
    assert parse_rate("10/minute") == SlidingCounter(limit=10, window=60)
    assert parse_rate("5 per 15 minutes", FixedWindow) == FixedWindow(limit=5, window=900)
    assert parse_rate("5 per 15 minutes", SlidingLog) == SlidingLog(limit=5, window=900)
    assert parse_rate("6/minute", TokenBucket) == TokenBucket(capacity=6, per_second=0.1)
    with pytest.raises(ValueError, match="holds 2 rates"):
        parse_rate("1/second;5/minute")
    with pytest.raises(ValueError, match="not a rate string: '10/fortnight'"):
        parse_rate("10/fortnight")
    with pytest.raises(PolicyError, match="invalid limit"):
        parse_rate("0/minute")  # the policy's own bounds


def test_a_route_given_a_rate_string_limits_by_it(module_server: Server, serve: Any) -> None:
    limiter = AsyncLimiter(aioredis.Redis(host=HOST, port=module_server.port), FailurePolicy.open(),
                           deadline=LONG_DEADLINE)
    app = FastAPI()

    @app.get("/api")
    async def api() -> str:
        return "ok"

    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter, routes=[Route("api", "/api", "3 per 15 minutes")], structured_headers=True))
    client = serve(app)
    responses = [client.get("/api") for _ in range(4)]
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[0].headers["ratelimit-policy"] == '"api";q=3;w=900'
    assert module_server.client().exists("rl:{ip:127.0.0.1}:api:sliding_counter") == 1
