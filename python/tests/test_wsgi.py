"""The WSGI middleware on a synchronous Limiter, through a real socket (wsgiref's server in a thread)
against a real Redis with the module: routes with methods, the global limit in one atomic call, the
fields on every limited response, the 429 problem body as the ASGI middleware's; what it refuses."""

from __future__ import annotations

import json
import threading
from typing import Any, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import httpx
import pytest
import redis
import redis.asyncio

from redis_ratelimit import AsyncLimiter, Concurrency, FailurePolicy, Limiter, TokenBucket, UsageError
from redis_ratelimit.web import ConfigError, Route
from redis_ratelimit.web.wsgi import RateLimitWSGIMiddleware, SyncRateLimitConfig, check, scope_of_environ
from servers import HOST, LONG_DEADLINE, Server


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    if environ["PATH_INFO"] == "/missing":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"no"]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


class Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def served(module_server: Server) -> Iterator[tuple[httpx.Client, SyncRateLimitConfig]]:
    limiter = Limiter(redis.Redis(host=HOST, port=module_server.port), FailurePolicy.open(), deadline=LONG_DEADLINE)
    config = SyncRateLimitConfig(limiter, routes=[
        Route("login", "/login", TokenBucket(2, 0.01), methods=["POST"]),
        Route("api", "/api", TokenBucket(10, 0.01)),
    ], global_limit=TokenBucket(6, 0.01), structured_headers=True)
    server: WSGIServer = make_server(HOST, 0, RateLimitWSGIMiddleware(app, config), handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=f"http://{HOST}:{server.server_port}", timeout=10) as client:
            yield client, config
    finally:
        server.shutdown()
        server.server_close()


def test_routes_the_global_limit_and_the_fields(served: tuple[httpx.Client, SyncRateLimitConfig]) -> None:
    client, config = served
    first = client.get("/api/items")
    assert first.status_code == 200
    assert (first.headers["ratelimit-limit"], first.headers["ratelimit-remaining"]) == ("6", "5")
    assert first.headers["ratelimit-policy"] == '"all";q=6;w=600', "the tighter limit is described"
    assert client.get("/missing").headers["ratelimit-limit"] == "6", "the app's own 404 carries them"
    posts = [client.post("/login") for _ in range(3)]
    assert [r.status_code for r in posts] == [200, 200, 429]
    denied = posts[2]
    assert denied.headers["content-type"] == "application/problem+json"
    assert denied.headers["retry-after"] == "100"
    assert json.loads(denied.content) == {
        "detail": "rate limit 'login' exceeded: retry in 100 s", "limit": "login", "quota": 2, "remaining": 0,
        "retry_after_seconds": 100, "status": 429, "title": "Too Many Requests",
        "type": "urn:redis-ratelimit:rate-limited"}
    assert config.counts[("login", "login", "denied")] == 1


def test_what_it_refuses(module_server: Server) -> None:
    limiter = Limiter(redis.Redis(host=HOST, port=module_server.port), FailurePolicy.open())
    with pytest.raises(ConfigError, match="concurrency limits are not supported by the WSGI middleware"):
        SyncRateLimitConfig(limiter, concurrency=[Route("x", "/x", Concurrency(2, 10.0))])
    with pytest.raises(ConfigError, match="the WSGI middleware needs a Limiter"):
        SyncRateLimitConfig(AsyncLimiter(redis.asyncio.Redis(port=1), FailurePolicy.open()), global_limit="1/s")


@pytest.mark.parametrize("cost", [1.5, -1, 2**64])
def test_a_route_s_cost_is_taken_as_check_takes_it(module_server: Server, cost: Any) -> None:
    """A cost function giving 1.5 was rounded to 1 (and -1 sent as it is); `check` refuses them: the web
    layer's cost is check's, refused before anything is sent."""
    limiter = Limiter(redis.Redis(host=HOST, port=module_server.port), FailurePolicy.open(), deadline=LONG_DEADLINE)
    config = SyncRateLimitConfig(limiter, routes=[Route("api", "/api", TokenBucket(10, 0.01), cost=lambda scope: cost)])
    environ = {"PATH_INFO": "/api/items", "REQUEST_METHOD": "GET", "REMOTE_ADDR": "192.0.2.1"}
    with pytest.raises(UsageError, match="^ERR invalid cost: "):
        check(config, scope_of_environ(environ))
    assert limiter.counts.usage_errors == 1
    with module_server.client() as r:
        assert r.keys("*") == [], "nothing was sent"
