"""A Rust service and a Python service limit one caller in one bucket: the Rust demo service
(`client/examples/server.rs`: `GET /api/...` 10 per client at 5/s, 100 per client over all routes at
20/s, `/health` and `/admin/` skipped, structured fields) and a Python ASGI app configured the same,
on one module-enabled Redis. A caller's requests spread over both are counted once.

The Rust service keys by IP only, so principals with braces (escaped) and long ones (hashed) are
checked through its admin endpoint, which reads `rl:{<caller>}:api:token_bucket` with RL.INSPECT: the bucket the
Python service charged is where the Rust layer's own key derivation puts it.

The bucket refills at 5/s while the test runs: a count of allowed requests is held to 10 plus what
can have refilled in the time measured around them (exactly 10 when they take under 200 ms)."""

from __future__ import annotations

import hashlib
import math
import time
from typing import Callable, Iterator, Sequence
from urllib.parse import quote

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from redis_ratelimit import AsyncLimiter, FailurePolicy, TokenBucket
from redis_ratelimit.web import Caller, RateLimitConfig, RateLimitMiddleware, Route
from servers import HOST, LONG_DEADLINE, Server, rust_server_path
from web_serve import PrincipalFromHeader, RustService, Served

RATE = 5.0  # the Rust service's api route: 10 at 5/s


@pytest.fixture
def rust(module_server: Server) -> Iterator[RustService]:
    if not rust_server_path().is_file():
        pytest.skip(f"the Rust demo service is not built: {rust_server_path()} (cargo build --release "
                    "--examples, or set RL_RUST_SERVER)")
    service = RustService(module_server.url, trusted_proxies="127.0.0.0/8").start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def python(module_server: Server) -> Iterator[Served]:
    """The Python twin of the Rust service."""
    app = FastAPI()

    @app.get("/api/{rest:path}")
    async def api(rest: str) -> str:
        return "ok\n"

    @app.get("/health")
    async def health() -> str:
        return "ok\n"

    limiter = AsyncLimiter(aioredis.Redis(host=HOST, port=module_server.port), FailurePolicy.open(), name="app",
                           deadline=LONG_DEADLINE)
    config = RateLimitConfig(limiter, routes=[Route("api", "/api", TokenBucket(10, 5.0))],
                             global_limit=TokenBucket(100, 20.0), skip=["/health", "/admin/"],
                             trusted_proxies=["127.0.0.0/8"], structured_headers=True)
    served = Served(PrincipalFromHeader(RateLimitMiddleware(app, config))).start()
    try:
        yield served
    finally:
        served.stop()


def spread(calls: Sequence[Callable[[], httpx.Response]]) -> tuple[list[httpx.Response], float]:
    start = time.monotonic()
    responses = [call() for call in calls]
    return responses, time.monotonic() - start


def refilled(elapsed: float) -> int:
    return math.ceil(elapsed * RATE)


def keys(server: Server, pattern: str = "*") -> list[str]:
    with server.client() as r:
        return sorted(k.decode() for k in r.keys(pattern))


def test_one_caller_by_ip_over_both_services_is_counted_once(rust: RustService, python: Served,
                                                              module_server: Server) -> None:
    with httpx.Client(timeout=10) as http:
        xff = {"x-forwarded-for": "203.0.113.50"}
        calls = []
        for _ in range(10):
            calls.append(lambda: http.get(f"{rust.url}/api/items", headers=xff))
            calls.append(lambda: http.get(f"{python.url}/api/items", headers=xff))
        responses, elapsed = spread(calls)
    allowed = [r for r in responses if r.status_code == 200]
    assert 10 <= len(allowed) <= 10 + refilled(elapsed), (len(allowed), elapsed)
    assert {r.url.port for r in allowed} == {rust.port, python.port}, "both served some"
    assert keys(module_server) == ["rl:{ip:203.0.113.50}:all:token_bucket", "rl:{ip:203.0.113.50}:api:token_bucket"]
    # The same fields from both, and the same 429 body, byte for byte.
    for r in allowed:
        assert r.headers["ratelimit-policy"] == '"api";q=10;w=2'
        assert r.headers["ratelimit-limit"] == "10"
    denied_rust = [r for r in responses if r.status_code == 429 and r.url.port == rust.port]
    denied_python = [r for r in responses if r.status_code == 429 and r.url.port == python.port]
    assert denied_rust and denied_python
    assert denied_rust[-1].content == denied_python[-1].content
    assert denied_rust[-1].headers["content-type"] == denied_python[-1].headers["content-type"]
    assert denied_rust[-1].headers["retry-after"] == denied_python[-1].headers["retry-after"] == "1"


def test_one_ipv6_network_and_both_forwarding_headers_over_both_services(rust: RustService, python: Served,
                                                                         module_server: Server) -> None:
    with httpx.Client(timeout=10) as http:
        calls: list[Callable[[], httpx.Response]] = []
        for i in range(8):
            xff = {"x-forwarded-for": f"2001:db8:1:2::{i + 1:x}"}
            fwd = {"forwarded": f'for="[2001:db8:1:2:ffff::{i + 1:x}]:443"'}
            calls.append(lambda xff=xff: http.get(f"{rust.url}/api/x", headers=xff))  # type: ignore[misc]
            calls.append(lambda fwd=fwd: http.get(f"{python.url}/api/y", headers=fwd))  # type: ignore[misc]
        responses, elapsed = spread(calls)
    allowed = sum(r.status_code == 200 for r in responses)
    assert 10 <= allowed <= 10 + refilled(elapsed), (allowed, elapsed)
    assert keys(module_server) == ["rl:{ip:2001:db8:1:2::}:all:token_bucket",
                                     "rl:{ip:2001:db8:1:2::}:api:token_bucket"]


@pytest.mark.parametrize("principal", ["a}b{c%", "p" * 200, "é}" * 50])
def test_escaped_and_hashed_principals_are_where_the_rust_layer_looks(rust: RustService, python: Served,
                                                                     module_server: Server, principal: str) -> None:
    part = Caller.principal(principal).key_part()
    assert ".esc:" in part or ".sha256:" in part
    if "{" in principal:
        assert part == "user.esc:a%7Db%7Bc%25"
    elif principal.startswith("p"):
        assert part == "user.sha256:" + hashlib.sha256(principal.encode()).hexdigest()
    report_url = f"{rust.url}/admin/ratelimit/{quote(part, safe='')}"
    with httpx.Client(timeout=10) as http:
        before = http.get(report_url).json()
        assert before["key"] == f"rl:{{{part}}}:api:token_bucket" and before["remaining"] is None, "no bucket yet"
        start = time.monotonic()
        statuses = [http.get(f"{python.url}/api/items", headers={b"x-user": principal.encode()}).status_code for _ in range(4)]
        after = http.get(report_url).json()
        elapsed = time.monotonic() - start
    assert statuses == [200] * 4
    assert keys(module_server, "rl:{user*") == [f"rl:{{{part}}}:all:token_bucket", f"rl:{{{part}}}:api:token_bucket"]
    # The Rust service reads the bucket the Python service charged: 4 of 10 taken.
    assert after["remaining"] is not None and 6 <= after["remaining"] <= min(10, 6 + refilled(elapsed))


HOSTILE: list[list[tuple[str, bytes]]] = [
    [("x-forwarded-for", b"203.0.113.7:8080")],
    [("x-forwarded-for", b"[2001:db8::1]:443")],
    [("x-forwarded-for", b"fe80::1%eth0")],
    [("x-forwarded-for", b"::ffff:203.0.113.9")],
    [("x-forwarded-for", b"203.0.113.9, ::ffff:127.0.0.5")],
    [("x-forwarded-for", b"203.0.113.9, [::1%2]:80")],
    [("x-forwarded-for", b"\xff, 203.0.113.11")],
    [("x-forwarded-for", b"203.0.113.12, \xff")],
    [("x-forwarded-for", b"203.0.113.13,")],
    [("x-forwarded-for", b"unknown")],
    [("x-forwarded-for", b"1.2.3.4, 300.1.1.1")],
    [("x-forwarded-for", b"2001:DB8:0:0:1:0:0:1")],
    [("x-forwarded-for", b"2001:db8:0:0:0:0:0:1, 127.0.0.9")],
    [("x-forwarded-for", b"::1.2.3.4")],
    [("x-forwarded-for", b"198.51.100.1"), ("x-forwarded-for", b"198.51.100.2, 127.0.0.3")],
    [("forwarded", b'for=198.51.100.1, FOR="[fe80::2%25eth0]:80";proto=https')],
    [("forwarded", b"for=_hidden"), ("x-forwarded-for", b"203.0.113.1")],
    [("forwarded", b"by=127.0.0.1;for=192.0.2.77, for=127.0.0.2")],
    [("forwarded", b'for="192.0.2.78:8080"')],
    [("x-forwarded-for", b"192.0.2.1:http")],
    [("x-forwarded-for", b"[2001:db8::1]x")],
    [("x-forwarded-for", b"192.168.001.1")],
]


@pytest.mark.parametrize("headers", HOSTILE, ids=[repr(h)[:60] for h in HOSTILE])
def test_both_services_read_a_forwarding_header_as_the_same_caller(rust: RustService, python: Served,
                                                                   module_server: Server,
                                                                   headers: list[tuple[str, bytes]]) -> None:
    charged = []
    with httpx.Client(timeout=10) as http:
        for url in (rust.url, python.url):
            with module_server.client() as r:
                r.flushall()
            raw = [(name.encode(), value) for name, value in headers]
            assert http.get(f"{url}/api/items", headers=raw).status_code == 200
            charged.append(keys(module_server))
    assert charged[0] == charged[1]
    assert len(charged[0]) == 2, charged  # the route's key and the global one, of one caller


def test_both_services_send_the_same_fields_off_the_routes(rust: RustService, python: Served) -> None:
    fields = ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-policy", "ratelimit")
    with httpx.Client(timeout=10) as http:
        seen = []
        for url, who in ((rust.url, "198.51.100.70"), (python.url, "198.51.100.71")):
            unrouted = http.get(f"{url}/nowhere", headers={"x-forwarded-for": who})
            health = http.get(f"{url}/health", headers={"x-forwarded-for": who})
            assert unrouted.status_code == 404 and health.status_code == 200
            assert not any(f in health.headers for f in fields)
            seen.append({f: unrouted.headers.get(f) for f in fields})
    assert seen[0] == seen[1] == {
        "ratelimit-limit": "100",
        "ratelimit-remaining": "99",
        "ratelimit-reset": "1",
        "ratelimit-policy": '"all";q=100;w=5',
        "ratelimit": '"all";r=99;t=1',
    }
