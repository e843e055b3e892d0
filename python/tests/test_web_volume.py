"""High volume through the web layers (docs/high-volume.md), on a real module server: the ASGI
middleware with batched route and global limits and a limiter with the pre-check (served by uvicorn,
hit by httpx), and Django's limiter made from settings with `RATELIMIT_LOCAL_PRECHECK`."""

from __future__ import annotations

from typing import Any

from django.test import Client, override_settings

import test_django  # noqa: F401  (Django configured, its URLs)
from redis_ratelimit import TokenBucket
from redis_ratelimit.web import RateLimitConfig, RateLimitMiddleware, Route
from redis_ratelimit.web.django import limiter as django_limiter
from servers import Server
from test_volume import limiter_calls
from test_web_asgi import api_app, limiter_on


def test_the_middleware_decides_batched_limits_locally_and_repeats_denials_without_calls(
        module_server: Server, serve: Any) -> None:
    limiter = limiter_on(module_server, local_precheck=True)
    config = RateLimitConfig(limiter, routes=[Route("api", "/api", TokenBucket(40, 0.01, batch=8))],
                             global_limit=TokenBucket(100, 0.01, batch=8))
    client = serve(RateLimitMiddleware(api_app(), config))
    before = limiter_calls(module_server)
    served = [client.get("/api/items") for _ in range(40)]
    assert [r.status_code for r in served] == [200] * 40
    # The fields count the units this instance holds: what one call per request would have said.
    assert [int(r.headers["ratelimit-remaining"]) for r in served] == list(range(39, -1, -1))
    calls = limiter_calls(module_server) - before
    assert calls < 40 and limiter.counts.local >= 40 - calls, (calls, limiter.counts)
    denied = client.get("/api/items")
    assert denied.status_code == 429 and denied.headers["ratelimit-limit"] == "40"
    before = limiter_calls(module_server)
    assert [client.get("/api/items").status_code for _ in range(30)] == [429] * 30
    assert limiter_calls(module_server) == before, "denied again in process until the retry_after"
    assert config.counts[("api", "api", "denied")] == 31


def test_django_s_limiter_takes_the_precheck_from_its_settings(module_server: Server) -> None:
    with override_settings(RATELIMIT_REDIS_URL=module_server.url, RATELIMIT_ROUTES=[("api", "/api", "2/m")],
                           RATELIMIT_LOCAL_PRECHECK=True):
        client = Client()
        assert [client.get("/api/items").status_code for _ in range(3)] == [200, 200, 429]
        before = limiter_calls(module_server)
        assert all(client.get("/api/items").status_code == 429 for _ in range(10))
        assert limiter_calls(module_server) == before
        assert django_limiter().counts.local == 10
    with override_settings(RATELIMIT_REDIS_URL=module_server.url):
        assert django_limiter().volume.denials is None, "off by default"
