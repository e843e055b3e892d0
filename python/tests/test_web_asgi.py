"""The ASGI middleware on a real Redis with the module, through real sockets: a FastAPI app served by
uvicorn on a free port, hit by httpx (and a WebSocket client)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, MutableMapping

import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI, HTTPException, WebSocket
from fastapi.responses import StreamingResponse

from redis_ratelimit import AsyncLimiter, Concurrency, FailurePolicy, FixedWindow, TokenBucket
from redis_ratelimit.web import (
    AccessLists,
    Caller,
    RateLimitConfig,
    RateLimitMiddleware,
    Route,
)
from servers import HOST, LONG_DEADLINE, Server
from web_serve import PrincipalFromHeader

API = TokenBucket(capacity=3, per_second=0.01)  # 3, then one every 100 s: nothing refills mid-test
GLOBAL = TokenBucket(capacity=5, per_second=0.01)


def limiter_on(server: Server, failure: FailurePolicy | None = None, **kwargs: Any) -> AsyncLimiter:
    client = aioredis.Redis(host=HOST, port=server.port)
    kwargs.setdefault("deadline", LONG_DEADLINE)
    return AsyncLimiter(client, failure or FailurePolicy.open(), **kwargs)


def api_app() -> FastAPI:
    app = FastAPI()

    @app.get("/api/items")
    async def items() -> list[str]:
        return ["a"]

    @app.get("/api/bad")
    async def bad() -> None:
        raise HTTPException(400, "bad request")

    @app.get("/api/crash")
    async def crash() -> None:
        raise RuntimeError("boom")

    @app.get("/health")
    async def health() -> str:
        return "ok"

    @app.get("/other")
    async def other() -> str:
        return "other"

    return app


def keys(server: Server) -> list[str]:
    with server.client() as r:
        return sorted(k.decode() for k in r.keys("*"))


def test_headers_on_every_response_errors_included(module_server: Server, serve: Any) -> None:
    config = RateLimitConfig(limiter_on(module_server), routes=[Route("api", "/api", TokenBucket(10, 0.01))],
                             global_limit=TokenBucket(100, 0.01), skip=["/health"], structured_headers=True)
    # Wrapped around the whole app: the 500 of an unhandled error gets its fields too.
    client = serve(RateLimitMiddleware(api_app(), config))
    expected = {"/api/items": 200, "/api/missing": 404, "/api/bad": 400, "/api/crash": 500}
    remaining = []
    for path, status in expected.items():
        # uvicorn closes a connection whose app raised: the crash gets one of its own.
        r = client.get(path, headers={"connection": "close"})
        assert r.status_code == status, path
        assert r.headers["ratelimit-limit"] == "10", path
        assert r.headers["ratelimit-policy"] == '"api";q=10;w=1000', path
        assert r.headers["ratelimit"].startswith('"api";r='), path
        remaining.append(int(r.headers["ratelimit-remaining"]))
    assert remaining == [9, 8, 7, 6]
    other = client.get("/other")  # no route: the global limit alone
    assert other.headers["ratelimit-limit"] == "100" and other.headers["ratelimit-remaining"] == "95"
    health = client.get("/health")
    assert health.status_code == 200 and "ratelimit-limit" not in health.headers
    assert keys(module_server) == ["rl:{ip:127.0.0.1}:all:token_bucket", "rl:{ip:127.0.0.1}:api:token_bucket"]


def test_the_429_its_body_and_one_atomic_call_with_the_global_limit(module_server: Server, serve: Any) -> None:
    app = api_app()
    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter_on(module_server), routes=[Route("api", "/api", API)], global_limit=GLOBAL))
    client = serve(app)
    assert [client.get("/api/items").status_code for _ in range(3)] == [200, 200, 200]
    denied = client.get("/api/items")
    assert denied.status_code == 429
    assert denied.headers["content-type"] == "application/problem+json"
    assert denied.headers["retry-after"] == "100"
    assert (denied.headers["ratelimit-limit"], denied.headers["ratelimit-remaining"]) == ("3", "0")
    assert denied.content == (
        b'{"detail":"rate limit \'api\' exceeded: retry in 100 s","limit":"api","quota":3,"remaining":0,'
        b'"retry_after_seconds":100,"status":429,"title":"Too Many Requests",'
        b'"type":"urn:redis-ratelimit:rate-limited"}'
    )
    # The route's denial took nothing from the global limit: 5 - 3 = 2 left for other paths.
    assert [client.get("/other").status_code for _ in range(3)] == [200, 200, 429]
    body = client.get("/other").json()
    assert (body["limit"], body["quota"]) == ("all", 5)


def test_costs_and_a_cost_above_the_limit(module_server: Server, serve: Any) -> None:
    def cost(scope: Any) -> int:
        return int(dict(scope["headers"]).get(b"x-cost", b"1"))

    app = api_app()
    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter_on(module_server), routes=[Route("api", "/api", TokenBucket(10, 0.01), cost=cost)]))
    client = serve(app)
    assert client.get("/api/items", headers={"x-cost": "4"}).headers["ratelimit-remaining"] == "6"
    never = client.get("/api/items", headers={"x-cost": "15"})
    assert never.status_code == 429 and "retry-after" not in never.headers
    body = never.json()
    assert body["type"] == "urn:redis-ratelimit:cost-exceeds-limit" and body["cost"] == 15
    assert client.get("/api/items").headers["ratelimit-remaining"] == "5"


def test_shadow_limits_are_decided_but_never_enforced(module_server: Server, serve: Any) -> None:
    app = api_app()
    config = RateLimitConfig(
        limiter_on(module_server), routes=[Route("api", "/api", API), Route("other", "/other", API)],
        global_limit=TokenBucket(1, 0.01), shadow=["all", "other"])
    app.add_middleware(RateLimitMiddleware, config=config)
    client = serve(app)
    got = [client.get("/api/items") for _ in range(3)]
    assert [r.status_code for r in got] == [200, 200, 200], "the shadow global of 1 denies none"
    assert [r.headers["ratelimit-remaining"] for r in got] == ["2", "1", "0"], "the route's fields"
    assert client.get("/api/items").status_code == 429
    only_shadow = [client.get("/other") for _ in range(5)]
    assert [r.status_code for r in only_shadow] == [200] * 5
    assert all("ratelimit-limit" not in r.headers for r in only_shadow)
    with module_server.client() as r:
        # Decided in Redis: the global bucket of 1 was charged once (its denials wrote nothing).
        assert r.exists("rl:{ip:127.0.0.1}:all:token_bucket") == 1
    # Counted as the Rust layer counts; the shadow limits of a request the route denied are not checked.
    assert dict(config.counts) == {
        ("api", "api", "allowed"): 3,
        ("api", "all", "shadow_allowed"): 1,
        ("api", "all", "shadow_denied"): 2,
        ("api", "api", "denied"): 1,
        ("other", "all", "shadow_denied"): 5,
    }


def test_plans_principals_and_the_access_lists(module_server: Server, serve: Any) -> None:
    def plan(caller: Caller) -> TokenBucket:
        return TokenBucket(4, 0.01) if caller.id.startswith("pro-") else TokenBucket(2, 0.01)

    lists = AccessLists()
    lists.deny_principal("mallory")
    lists.allow_principal("ops")
    app = api_app()
    config = RateLimitConfig(limiter_on(module_server), routes=[Route("api", "/api", plan)], access_lists=lists)
    app.add_middleware(RateLimitMiddleware, config=config)
    app.add_middleware(PrincipalFromHeader)  # added last: runs first
    client = serve(app)

    def statuses(user: str, n: int) -> list[int]:
        return [client.get("/api/items", headers={"x-user": user}).status_code for _ in range(n)]

    assert statuses("pro-ada", 5) == [200] * 4 + [429]
    assert statuses("bob", 3) == [200, 200, 429]
    assert statuses("a}x1", 3) == [200, 200, 429]
    assert statuses("ops", 5) == [200] * 5
    refused = client.get("/api/items", headers={"x-user": "mallory"})
    assert refused.status_code == 403 and refused.json()["type"] == "urn:redis-ratelimit:denied"
    counts = config.counts
    assert (counts[("api", "api", "allowlisted")], counts[("api", "api", "denylisted")]) == (5, 1)
    assert keys(module_server) == ["rl:{user.esc:a%7Dx1}:api:token_bucket", "rl:{user:bob}:api:token_bucket", "rl:{user:pro-ada}:api:token_bucket"]


def test_forwarding_headers_through_trusted_proxies_only(module_server: Server, serve: Any) -> None:
    trusting = api_app()
    trusting.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter_on(module_server), routes=[Route("api", "/api", API)], trusted_proxies=["127.0.0.0/8"]))
    client = serve(trusting)
    for xff in ["203.0.113.7", "198.51.100.1, 203.0.113.8", "2001:db8:1:2::aaaa", "2001:db8:1:2::bbbb"]:
        assert client.get("/api/items", headers={"x-forwarded-for": xff}).status_code == 200
    assert client.get("/api/items", headers={"forwarded": 'for="[2001:db8:1:2::cccc]:443"'}).status_code == 200
    assert keys(module_server) == [
        "rl:{ip:2001:db8:1:2::}:api:token_bucket",  # one /64: three requests in one bucket
        "rl:{ip:203.0.113.7}:api:token_bucket",
        "rl:{ip:203.0.113.8}:api:token_bucket",  # read from the right: the proxy's view, not the spoofed left
    ]
    assert client.get("/api/items", headers={"x-forwarded-for": "2001:db8:1:2::dddd"}).status_code == 429
    untrusting = api_app()
    # Each server runs its own event loop: a limiter of its own (redis.asyncio connections are per loop).
    untrusting.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter_on(module_server), routes=[Route("api", "/api", API)], key_prefix="other"))
    other = serve(untrusting)
    assert other.get("/api/items", headers={"x-forwarded-for": "203.0.113.99"}).status_code == 200
    with module_server.client() as r:
        assert sorted(k.decode() for k in r.keys("other:*")) == ["other:{ip:127.0.0.1}:api:token_bucket"]


def test_a_closed_limiter_with_redis_gone_says_unavailable(servers: Any, serve: Any) -> None:
    server = servers.redis(module=True)
    app = api_app()
    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter_on(server, FailurePolicy.closed()), routes=[Route("api", "/api", API)],
        global_limit=GLOBAL, outage_status=503))
    client = serve(app)
    assert client.get("/api/items").status_code == 200
    server.stop()
    r = client.get("/api/items")
    assert r.status_code == 503
    assert r.headers["x-ratelimit-degraded"] == "true" and r.headers["retry-after"] == "1"
    assert "ratelimit-remaining" not in r.headers
    body = r.json()
    assert (body["type"], body["limit"]) == ("urn:redis-ratelimit:unavailable", "api")


def test_a_closed_limiter_refused_by_the_acl_says_misconfigured(servers: Any, serve: Any) -> None:
    """A user whose ACL refuses every engine's command (NOPERM): Redis answers, so this is no
    outage; the closed policy's denial says ``misconfigured`` (as the Rust layer does), and the
    limiter's `misconfigured` says so until Redis decides again."""
    server = servers.redis(module=False)
    with server.client() as r:
        r.execute_command("ACL", "SETUSER", "nothing", "on", ">pw", "~rl:*", "+ping", "+hello", "+client")
    limiter = AsyncLimiter(aioredis.Redis(host=HOST, port=server.port, username="nothing", password="pw"),
                           FailurePolicy.closed())
    assert not limiter.misconfigured
    app = api_app()
    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter, routes=[Route("api", "/api", API)], global_limit=GLOBAL, outage_status=503))
    client = serve(app)
    r = client.get("/api/items")
    assert r.status_code == 503 and r.headers["x-ratelimit-degraded"] == "true"
    body = r.json()
    assert (body["type"], body["limit"]) == ("urn:redis-ratelimit:misconfigured", "api")
    assert limiter.misconfigured
    with server.client() as r2:
        r2.execute_command("ACL", "SETUSER", "nothing", "+@all")
    # A misconfiguration is Redis answering: the breaker never opened, so the next request is decided.
    assert client.get("/api/items").status_code == 200, "decided once the ACL allows the library"
    assert not limiter.misconfigured and not limiter.breaker.open


def test_concurrency_slots_are_held_until_the_body_has_been_sent(module_server: Server, serve: Any) -> None:
    gate = asyncio.Event()
    app = api_app()

    @app.get("/export")
    async def export() -> StreamingResponse:
        async def chunks() -> Any:
            yield b"first\n"
            await gate.wait()
            yield b"last\n"

        return StreamingResponse(chunks())

    @app.get("/open")
    async def release() -> str:
        gate.set()
        return "released"

    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter_on(module_server), routes=[Route("export", "/export", TokenBucket(10, 0.01))],
        concurrency=[Route("export", "/export", Concurrency(1, 30.0))]))
    client = serve(app)
    with client.stream("GET", "/export") as streaming:
        assert streaming.status_code == 200
        assert streaming.headers["ratelimit-remaining"] == "9"
        lines = streaming.iter_lines()
        assert next(lines) == "first"  # the handler has returned; the body is still being sent
        second = client.get("/export")
        assert second.status_code == 429
        body = second.json()
        assert (body["type"], body["in_flight_limit"]) == ("urn:redis-ratelimit:concurrency-limited", 1)
        assert "ratelimit-limit" not in second.headers
        assert client.get("/open").text == '"released"'
        assert list(lines) == ["last"]
    # Sent: the slot is free, and the denied request took no token of the rate limit.
    third = client.get("/export")
    assert third.status_code == 200 and third.headers["ratelimit-remaining"] == "8"


def test_websocket_connections_are_limited_when_they_open(module_server: Server, serve: Any) -> None:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    app = FastAPI()

    @app.websocket("/ws")
    async def echo(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text(await ws.receive_text())
        await ws.close()

    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter_on(module_server), routes=[Route("ws", "/ws", TokenBucket(2, 0.01))]))
    client = serve(app)
    url = client.base_url.copy_with(scheme="ws").join("/ws")
    for remaining in ("1", "0"):
        with connect(str(url)) as ws:
            assert ws.response is not None
            assert ws.response.headers["ratelimit-remaining"] == remaining
            ws.send("hi")
            assert ws.recv() == "hi"
    with pytest.raises(InvalidStatus) as refused:
        connect(str(url))
    response = refused.value.response
    assert response.status_code == 429
    assert response.headers["retry-after"] == "100"
    assert json.loads(response.body)["type"] == "urn:redis-ratelimit:rate-limited"


def test_without_the_module_on_the_library(stock_server: Server, serve: Any) -> None:
    app = api_app()
    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter_on(stock_server), routes=[Route("api", "/api", API)], global_limit=GLOBAL))
    client = serve(app)
    got = [client.get("/api/items") for _ in range(4)]
    assert [r.status_code for r in got] == [200, 200, 200, 429]
    assert [r.headers["ratelimit-remaining"] for r in got] == ["2", "1", "0", "0"]
    with stock_server.client() as r:
        assert r.function_list(), "decided by the Lua library, loaded with FUNCTION LOAD"


def test_your_own_denial_answer_gets_the_fields(module_server: Server, serve: Any) -> None:
    from starlette.responses import JSONResponse

    from redis_ratelimit.web import Denial, DenialKind

    seen: list[Denial] = []

    def on_denial(denial: Denial) -> Any:
        seen.append(denial)
        if denial.kind is DenialKind.RATE_LIMITED:
            return JSONResponse({"error": "slow down", "limit": denial.limit}, status_code=429)
        return denial.default_response()

    app = api_app()
    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter_on(module_server), routes=[Route("api", "/api", TokenBucket(1, 0.01))], on_denial=on_denial))
    client = serve(app)
    assert client.get("/api/items").status_code == 200
    r = client.get("/api/items")
    assert (r.status_code, r.json()) == (429, {"error": "slow down", "limit": "api"})
    assert r.headers["retry-after"] == "100" and r.headers["ratelimit-remaining"] == "0"
    assert [(d.route, d.limit, d.cost, d.retry_after_secs()) for d in seen] == [("api", "api", 1, 100)]


def test_any_asgi_app_streaming_untouched(module_server: Server, serve: Any) -> None:
    """No framework: a bare ASGI callable streaming its body in parts gets them all, as sent."""

    async def bare(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for part in (b"one ", b"two ", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    config = RateLimitConfig(limiter_on(module_server), global_limit=TokenBucket(2, 0.01),
                             global_concurrency=Concurrency(1, 30.0))
    client = serve(RateLimitMiddleware(bare, config))
    first = client.get("/anything")
    assert (first.status_code, first.text, first.headers["ratelimit-remaining"]) == (200, "one two three", "1")
    assert client.get("/else").status_code == 200, "the slot was given back once the body was sent"
    denied = client.get("/x")
    assert denied.status_code == 429 and denied.json()["limit"] == "all"


def test_an_open_limiter_with_redis_gone_serves_and_says_degraded(servers: Any, serve: Any) -> None:
    server = servers.redis(module=True)
    app = api_app()
    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter_on(server), routes=[Route("api", "/api", API)], structured_headers=True))
    client = serve(app)
    assert "x-ratelimit-degraded" not in client.get("/api/items").headers
    server.stop()
    r = client.get("/api/items")
    assert r.status_code == 200
    assert r.headers["x-ratelimit-degraded"] == "true"
    assert (r.headers["ratelimit-limit"], r.headers["ratelimit-policy"]) == ("3", '"api";q=3;w=300')
    assert "ratelimit-remaining" not in r.headers and "ratelimit" not in r.headers


async def test_a_websocket_without_the_denial_extension_is_refused_before_the_handshake(module_server: Server) -> None:
    opened: list[Any] = []

    async def ws_app(scope: Any, receive: Any, send: Any) -> None:
        opened.append(scope)

    limited = RateLimitMiddleware(ws_app, RateLimitConfig(
        limiter_on(module_server), routes=[Route("ws", "/ws", TokenBucket(1, 0.01))]))
    for expected_opened in (1, 1):
        sent: list[dict[str, Any]] = []
        inbox = [{"type": "websocket.connect"}]

        async def receive() -> dict[str, Any]:
            return inbox.pop(0)

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))

        scope = {"type": "websocket", "path": "/ws", "headers": [], "client": ("192.0.2.1", 1), "extensions": {}}
        await limited(scope, receive, send)
        assert len(opened) == expected_opened
    assert sent == [{"type": "websocket.close", "code": 1008}]


def test_on_a_cluster_the_route_and_global_limits_share_a_slot(servers: Any, serve: Any) -> None:
    from redis.asyncio.cluster import RedisCluster

    cluster = servers.cluster(module=True)
    host, port = cluster.startup_nodes[0]
    limiter = AsyncLimiter(RedisCluster(host=host, port=port), FailurePolicy.closed(), deadline=1.0)
    app = api_app()
    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter, routes=[Route("api", "/api", API)], global_limit=GLOBAL, trusted_proxies=["127.0.0.0/8"]))
    app.add_middleware(PrincipalFromHeader)
    client = serve(app)
    for user in ("ada", "a}x1", "z" * 300):
        got = [client.get("/api/items", headers={"x-user": user}).status_code for _ in range(4)]
        assert got == [200, 200, 200, 429], user  # decided by Redis: a closed limiter would say 429 at once
    other = client.get("/other", headers={"x-user": "ada"})
    assert other.status_code == 200 and other.headers["ratelimit-remaining"] == "1"


def test_a_starlette_app_and_a_global_limit_per_plan(module_server: Server, serve: Any) -> None:
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route as Path

    async def hello(request: Any) -> PlainTextResponse:
        return PlainTextResponse("hello")

    def plan(caller: Caller) -> TokenBucket:
        return TokenBucket(3, 0.01) if caller.id == "pro" else TokenBucket(1, 0.01)

    config = RateLimitConfig(limiter_on(module_server), global_limit=plan)
    app = Starlette(routes=[Path("/hello", hello)],
                    middleware=[Middleware(PrincipalFromHeader), Middleware(RateLimitMiddleware, config=config)])
    client = serve(app)
    assert [client.get("/hello", headers={"x-user": "pro"}).status_code for _ in range(4)] == [200, 200, 200, 429]
    assert [client.get("/hello", headers={"x-user": "free"}).status_code for _ in range(2)] == [200, 429]
    assert client.get("/hello", headers={"x-user": "free"}).json()["quota"] == 1


def test_a_websocket_holds_its_slot_while_open(module_server: Server, serve: Any) -> None:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    app = FastAPI()

    @app.websocket("/ws")
    async def echo(ws: WebSocket) -> None:
        await ws.accept()
        while True:
            text = await ws.receive_text()
            if text == "bye":
                break
            await ws.send_text(text)
        await ws.close()

    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(
        limiter_on(module_server), concurrency=[Route("ws", "/ws", Concurrency(1, 30.0))]))
    client = serve(app)
    url = str(client.base_url.copy_with(scheme="ws").join("/ws"))
    with connect(url) as first:
        first.send("hi")
        assert first.recv() == "hi"
        with pytest.raises(InvalidStatus) as refused:
            connect(url)
        assert refused.value.response.status_code == 429
        body = json.loads(refused.value.response.body)
        assert (body["type"], body["in_flight_limit"]) == ("urn:redis-ratelimit:concurrency-limited", 1)
        first.send("bye")
    # Closed: the slot is given back when the handler returns (at once, not when the lease ends).
    for _ in range(50):
        try:
            with connect(url) as again:
                again.send("x")
                assert again.recv() == "x"
                again.send("bye")
            break
        except InvalidStatus:
            time.sleep(0.05)
    else:
        pytest.fail("the slot was not given back after the connection closed")


def test_a_route_whose_kind_changes_starts_afresh_and_one_whose_numbers_change_carries_on(
        module_server: Server, serve: Any) -> None:
    """A deploy changes the `api` route from a token bucket to a fixed window (same name, same Redis):
    its key ends with the kind, so the new kind starts on a key of its own instead of meeting the old
    kind's state (before: every caller seen before was decided by the failure policy until the keys
    expired). A change of the numbers alone keeps counting on the same key."""
    def deploy(policy: Any) -> tuple[Any, AsyncLimiter]:
        limiter = limiter_on(module_server, FailurePolicy.closed())
        app = api_app()
        app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(limiter, routes=[Route("api", "/api", policy)]))
        return serve(app), limiter

    before, _ = deploy(TokenBucket(capacity=3, per_second=0.01))
    assert [before.get("/api/items").status_code for _ in range(4)] == [200, 200, 200, 429]
    after, limiter = deploy(FixedWindow(limit=5, window=600))
    served = [after.get("/api/items") for _ in range(6)]
    assert [r.status_code for r in served] == [200] * 5 + [429]
    assert all("x-ratelimit-degraded" not in r.headers for r in served), "Redis decided every one"
    assert served[0].headers["ratelimit-remaining"] == "4", "afresh: the fixed window's own key"
    assert limiter.counts.conflicts == 0
    assert keys(module_server) == ["rl:{ip:127.0.0.1}:api:fixed_window", "rl:{ip:127.0.0.1}:api:token_bucket"]
    more, _ = deploy(TokenBucket(capacity=10, per_second=0.01))  # the first numbers changed, not the kind
    carried = more.get("/api/items")
    assert carried.status_code == 200 and "x-ratelimit-degraded" not in carried.headers
    assert carried.headers["ratelimit-remaining"] == "6", "carried on: the 3 taken before still count"
