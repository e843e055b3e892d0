"""The failure policies against a hung server (SIGSTOP: connections are accepted, nothing answers) and
a stopped one (nothing listens): every decision degraded and within the deadline (plus slack for a
loaded machine); and the breaker: after its failures no call reaches Redis, then one probe after the
cool-down, then closed again once Redis is back."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import pytest

from redis_ratelimit import Breaker, Concurrency, Decision, FailurePolicy, FixedWindow, SlidingLog, TokenBucket
from resilience_support import async_on, commands_run, eventually, limiter, on, stopped_port, warm_up  # noqa: F401
from conftest import EngineCase
from servers import Server

SLACK = 1.0
DEADLINE = 0.1
BUCKET = TokenBucket(capacity=4, per_second=0.001)

POLICIES: list[tuple[str, Callable[[], FailurePolicy]]] = [
    ("open", FailurePolicy.open),
    ("closed", FailurePolicy.closed),
    ("fallback", lambda: FailurePolicy.fallback(instances=2)),
]


def _timed(decide: Callable[[], Decision]) -> Decision:
    start = time.monotonic()
    decision = decide()
    took = time.monotonic() - start
    assert decision.degraded
    assert took < DEADLINE + SLACK, f"{took:.3f} s for a decision with a deadline of {DEADLINE} s"
    return decision


def _expect(kind: str, decisions: list[Decision]) -> None:
    allowed = [d.allowed for d in decisions]
    if kind == "open":
        assert all(allowed)
    elif kind == "closed":
        assert not any(allowed)
        assert all(d.retry_after_secs() == 1 for d in decisions)
    else:  # half of the 4 on one of two instances, then denied
        assert allowed == [True, True, False, False]


@pytest.mark.parametrize("kind,failure", POLICIES, ids=[p[0] for p in POLICIES])
def test_a_hung_server(engine: EngineCase, kind: str, failure: Callable[[], FailurePolicy]) -> None:
    lim = on(engine, failure(), deadline=DEADLINE, breaker=Breaker(failures=100))
    warm_up(engine)
    lim.check("rl:fail:warm", BUCKET)  # connected, the engine chosen (if the machine is fast enough)
    engine.server.hang()
    try:
        _expect(kind, [_timed(lambda: lim.check("rl:fail:k", BUCKET)) for _ in range(4)])
    finally:
        engine.server.resume()
    eventually("Redis to decide again once it answers", lambda: not lim.check("rl:fail:k2", BUCKET).degraded)


@pytest.mark.parametrize("kind,failure", POLICIES, ids=[p[0] for p in POLICIES])
def test_a_stopped_server(stopped_port: Server, kind: str, failure: Callable[[], FailurePolicy]) -> None:
    lim = limiter(stopped_port, failure(), deadline=DEADLINE, breaker=Breaker(failures=100))
    _expect(kind, [_timed(lambda: lim.check("rl:fail:k", BUCKET)) for _ in range(4)])


@pytest.mark.parametrize("kind,failure", POLICIES, ids=[p[0] for p in POLICIES])
def test_a_hung_server_async(engine: EngineCase, kind: str, failure: Callable[[], FailurePolicy]) -> None:
    warm_up(engine)

    async def run() -> list[Decision]:
        lim = async_on(engine, failure(), deadline=DEADLINE, breaker=Breaker(failures=100))
        await lim.check("rl:fail:warm", BUCKET)
        engine.server.hang()
        decisions = []
        for _ in range(4):
            start = time.monotonic()
            decisions.append(await lim.check("rl:fail:k", BUCKET))
            assert time.monotonic() - start < DEADLINE + SLACK
        return decisions

    try:
        decisions = asyncio.run(run())
    finally:
        engine.server.resume()
    assert all(d.degraded for d in decisions)
    _expect(kind, decisions)


def test_the_fallback_limits_every_kind_and_checks_them_together(stopped_port: Server) -> None:
    lim = limiter(stopped_port, FailurePolicy.fallback(instances=3), deadline=DEADLINE)
    bucket = TokenBucket(capacity=9, per_second=0.001)
    window = FixedWindow(limit=6, window=60.0)
    both = [("rl:fail:route", bucket), ("rl:fail:window", window)]
    decisions = [lim.check_all([(k, p, 1) for k, p in both]) for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False] and all(d.degraded for d in decisions)
    assert (decisions[2].limit, decisions[2].limiting) == (2, 1), "window: 6 / 3 instances"


def test_the_fallback_serves_a_window_and_a_log_as_one_bucket_at_the_share(stopped_port: Server) -> None:
    """A fixed window and a sliding log on a stopped server: each the token bucket of its limit per
    window at the share (4 per 2 s on one of 2 instances: 2 at once, then one a second)."""
    lim = limiter(stopped_port, FailurePolicy.fallback(instances=2), deadline=DEADLINE)
    for key, policy in (("rl:fail:fixed", FixedWindow(limit=4, window=2.0)),
                        ("rl:fail:log", SlidingLog(limit=4, window=2.0))):
        start = time.monotonic()
        burst = [lim.check(key, policy) for _ in range(5)]
        took = time.monotonic() - start
        allowed = sum(d.allowed for d in burst)
        assert 2 <= allowed <= 2 + int(took), f"{allowed} in {took:.3f} s: the share, plus one a second"
        assert all(d.degraded and d.limit == 2 for d in burst)
        denied = next(d for d in burst if not d.allowed)
        assert denied.retry_after is not None and 0 < denied.retry_after <= 1.0
        time.sleep(denied.retry_after)
        assert lim.check(key, policy).allowed, "one back after retry_after"


def test_the_breaker_keeps_calls_away_then_lets_one_probe_through(servers: Any) -> None:
    server: Server = servers.redis(module=True)
    breaker = Breaker(failures=3, cooldown=4.0)
    # A refused connection fails at once: the behaviour deadline keeps the answered calls answered.
    lim = limiter(server, FailurePolicy.open(), breaker=breaker)
    assert not lim.check("rl:fail:b", BUCKET).degraded
    server.stop()
    for _ in range(3):
        assert lim.check("rl:fail:b", BUCKET).degraded
    assert breaker.open and breaker.opened == 1
    server.start()  # back on the same port, within the cool-down
    stats = server.client()
    before = commands_run(stats)
    decisions = [lim.check("rl:fail:b", BUCKET) for _ in range(20)]
    assert all(d.degraded and d.allowed for d in decisions)
    assert breaker.rejected >= 20
    assert commands_run(stats) == before, "while the breaker is open no call reaches Redis"
    while True:  # the cool-down runs out; the first call after it is the probe
        decision = lim.check("rl:fail:b", BUCKET)
        if not decision.degraded:
            break
        time.sleep(0.05)
    assert not breaker.open, "the probe was answered: closed"
    after = commands_run(stats)
    assert after.get("rl.token") == 1, f"one probe, then nothing else yet: {after}"
    assert not lim.check("rl:fail:b", BUCKET).degraded
    assert commands_run(stats).get("rl.token") == 2, "closed: every call goes to Redis again"


def test_the_breaker_opens_on_a_hung_server_and_then_costs_no_deadline(engine: EngineCase) -> None:
    breaker = Breaker(failures=2, cooldown=60.0)
    lim = on(engine, FailurePolicy.closed(), deadline=DEADLINE, breaker=breaker)
    warm_up(engine)
    engine.server.hang()
    try:
        lim.check("rl:fail:h", BUCKET)
        lim.check("rl:fail:h", BUCKET)
        assert breaker.open
        for _ in range(50):
            assert lim.check("rl:fail:h", BUCKET).degraded
        assert breaker.rejected == 50, "none of them waited for the hung server"
    finally:
        engine.server.resume()


def test_permits_under_each_policy_on_a_stopped_server(stopped_port: Server) -> None:
    lease = Concurrency(limit=2, lease=30.0)
    with limiter(stopped_port, FailurePolicy.open(), deadline=DEADLINE).acquire("rl:fail:p", lease) as p:
        assert p.granted and p.decision.degraded
    with limiter(stopped_port, FailurePolicy.closed(), deadline=DEADLINE).acquire("rl:fail:p", lease) as p:
        assert not p.granted and p.decision.degraded
    lim = limiter(stopped_port, FailurePolicy.fallback(instances=2), deadline=DEADLINE)
    with lim.acquire("rl:fail:p", lease) as first:
        assert first.granted and first.decision.degraded
        with lim.acquire("rl:fail:p", lease) as second:
            assert not second.granted, "1 of 2 on one of two instances, held by the first"
    with lim.acquire("rl:fail:p", lease) as third:
        assert third.granted, "the first released its in-process lease on exit"


def test_the_async_breaker_opens_on_a_hung_server_and_then_costs_no_deadline(engine: EngineCase) -> None:
    breaker = Breaker(failures=2, cooldown=60.0)
    warm_up(engine)

    async def run() -> list[Decision]:
        lim = async_on(engine, FailurePolicy.open(), deadline=DEADLINE, breaker=breaker)
        engine.server.hang()
        await lim.check("rl:fail:ah", BUCKET)
        await lim.check("rl:fail:ah", BUCKET)
        assert breaker.open
        return [await lim.check("rl:fail:ah", BUCKET) for _ in range(50)]

    try:
        decisions = asyncio.run(run())
    finally:
        engine.server.resume()
    assert all(d.degraded and d.allowed for d in decisions)
    assert breaker.rejected == 50, "none of them waited for the hung server"
