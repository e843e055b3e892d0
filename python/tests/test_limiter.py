"""Each kind's decisions, atomic multi-limit checks, partial grants, refunds and peeks, on every engine
(the module; the Lua library through AUTO, FCALL and EVALSHA) and through both limiters."""

from __future__ import annotations

import pytest

from conftest import EngineCase, MakeLimiter
from redis_ratelimit import (Concurrency, FailurePolicy, FixedWindow, Limiter, SlidingCounter, SlidingLog,
                             TokenBucket, UsageError)

# Slow enough that nothing refills during a test.
SLOW = TokenBucket(capacity=3, per_second=0.001)


@pytest.mark.parametrize("policy", [SLOW, FixedWindow(3, 600), SlidingCounter(3, 600), SlidingLog(3, 600)],
                         ids=lambda p: p.KIND.name)
def test_each_kind_allows_its_limit_then_denies(engine: EngineCase, make_limiter: MakeLimiter, policy: object) -> None:
    limiter = make_limiter(engine.server, backend=engine.backend)
    decisions = [limiter.check("rl:k", policy) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.remaining for d in decisions] == [2, 1, 0, 0]
    assert {d.limit for d in decisions} == {3}
    assert not any(d.degraded for d in decisions)
    denied = decisions[-1]
    assert denied.retry_after is not None and 0 < denied.retry_after <= 1000
    assert denied.retry_after_secs() is not None and denied.retry_after_secs() >= 1
    assert decisions[0].retry_after == 0 and decisions[0].retry_after_secs() is None
    assert limiter.verify()["engine"] == engine.expected


@pytest.mark.parametrize("policy", [SLOW, FixedWindow(3, 600), SlidingCounter(3, 600)], ids=lambda p: p.KIND.name)
def test_a_cost_above_the_limit_never_fits(engine: EngineCase, make_limiter: MakeLimiter, policy: object) -> None:
    limiter = make_limiter(engine.server, backend=engine.backend)
    never = limiter.check("rl:k", policy, cost=4)
    assert (never.allowed, never.retry_after, never.never_fits) == (False, None, True)
    assert limiter.check("rl:k", policy, cost=3).remaining == 0, "the denial took nothing"


def test_calls_that_cannot_be_built_raise(engine: EngineCase, make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(engine.server, FailurePolicy.open(), backend=engine.backend)
    with pytest.raises(UsageError):
        limiter.check("rl:k", SlidingLog(3, 60), cost=2)
    with pytest.raises(UsageError):
        limiter.check("rl:k", Concurrency(3, 60))
    with pytest.raises(UsageError):
        limiter.check_all([])
    with pytest.raises(UsageError):
        limiter.take("rl:k", FixedWindow(3, 60), 2)
    with pytest.raises(UsageError):
        limiter.refund("rl:k", SlidingLog(3, 60), 1)


def test_check_all_takes_from_every_limit_or_from_none(engine: EngineCase, make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(engine.server, backend=engine.backend)
    route, log, overall = FixedWindow(1, 600), SlidingLog(5, 600), SLOW
    limits = [("rl:{c}:route", route, 1), ("rl:{c}:log", log, 1), ("rl:{c}:all", overall, 1)]
    first = limiter.check_all(limits)
    assert first.allowed and first.remaining == 0 and first.limiting == 0
    second = limiter.check_all(limits)
    assert (second.allowed, second.limiting, second.limit) == (False, 0, 1)
    # The denial took nothing from the others.
    assert limiter.peek("rl:{c}:all", overall).remaining == 2
    assert limiter.peek("rl:{c}:log", log).remaining == 4
    # A denial by a later limit names it.
    buckets = [("rl:{d}:a", TokenBucket(5, 0.001), 1), ("rl:{d}:b", TokenBucket(1, 0.001), 1)]
    assert limiter.check_all(buckets).allowed
    denied = limiter.check_all(buckets)
    assert (denied.allowed, denied.limiting) == (False, 1)
    assert limiter.peek("rl:{d}:a", buckets[0][1]).remaining == 4


def test_take_refund_and_peek(engine: EngineCase, make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(engine.server, backend=engine.backend)
    bucket = TokenBucket(5, 0.001)
    assert not limiter.peek("rl:t", bucket).exists
    first = limiter.take("rl:t", bucket, 3)
    assert (first.taken, first.decision.allowed, first.decision.remaining) == (3, True, 2)
    rest = limiter.take("rl:t", bucket, 5)
    assert (rest.taken, rest.decision.remaining) == (2, 0)
    none = limiter.take("rl:t", bucket, 1)
    assert (none.taken, none.decision.allowed) == (0, False) and none.decision.retry_after
    after = limiter.refund("rl:t", bucket, 2)
    assert (after.allowed, after.remaining) == (True, 2)
    seen = limiter.peek("rl:t", bucket)
    assert (seen.exists, seen.limiter, seen.remaining, seen.retry_after) == (True, "RL.TOKEN", 2, 0)
    assert seen.fields["ttl_ms"] > 0 and "tat_ms" in seen.fields
    assert limiter.peek("rl:t").remaining is None, "without the policy: the state only"
    window = FixedWindow(3, 600)
    limiter.check("rl:w", window, cost=3)
    assert limiter.refund("rl:w", window, 1).remaining == 1
    assert limiter.peek("rl:w", window).fields["count"] == 2


def test_call_is_the_raw_engine_call(engine: EngineCase, make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(engine.server, backend=engine.backend)
    assert limiter.call("RL.FIXED", ["rl:c"], [5, "10", 2]) == [1, 5, 3, 0, 10000]
    assert limiter.call("RL.REFUND", ["rl:c"], ["FIXED", 5, "10", 1])[:3] == [1, 5, 4]
    assert limiter.call("RL.INSPECT", ["rl:none"], []) is None


@pytest.mark.parametrize("options", [{"decode_responses": True}, {"protocol": 3}], ids=["decoded", "resp3"])
def test_clients_that_decode_or_speak_resp3(engine: EngineCase, make_limiter: MakeLimiter,
                                            options: dict[str, object]) -> None:
    limiter = make_limiter(engine.server, backend=engine.backend, client=options)
    assert limiter.check("rl:o", SLOW).remaining == 2
    seen = limiter.peek("rl:o", SLOW)
    assert (seen.limiter, seen.remaining) == ("RL.TOKEN", 2)
    assert limiter.take("rl:o", SLOW, 5).taken == 2
    assert limiter.verify()["engine"] == engine.expected


def test_one_sync_limiter_shared_by_threads(engine: EngineCase) -> None:
    """200 checks from 32 threads through one Limiter (its connections are shared): exactly the
    capacity is allowed, every answer Redis'."""
    from concurrent.futures import ThreadPoolExecutor

    with engine.server.client() as client:
        limiter = Limiter(client, FailurePolicy.closed(), backend=engine.backend, deadline=2.0)
        bucket = TokenBucket(10, 0.001)
        with ThreadPoolExecutor(32) as pool:
            decisions = list(pool.map(lambda _: limiter.check("rl:threads", bucket), range(200)))
    assert sum(d.allowed for d in decisions) == 10
    assert not any(d.degraded for d in decisions)


def test_bytes_keys_are_the_same_keys(engine: EngineCase, make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(engine.server, backend=engine.backend)
    assert limiter.check(b"rl:b", SLOW).remaining == 2
    assert limiter.check("rl:b", SLOW).remaining == 1
