"""The deadline holds for the whole call, connecting included: against a hung server (SIGSTOP: the
kernel accepts the connection, nothing answers) and a stopped one, a check comes back as the failure
policy's degraded decision and a strict check raises the cause. The time bound is generous: a hung
server without the deadline would block forever."""

from __future__ import annotations

import time

import pytest

from conftest import MakeLimiter
from redis_ratelimit import DeadlineError, FailurePolicy, TokenBucket, UnreachableError
from servers import Server

BUCKET = TokenBucket(3, 1.0)
GENEROUS = 3.0  # seconds: far above the deadlines (0.25 s), far below "forever"


@pytest.mark.parametrize("connected", [True, False], ids=["connected", "connecting"])
def test_a_hung_server_costs_one_deadline(stock_server: Server, make_limiter: MakeLimiter, connected: bool) -> None:
    forever = {"socket_timeout": None, "socket_connect_timeout": None}
    strict = make_limiter(stock_server, client=forever, deadline=0.25)
    lenient = make_limiter(stock_server, FailurePolicy.open(), client=forever, deadline=0.25)
    if connected:
        assert strict.check("rl:h", BUCKET).allowed and lenient.check("rl:h", BUCKET).allowed
    stock_server.hang()
    started = time.monotonic()
    with pytest.raises(DeadlineError):
        strict.check_strict("rl:h", BUCKET)
    decision = lenient.check("rl:h", BUCKET)
    assert time.monotonic() - started < GENEROUS
    assert decision.allowed and decision.degraded
    stock_server.resume()
    assert not strict.check("rl:h", BUCKET).degraded, "the next call reconnects"


def test_a_stopped_server_is_unreachable(stock_server: Server, make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(stock_server, FailurePolicy.closed(), deadline=0.25)
    assert limiter.check("rl:s", BUCKET).allowed
    stock_server.stop()
    with pytest.raises((UnreachableError, DeadlineError)):
        limiter.check_strict("rl:s", BUCKET)
    denied = limiter.check("rl:s", BUCKET)
    assert (denied.allowed, denied.degraded) == (False, True)
    stock_server.start()
    assert not limiter.check("rl:s", BUCKET).degraded
