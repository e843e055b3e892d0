"""Django: the middleware (routes, methods, a global limit, keys by ip / user / header) and the per-view
decorator, configured from Django settings, through Django's test client against a real Redis with the
module; the same fields and 429 body as the ASGI middleware."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import httpx
import pytest

from servers import LONG_DEADLINE
from test_web_readme import QuickStart, command_args

django = pytest.importorskip("django")
from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(
        DEBUG=False, SECRET_KEY="test", ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__, INSTALLED_APPS=[],
        MIDDLEWARE=[f"{__name__}.fake_auth", "redis_ratelimit.web.django.RateLimitMiddleware"],
        RATELIMIT_DEADLINE=LONG_DEADLINE,  # behaviour, not the deadline: a loaded machine is slow
    )
    django.setup()

from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.urls import path  # noqa: E402

from redis_ratelimit.web.config import ConfigError  # noqa: E402
from redis_ratelimit.web.django import parse_django_rate, ratelimit  # noqa: E402
from redis_ratelimit import SlidingCounter  # noqa: E402
from servers import Server  # noqa: E402


def fake_auth(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """An authentication middleware's stand-in: `X-User: <pk>` is an authenticated user."""
    def middleware(request: HttpRequest) -> HttpResponse:
        pk = request.headers.get("X-User")
        request.user = SimpleNamespace(is_authenticated=pk is not None, pk=pk)
        return get_response(request)
    return middleware


def page(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="2/m", key="ip", group="search")
def search(request: HttpRequest) -> HttpResponse:
    return HttpResponse("found")


@ratelimit(rate="1/m", method="POST", block=False, group="vote")
def vote(request: HttpRequest) -> HttpResponse:
    return HttpResponse("limited" if request.limited else "counted")  # type: ignore[attr-defined]


urlpatterns = [path("login/", page), path("api/items", page), path("other", page), path("search", search),
               path("vote", vote)]


def test_the_middleware_from_settings(module_server: Server) -> None:
    with override_settings(RATELIMIT_REDIS_URL=module_server.url, RATELIMIT_STRUCTURED_HEADERS=True,
                           RATELIMIT_ROUTES=[("login", "/login/", "2/m", ["POST"]),
                                             {"name": "api", "prefix": "/api", "rate": "5 per 15 minutes"}]):
        client = Client()
        assert all(client.get("/login/").status_code == 200 for _ in range(3)), "GETs are not the POST route's"
        posts = [client.post("/login/") for _ in range(3)]
        assert [r.status_code for r in posts] == [200, 200, 429]
        assert posts[0]["RateLimit-Limit"] == "2" and posts[0]["RateLimit-Policy"] == '"login";q=2;w=60'
        denied = posts[2]
        retry = int(denied["Retry-After"])  # the sliding counter's windows are aligned to the epoch
        assert denied["Content-Type"] == "application/problem+json" and 1 <= retry <= 120
        assert json.loads(denied.content) == {
            "detail": f"rate limit 'login' exceeded: retry in {retry} s", "limit": "login", "quota": 2,
            "remaining": 0, "retry_after_seconds": retry, "status": 429, "title": "Too Many Requests",
            "type": "urn:redis-ratelimit:rate-limited"}
        assert client.get("/api/items")["RateLimit-Policy"] == '"api";q=5;w=900'
        assert "RateLimit-Limit" not in client.get("/other"), "a path under no route is not limited"
        keys = sorted(k.decode() for k in module_server.client().keys("rl:*"))
        assert keys == ["rl:{ip:127.0.0.1}:api:sliding_counter", "rl:{ip:127.0.0.1}:login:sliding_counter"]


@pytest.mark.parametrize("key,expected", [("user", "rl:{user:42}:all:sliding_counter"),
                                          ("header:X-API-Key", None)])
def test_keys_by_user_and_header(module_server: Server, key: str, expected: str | None) -> None:
    with override_settings(RATELIMIT_REDIS_URL=module_server.url, RATELIMIT_GLOBAL="100/m", RATELIMIT_KEY=key):
        client = Client()
        assert client.get("/other", HTTP_X_USER="42", HTTP_X_API_KEY="k1")["RateLimit-Remaining"] == "99"
        assert client.get("/other")["RateLimit-Remaining"] == "99", "no user / no header: the IP's own key"
        keys = {k.decode() for k in module_server.client().keys("rl:*")}
        assert "rl:{ip:127.0.0.1}:all:sliding_counter" in keys and len(keys) == 2
        if expected:
            assert expected in keys


def test_the_decorator(module_server: Server) -> None:
    with override_settings(RATELIMIT_REDIS_URL=module_server.url, RATELIMIT_ROUTES=[]):
        client = Client()  # no routes, no global: the middleware steps aside (MiddlewareNotUsed)
        got = [client.get("/search") for _ in range(3)]
        assert [r.status_code for r in got] == [200, 200, 429]
        assert got[0]["RateLimit-Limit"] == "2" and got[1]["RateLimit-Remaining"] == "0"
        assert json.loads(got[2].content)["limit"] == "search"
        assert [client.post("/vote").content for _ in range(2)] == [b"counted", b"limited"]
        assert client.get("/vote").content == b"counted", "a GET is not counted (method='POST')"


def test_a_closed_limiter_with_redis_gone(servers: Any) -> None:
    server = servers.redis(module=False)
    server.stop()
    with override_settings(RATELIMIT_REDIS_URL=server.url, RATELIMIT_GLOBAL="100/m"):
        denied = Client().get("/other")
        assert denied.status_code == 429
        assert json.loads(denied.content)["type"] == "urn:redis-ratelimit:unavailable"


def test_rates() -> None:
    assert parse_django_rate("5/m") == SlidingCounter(5, 60)
    assert parse_django_rate("10/5m") == SlidingCounter(10, 300)
    assert parse_django_rate("3/s") == parse_django_rate("3/") == SlidingCounter(3, 1)
    assert parse_django_rate("100 per day") == SlidingCounter(100, 86400)


@pytest.mark.parametrize("arguments, mistake", [
    ({"rate": "5/m", "key": "bogus"}, "ratelimit(key=...)"),
    ({"rate": "5/m", "key": "header:"}, "names a header"),
    ({"rate": None}, "policy must be"),
    ({"rate": "five a minute"}, "not a rate"),
    ({"rate": "5/m", "method": []}, "methods must be"),
])
def test_the_decorator_checks_its_arguments_when_applied(arguments: dict[str, Any], mistake: str) -> None:
    """A mistake is a ConfigError at import (decoration) time, not a 500 at the view's first request."""
    with pytest.raises(ConfigError, match=re.escape(mistake)):
        @ratelimit(**arguments)
        def view(request: HttpRequest) -> HttpResponse:
            return HttpResponse("ok")


def test_the_decorator_refuses_an_async_view_when_applied() -> None:
    with pytest.raises(ConfigError, match="async def view"):
        @ratelimit(rate="5/m")
        async def view(request: HttpRequest) -> HttpResponse:
            return HttpResponse("ok")


def readme_django_settings() -> dict[str, Any]:
    """The RATELIMIT_* settings of the README's Django example, as written."""
    block = (Path(__file__).resolve().parents[1] / "README.md").read_text().split("# settings.py\n", 1)[1]
    found: dict[str, Any] = {}
    for line in block.split("```", 1)[0].splitlines():
        if line.startswith("RATELIMIT_"):
            exec(line, {}, found)
    assert {"RATELIMIT_ROUTES", "RATELIMIT_GLOBAL"} <= set(found)
    return found


def test_the_readme_s_asgi_quick_start_and_django_example_share_one_redis(module_server: Server,
                                                                         tmp_path: Path) -> None:
    """Both name a limit `api` and have a global one, of other kinds (token buckets there, sliding
    counters here): on one Redis, for one caller, each keeps its own keys (before: one key, and the
    second to write met the first's state, answered by the failure policy)."""
    settings_of_readme = {**readme_django_settings(), "RATELIMIT_REDIS_URL": module_server.url}
    served = QuickStart(module_server.url, tmp_path, command_args())
    try:
        served.health()
        with httpx.Client(base_url=served.url, timeout=10) as http, override_settings(**settings_of_readme):
            django_client = Client()
            for _ in range(3):
                asgi, django = http.get("/api/items"), django_client.get("/api/items")
                assert asgi.status_code == 200 and "x-ratelimit-degraded" not in asgi.headers
                assert django.status_code == 200 and not django.has_header("X-RateLimit-Degraded")
            assert (asgi.headers["ratelimit-limit"], django["RateLimit-Limit"]) == ("10", "100")
        with module_server.client() as r:
            assert {"rl:{ip:127.0.0.1}:api:token_bucket", "rl:{ip:127.0.0.1}:api:sliding_counter",
                    "rl:{ip:127.0.0.1}:all:token_bucket", "rl:{ip:127.0.0.1}:all:sliding_counter"} <= {
                k.decode() for k in r.keys("rl:*")}
    finally:
        served.stop()
