"""The seed's eight tests worth writing (/work/shared/seeds, "Tests worth writing"), against real
servers with each engine (the module; the Lua library on a stock server): capacity, refill, 200
concurrent requests on two limiter instances, isolation, cost, expiry, the failure policy within the
deadline, and the headers' values (a Decision's seconds; the HTTP headers are test_web_*'s)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from redis_ratelimit import Decision, FailurePolicy, TokenBucket
from resilience_support import async_on, eventually, limiter, on, stopped_port, warm_up  # noqa: F401
from conftest import EngineCase
from servers import Server

SLOW = 0.001  # tokens per second: no refill within a test
SLACK = 1.0  # seconds a degraded decision may take beyond the deadline on a loaded machine


def test_1_capacity(engine: EngineCase) -> None:
    lim = on(engine)
    bucket = TokenBucket(capacity=5, per_second=SLOW)
    decisions = [lim.check("rl:seed:capacity", bucket) for _ in range(6)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    assert [d.remaining for d in decisions] == [4, 3, 2, 1, 0, 0]
    assert not any(d.degraded for d in decisions)


def test_2_refill(engine: EngineCase) -> None:
    lim = on(engine)
    bucket = TokenBucket(capacity=2, per_second=10.0)
    key = "rl:seed:refill"
    assert lim.check(key, bucket).allowed and lim.check(key, bucket).allowed
    denied = lim.check(key, bucket)
    assert not denied.allowed and denied.retry_after is not None and 0 < denied.retry_after <= 0.1
    time.sleep(denied.retry_after)  # rounded up: waiting this long is enough
    assert lim.check(key, bucket).allowed, "one token back after retry_after"
    time.sleep(bucket.period + 0.05)  # a whole refill
    assert lim.check(key, bucket, 0).remaining == 2, "the bucket refills to its capacity, not past it"


def test_3_atomic_200_concurrent_requests_on_two_instances(engine: EngineCase) -> None:
    instances = [on(engine), on(engine)]
    bucket = TokenBucket(capacity=50, per_second=SLOW)
    with ThreadPoolExecutor(max_workers=32) as pool:
        decisions = list(pool.map(lambda i: instances[i % 2].check("rl:seed:atomic", bucket), range(200)))
    assert not any(d.degraded for d in decisions)
    assert sum(d.allowed for d in decisions) == 50


def test_3_atomic_200_concurrent_requests_on_two_async_instances(engine: EngineCase) -> None:
    bucket = TokenBucket(capacity=50, per_second=SLOW)

    async def run() -> list[Decision]:
        # A deadline for 200 calls queued on one loop at once, not for one call.
        instances = [async_on(engine, deadline=10.0) for _ in range(2)]
        checks = (instances[i % 2].check("rl:seed:atomic", bucket) for i in range(200))
        decisions: list[Decision] = await asyncio.gather(*checks)
        return decisions

    decisions = asyncio.run(run())
    assert not any(d.degraded for d in decisions)
    assert sum(d.allowed for d in decisions) == 50


def test_4_isolation(engine: EngineCase) -> None:
    lim = on(engine)
    bucket = TokenBucket(capacity=3, per_second=SLOW)
    for _ in range(4):
        lim.check("rl:seed:isolation:a", bucket)
    assert not lim.check("rl:seed:isolation:a", bucket).allowed
    other = lim.check("rl:seed:isolation:b", bucket)
    assert other.allowed and other.remaining == 2


def test_5_cost(engine: EngineCase) -> None:
    lim = on(engine)
    bucket = TokenBucket(capacity=9, per_second=SLOW)
    key = "rl:seed:cost"
    assert lim.check(key, bucket, 5).remaining == 4
    denied = lim.check(key, bucket, 5)
    assert not denied.allowed and denied.remaining == 4, "denied when only 4 remain"
    assert lim.check(key, bucket, 4).allowed, "and the denial consumed nothing"
    never = lim.check(key, bucket, 10)
    assert not never.allowed and never.retry_after is None and never.never_fits


def test_6_expiry(engine: EngineCase) -> None:
    lim = on(engine)
    bucket = TokenBucket(capacity=3, per_second=20.0)  # full again 150 ms after a request
    key = "rl:seed:expiry"
    lim.check(key, bucket, 2)
    with engine.server.client() as r:
        ttl = r.pttl(key)
        # The key expires on the first whole second at or after the bucket is full (docs/commands.md).
        assert 0 < ttl <= 150 + 1000, "every write leaves a TTL: one refill, to the next second"
        eventually("the idle key to expire", lambda: r.exists(key) == 0)
    assert lim.check(key, bucket).remaining == 2, "the next request sees a full bucket"


def _timed(decide: Any) -> tuple[Decision, float]:
    start = time.monotonic()
    decision = decide()
    return decision, time.monotonic() - start


def test_7_failure_policy_within_the_deadline(stopped_port: Server) -> None:
    bucket = TokenBucket(capacity=5, per_second=1.0)
    for failure, allowed in ((FailurePolicy.open(), True), (FailurePolicy.closed(), False)):
        lim = limiter(stopped_port, failure, deadline=0.1)
        decision, took = _timed(lambda: lim.check("rl:seed:down", bucket))
        assert decision.degraded and decision.allowed is allowed
        assert took < 0.1 + SLACK


def test_7_failure_policy_within_the_deadline_on_a_hung_server(engine: EngineCase) -> None:
    bucket = TokenBucket(capacity=5, per_second=1.0)
    lims = [(on(engine, f, deadline=0.1), f.kind == "open")
            for f in (FailurePolicy.open(), FailurePolicy.closed())]
    warm_up(engine)
    for lim, _ in lims:
        lim.check("rl:seed:hung", bucket)  # connected, the engine chosen (if the machine is fast enough)
    engine.server.hang()
    try:
        for lim, allowed in lims:
            decision, took = _timed(lambda: lim.check("rl:seed:hung", bucket))
            assert decision.degraded and decision.allowed is allowed
            assert took < 0.1 + SLACK
    finally:
        engine.server.resume()


def test_8_headers(engine: EngineCase) -> None:
    lim = on(engine)
    bucket = TokenBucket(capacity=2, per_second=0.5)  # one token per 2 s
    key = "rl:seed:headers"
    ok = lim.check(key, bucket)
    assert ok.allowed and ok.retry_after_secs() is None
    assert (ok.limit, ok.remaining) == (2, 1) and ok.reset_after_secs() == 2
    lim.check(key, bucket)
    denied = lim.check(key, bucket)
    retry = denied.retry_after_secs()
    assert not denied.allowed and isinstance(retry, int) and 1 <= retry <= 2
    assert denied.reset_after_secs() == 4 and denied.remaining == 0
    fast = TokenBucket(capacity=1, per_second=100.0)
    lim.check("rl:seed:headers:fast", fast)
    short = lim.check("rl:seed:headers:fast", fast)
    assert not short.allowed and short.retry_after is not None and short.retry_after < 1
    assert short.retry_after_secs() == 1, "Retry-After is at least 1"
