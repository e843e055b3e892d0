"""The FastAPI dependency on a real Redis with the module, through a real socket: per-endpoint limits
on endpoints that take no `request`, the fields on their responses, the 429 as a problem body (with
`install`) or FastAPI's own `{"detail": ...}` (without)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis.asyncio as aioredis
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import PlainTextResponse

from redis_ratelimit import AsyncLimiter, Decision, FailurePolicy, SlidingCounter, TokenBucket, UsageError
from redis_ratelimit.web import ConfigError, RateLimitConfig, RateLimitMiddleware, Route
from redis_ratelimit.web.fastapi import RateLimit, add_fields, install
from servers import HOST, LONG_DEADLINE, Server


def limiter_on(server: Server) -> AsyncLimiter:
    return AsyncLimiter(aioredis.Redis(host=HOST, port=server.port), FailurePolicy.open(), deadline=LONG_DEADLINE)


def test_a_dependency_limits_its_endpoints_without_a_request_parameter(module_server: Server, serve: Any) -> None:
    limiter = limiter_on(module_server)
    search = RateLimit(limiter, "search", TokenBucket(2, 0.01), structured_headers=True)
    export = RateLimit(limiter, "export", TokenBucket(10, 0.01), cost=lambda request: int(request.query_params.get("n", "1")))
    app = FastAPI()
    install(app)

    @app.get("/search", dependencies=[Depends(search)])
    async def do_search(q: str = "") -> dict[str, str]:
        return {"q": q}

    @app.get("/export")
    async def do_export(decision: Decision = Depends(export)) -> dict[str, int]:
        return {"remaining": decision.remaining}

    client = serve(app)
    first = client.get("/search", params={"q": "x"})
    assert first.status_code == 200 and first.json() == {"q": "x"}
    assert (first.headers["ratelimit-limit"], first.headers["ratelimit-remaining"]) == ("2", "1")
    assert first.headers["ratelimit-policy"] == '"search";q=2;w=200'
    assert client.get("/search").status_code == 200
    denied = client.get("/search")
    assert denied.status_code == 429
    assert denied.headers["content-type"] == "application/problem+json"
    assert denied.headers["retry-after"] == "100"
    assert denied.headers["ratelimit-remaining"] == "0"
    assert denied.json() == {
        "detail": "rate limit 'search' exceeded: retry in 100 s",
        "limit": "search",
        "quota": 2,
        "remaining": 0,
        "retry_after_seconds": 100,
        "status": 429,
        "title": "Too Many Requests",
        "type": "urn:redis-ratelimit:rate-limited",
    }
    assert client.get("/export", params={"n": "4"}).json() == {"remaining": 6}
    assert client.get("/export").headers["ratelimit-remaining"] == "5"
    with module_server.client() as r:
        assert sorted(k.decode() for k in r.keys("*")) == ["rl:{ip:127.0.0.1}:export:token_bucket",
                                                           "rl:{ip:127.0.0.1}:search:token_bucket"]


def test_without_install_fastapis_own_body_with_the_same_fields(module_server: Server, serve: Any) -> None:
    limit = RateLimit(limiter_on(module_server), "items", TokenBucket(1, 0.01))
    app = FastAPI()

    @app.get("/items", dependencies=[Depends(limit)])
    async def items() -> list[int]:
        return [1]

    client = serve(app)
    assert client.get("/items").status_code == 200
    denied = client.get("/items")
    assert denied.status_code == 429
    assert denied.json() == {"detail": "rate limit 'items' exceeded: retry in 100 s"}
    assert denied.headers["retry-after"] == "100" and denied.headers["ratelimit-limit"] == "1"


def test_a_dependency_and_a_middleware_route_of_one_name_share_the_bucket(module_server: Server, serve: Any) -> None:
    limiter = limiter_on(module_server)
    app = FastAPI()

    @app.get("/api/a")
    async def a() -> str:
        return "a"

    @app.get("/b", dependencies=[Depends(RateLimit(limiter, "api", TokenBucket(3, 0.01)))])
    async def b() -> str:
        return "b"

    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(limiter, routes=[Route("api", "/api", TokenBucket(3, 0.01))]))
    client = serve(app)
    assert [client.get(p).status_code for p in ("/api/a", "/b", "/api/a", "/b")] == [200, 200, 200, 429]


def test_a_dependency_with_a_global_limit_checks_both_in_one_call(module_server: Server, serve: Any) -> None:
    limiter = limiter_on(module_server)
    everything = TokenBucket(3, 0.01)
    a = RateLimit(limiter, "a", TokenBucket(2, 0.01), global_limit=everything)
    b = RateLimit(limiter, "b", TokenBucket(2, 0.01), global_limit=everything)
    app = FastAPI()
    install(app)

    @app.get("/a", dependencies=[Depends(a)])
    async def get_a() -> str:
        return "a"

    @app.get("/b", dependencies=[Depends(b)])
    async def get_b() -> str:
        return "b"

    client = serve(app)
    got = [client.get(p) for p in ("/a", "/a", "/a", "/b", "/b")]
    assert [r.status_code for r in got] == [200, 200, 429, 200, 429]
    assert got[2].json()["limit"] == "a", "a's own limit denied; the global one was not charged"
    assert got[4].json()["limit"] == "all"


def test_the_fields_are_on_error_responses_and_on_responses_an_endpoint_builds(module_server: Server,
                                                                               serve: Any) -> None:
    limiter = limiter_on(module_server)
    items = RateLimit(limiter, "items", TokenBucket(5, 0.01))
    app = FastAPI()
    install(app)

    @app.get("/items/{n}", dependencies=[Depends(items)])
    async def item(n: int) -> dict[str, int]:
        if n > 10:
            raise HTTPException(404, "no such item", headers={"x-why": "range"})
        return {"n": n}

    @app.get("/text", dependencies=[Depends(items)])
    async def text(request: Request) -> PlainTextResponse:
        return add_fields(request, PlainTextResponse("hello"))

    client = serve(app)
    assert client.get("/items/1").headers["ratelimit-remaining"] == "4"
    missing = client.get("/items/99")
    assert missing.status_code == 404 and missing.json() == {"detail": "no such item"}
    assert (missing.headers["ratelimit-limit"], missing.headers["ratelimit-remaining"]) == ("5", "3")
    assert missing.headers["x-why"] == "range"
    own = client.get("/text")
    assert own.text == "hello" and own.headers["ratelimit-remaining"] == "2"
    for _ in range(2):
        client.get("/items/1")
    denied = client.get("/items/99")  # the limit first: a 429, not the endpoint's 404
    assert denied.status_code == 429 and denied.headers["content-type"] == "application/problem+json"


def test_a_dependency_without_a_policy_is_refused_when_built() -> None:
    """`RateLimit(..., 10)` was accepted, then every request answered 500 (UsageError); a rate string
    is the sliding window counter it means."""
    limiter = AsyncLimiter(aioredis.Redis(port=1), FailurePolicy.open())  # made, never called
    with pytest.raises(ConfigError, match=re.escape("RateLimit 'search': policy must be a policy (TokenBucket")):
        RateLimit(limiter, "search", 10)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=re.escape("limit 'all': global_limit must be a policy")):
        RateLimit(limiter, "search", TokenBucket(3, 1.0), global_limit="100/fortnight")
    limit = RateLimit(limiter, "search", "10/minute", global_limit="100/hour")
    assert limit.config.routes[0].policy == SlidingCounter(10, 60)
    with pytest.raises(UsageError, match=re.escape("ERR invalid cost: must be a whole number >= 0")):
        RateLimit(limiter, "search", TokenBucket(3, 1.0), cost=1.5)  # type: ignore[arg-type]
    assert limit.config.global_limit == SlidingCounter(100, 3600)
