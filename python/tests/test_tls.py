"""TLS: the limiters and the `limits` storage (`ratelimits://`) on a redis-server that takes TLS only on its
TLS port, with a certificate the test makes (openssl), on the module and on the library. A client that
does not trust the certificate gets no decision from Redis: the failure policy's, and the strict call
raises."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis
import redis.asyncio
from limits import RateLimitItemPerMinute, strategies
from limits.aio import strategies as async_strategies
from limits.storage import storage_from_string

import redis_ratelimit.contrib.limits  # noqa: F401  (registers the schemes)
from conftest import Servers
from redis_ratelimit import AsyncLimiter, CallError, FailurePolicy, Limiter, TokenBucket
from servers import HOST, Server, aclose, free_port

BUCKET = TokenBucket(5, 0.001)


class TlsServer:
    def __init__(self, server: Server, tls_port: int, ca: Path) -> None:
        self.server, self.tls_port, self.ca = server, tls_port, ca


def certificate(directory: Path) -> Path:
    """A self-signed certificate for 127.0.0.1 (its own CA), in `directory` as cert.pem and key.pem."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(directory / "key.pem"), "-out", str(directory / "cert.pem"),
                    "-subj", f"/CN={HOST}", "-addext", f"subjectAltName=IP:{HOST}"],
                   check=True, capture_output=True)
    return directory / "cert.pem"


@pytest.fixture(params=["module", "lua"])
def tls(request: pytest.FixtureRequest, servers: Servers, tmp_path: Path) -> Iterator[TlsServer]:
    ca = certificate(tmp_path)
    tls_port = free_port()
    server = servers.redis(module=request.param == "module",
                           args=("--tls-port", str(tls_port), "--tls-cert-file", str(ca),
                                 "--tls-key-file", str(tmp_path / "key.pem"), "--tls-ca-cert-file", str(ca),
                                 "--tls-auth-clients", "no"))
    yield TlsServer(server, tls_port, ca)


def engine_of(tls: TlsServer) -> str:
    return "module" if tls.server.module else "functions"


def test_the_sync_limiter_decides_over_tls(tls: TlsServer) -> None:
    client = redis.Redis(host=HOST, port=tls.tls_port, ssl=True, ssl_ca_certs=str(tls.ca))
    limiter = Limiter(client, FailurePolicy.closed(), deadline=2.0)
    assert limiter.verify()["engine"] == engine_of(tls)
    decisions = [limiter.check("rl:tls", BUCKET) for _ in range(6)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    assert not any(d.degraded for d in decisions)
    with tls.server.client() as plain:  # the state is the server's, read on its plain port
        assert plain.exists("rl:tls")
    client.close()


def test_the_async_limiter_decides_over_tls(tls: TlsServer) -> None:
    async def run() -> list[Any]:
        client = redis.asyncio.Redis(host=HOST, port=tls.tls_port, ssl=True, ssl_ca_certs=str(tls.ca))
        limiter = AsyncLimiter(client, FailurePolicy.closed(), deadline=2.0)
        assert (await limiter.verify())["engine"] == engine_of(tls)
        decisions = [await limiter.check("rl:tls", BUCKET) for _ in range(6)]
        await aclose(client)
        return decisions

    decisions = asyncio.run(run())
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    assert not any(d.degraded for d in decisions)


def test_an_untrusted_certificate_is_the_failure_policys(tls: TlsServer) -> None:
    client = redis.Redis(host=HOST, port=tls.tls_port, ssl=True)  # the system's CAs: not this one
    limiter = Limiter(client, FailurePolicy.closed(), deadline=2.0)
    decision = limiter.check("rl:tls", BUCKET)
    assert decision.degraded and not decision.allowed
    with pytest.raises(CallError, match="(?i)certificate"):
        limiter.check_strict("rl:tls", BUCKET)
    with tls.server.client() as plain:
        assert not plain.exists("rl:tls")


def test_the_limits_storage_over_tls(tls: TlsServer) -> None:
    uri = f"ratelimits://{HOST}:{tls.tls_port}/0?ssl_ca_certs={tls.ca}&deadline=2"
    limiter = strategies.FixedWindowRateLimiter(storage_from_string(uri))
    item = RateLimitItemPerMinute(3)
    assert [limiter.hit(item, "ada") for _ in range(4)] == [True, True, True, False]

    async def run() -> list[bool]:
        storage = storage_from_string(f"async+{uri}")
        moving = async_strategies.MovingWindowRateLimiter(storage)
        return [await moving.hit(item, "bob") for _ in range(4)]

    assert asyncio.run(run()) == [True, True, True, False]
    with tls.server.client() as plain:
        assert len(plain.keys("LIMITS:*")) == 2
