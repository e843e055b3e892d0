"""Issue 36's smaller web points, through uvicorn on a real Redis with the module: the FastAPI
dependency inherits `structured_headers` from the middleware; a sync Limiter given to the dependency
is refused naming the dependency; `Route(methods=...)`; `caller_from_header`; the dependency's
`config.counts`; and `verify()` as a health check while Redis is down."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse

from conftest import MakeLimiter
from redis_ratelimit import AsyncLimiter, CallError, DeadlineError, FailurePolicy, Limiter, TokenBucket
from redis_ratelimit.web import ConfigError, RateLimitConfig, RateLimitMiddleware, Route, caller_from_header
from redis_ratelimit.web.fastapi import RateLimit, install
from servers import HOST, LONG_DEADLINE, Server


def limiter_on(server: Server) -> AsyncLimiter:
    return AsyncLimiter(aioredis.Redis(host=HOST, port=server.port), FailurePolicy.open(), deadline=LONG_DEADLINE)


def test_the_dependency_inherits_structured_headers_from_the_middleware(module_server: Server, serve: Any) -> None:
    limiter = limiter_on(module_server)
    search = RateLimit(limiter, "search", TokenBucket(5, 0.01))
    explicit = RateLimit(limiter, "plain", TokenBucket(5, 0.01), structured_headers=False)
    app = FastAPI()
    install(app)

    @app.get("/search", dependencies=[Depends(search)])
    async def do_search() -> str:
        return "ok"

    @app.get("/plain", dependencies=[Depends(explicit)])
    async def do_plain() -> str:
        return "ok"

    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter, routes=[Route("api", "/api", TokenBucket(10, 1.0))], structured_headers=True))
    client = serve(app)
    first = client.get("/search")
    assert first.status_code == 200
    assert first.headers["ratelimit-policy"] == '"search";q=5;w=500'
    assert first.headers["ratelimit"] == '"search";r=4;t=100'
    assert "ratelimit-policy" not in client.get("/plain").headers, "structured_headers=False is kept"
    assert search.config.counts[("search", "search", "allowed")] == 1, "one count, whichever fields"

    # Without a middleware: the fields of structured_headers=False.
    bare = FastAPI()
    alone = RateLimit(limiter_on(module_server), "alone", TokenBucket(5, 0.01))  # a client per event loop

    @bare.get("/alone", dependencies=[Depends(alone)])
    async def do_alone() -> str:
        return "ok"

    response = serve(bare).get("/alone")
    assert response.headers["ratelimit-limit"] == "5" and "ratelimit-policy" not in response.headers


def test_a_sync_limiter_given_to_the_dependency_is_refused_naming_it(module_server: Server) -> None:
    sync = Limiter(redis.Redis(host=HOST, port=module_server.port), FailurePolicy.open())
    with pytest.raises(ConfigError) as refused:
        RateLimit(sync, "search", TokenBucket(5, 1.0))
    assert str(refused.value) == ("RateLimit 'search': the FastAPI dependency needs an AsyncLimiter "
                                  "(redis.asyncio), not Limiter")


def test_a_route_of_some_methods(module_server: Server, serve: Any) -> None:
    limiter = limiter_on(module_server)
    app = FastAPI()

    @app.api_route("/login", methods=["GET", "POST"])
    async def login() -> str:
        return "ok"

    config = RateLimitConfig(limiter, routes=[
        Route("login", "/login", TokenBucket(2, 0.01), methods=["post"]),  # POST-only, case-insensitive
        Route("pages", "/", TokenBucket(100, 1.0)),
    ])
    app.add_middleware(RateLimitMiddleware, config=config)
    client = serve(app)
    gets = [client.get("/login") for _ in range(4)]
    assert all(r.status_code == 200 and r.headers["ratelimit-limit"] == "100" for r in gets), \
        "a GET is not the POST route's: the next route takes it"
    posts = [client.post("/login").status_code for _ in range(3)]
    assert posts == [200, 200, 429]
    assert config.counts[("login", "login", "denied")] == 1 and config.counts[("pages", "pages", "allowed")] == 4

    # One prefix for two routes of different methods is allowed; of a method in common, refused.
    RateLimitConfig(limiter, routes=[Route("w", "/x", TokenBucket(1, 1.0), methods="POST"),
                                     Route("r", "/x", TokenBucket(9, 1.0))])
    with pytest.raises(ConfigError, match="same prefix"):
        RateLimitConfig(limiter, routes=[Route("a", "/x", TokenBucket(1, 1.0), methods=["POST", "PUT"]),
                                         Route("b", "/x", TokenBucket(9, 1.0), methods=["PUT"])])
    with pytest.raises(ConfigError, match="methods must be HTTP method names"):
        Route("a", "/x", TokenBucket(1, 1.0), methods=[])


def test_caller_from_header_keys_by_the_api_key_hashed(module_server: Server, serve: Any) -> None:
    limiter = limiter_on(module_server)
    app = FastAPI()

    @app.get("/api/items")
    async def items() -> str:
        return "ok"

    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter, routes=[Route("api", "/api", TokenBucket(2, 0.01))], caller=caller_from_header("X-API-Key")))
    client = serve(app)
    a = [client.get("/api/items", headers={"X-API-Key": "key-a"}).status_code for _ in range(3)]
    b = [client.get("/api/items", headers={"x-api-key": "key-b"}).status_code for _ in range(2)]
    anonymous = client.get("/api/items").status_code
    assert (a, b, anonymous) == ([200, 200, 429], [200, 200], 200)
    keys = sorted(k.decode() for k in module_server.client().keys("rl:*"))
    digest = hashlib.sha256(b"key-a").hexdigest()
    assert f"rl:{{user:{digest}}}:api:token_bucket" in keys and f"rl:{{ip:{HOST}}}:api:token_bucket" in keys
    assert not any("key-a" in k for k in keys), "the API key itself never appears in a key"
    raw = caller_from_header("X-Tenant", kind="tenant", hashed=False)
    assert str(raw({"headers": [(b"x-tenant", b" acme ")]}, None)) == "tenant:acme"


def test_verify_raises_a_call_error_while_redis_is_down(module_server: Server, make_limiter: MakeLimiter,
                                                        serve: Any) -> None:
    limiter = make_limiter(module_server, FailurePolicy.open())  # LONG_DEADLINE: a hung server waits it out
    assert limiter.verify()["engine"] == "module"
    module_server.hang()
    try:
        with pytest.raises(DeadlineError):
            limiter.verify()
    finally:
        module_server.resume()
    module_server.stop()
    with pytest.raises(CallError):  # UnreachableError (a deadline, where the client's retry outlasts it)
        limiter.verify()
    module_server.start()
    end = time.monotonic() + 30
    while True:
        try:
            assert limiter.verify()["engine"] == "module"
            break
        except CallError:
            assert time.monotonic() < end
            time.sleep(0.1)


def test_a_health_endpoint_as_the_readme_writes_it(module_server: Server, serve: Any) -> None:
    limiter = AsyncLimiter(aioredis.Redis(host=HOST, port=module_server.port), FailurePolicy.open(),
                           deadline=LONG_DEADLINE)
    app = FastAPI()

    @app.get("/health")
    async def health() -> JSONResponse:
        try:
            found = await limiter.verify()
        except CallError as e:
            return JSONResponse({"redis": "down", "why": str(e)}, status_code=503)
        return JSONResponse({"redis": "up", "engine": found["engine"]})

    client = serve(app)
    assert client.get("/health").json() == {"redis": "up", "engine": "module"}
    module_server.stop()
    down = client.get("/health")
    assert down.status_code == 503 and down.json()["redis"] == "down"
