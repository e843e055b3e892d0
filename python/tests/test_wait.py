"""Waiting for capacity (until_ready), on each engine: waiters served in turn by reservation, the
deadline (max_wait) honoured, a cancelled or interrupted waiter refunding its reservation, polling for
the kinds that cannot reserve, and an outage returned at once."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import pytest

from redis_ratelimit import CallError, Decision, FailurePolicy, FixedWindow, TokenBucket
from redis_ratelimit.wait import jittered, next_try
from resilience_support import async_limiter, async_on, limiter, on, stopped_port  # noqa: F401
from conftest import EngineCase
from servers import Server

SLACK = 1.0


def _state(server: Server, key: str) -> bytes | None:
    """The bucket's stored state (its TAT): each reservation moves it."""
    with server.client() as r:
        value: bytes | None = r.get(key)
        return value


def test_waiters_are_served_in_turn(engine: EngineCase) -> None:
    bucket = TokenBucket(capacity=1, per_second=10.0)  # one token per 100 ms
    key = "rl:wait:turn"

    async def run() -> list[tuple[int, Decision]]:
        lim = async_on(engine)
        assert (await lim.check(key, bucket)).allowed
        done: list[tuple[int, Decision]] = []

        async def waiter(i: int) -> None:
            done.append((i, await lim.until_ready(key, bucket, 1, max_wait=5.0)))

        tasks = []
        for i in range(5):
            before = _state(engine.server, key)
            tasks.append(asyncio.create_task(waiter(i)))
            # The next waiter asks only once this one's reservation is in (the bucket's state moved).
            while _state(engine.server, key) == before:
                await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)
        return done

    start = time.monotonic()
    done = asyncio.run(run())
    assert [i for i, _ in done] == [0, 1, 2, 3, 4], "served in the order they asked"
    assert all(d.allowed and d.retry_after == 0 and not d.degraded for _, d in done)
    assert time.monotonic() - start >= 0.5 - 0.01, "five tokens at 10 per second after an empty bucket"


def test_the_deadline_is_honoured(engine: EngineCase) -> None:
    lim = on(engine)
    bucket = TokenBucket(capacity=1, per_second=1.0)
    key = "rl:wait:deadline"
    emptied = time.monotonic()
    assert lim.check(key, bucket).allowed
    start = time.monotonic()
    denied = lim.until_ready(key, bucket, 1, max_wait=0.2)
    assert time.monotonic() - start < 0.2 + SLACK
    assert not denied.allowed and denied.retry_after is not None and denied.retry_after > 0.2
    never = lim.until_ready(key, bucket, 2, max_wait=10.0)
    assert not never.allowed and never.retry_after is None, "never fits: returned at once"
    ready = lim.until_ready(key, bucket, 1, max_wait=2.0)
    assert ready.allowed and ready.retry_after == 0
    assert time.monotonic() - emptied >= 0.99, "it slept until its reservation's time: 1 s after the first"


def test_kinds_that_cannot_reserve_are_polled(engine: EngineCase) -> None:
    lim = on(engine)
    window = FixedWindow(limit=2, window=1.0)
    key = "rl:wait:window"
    assert lim.check(key, window, 2).allowed
    assert not lim.until_ready(key, window, 1, max_wait=0.05).allowed, "the window ends after max_wait"
    ready = lim.until_ready(key, window, 1, max_wait=3.0)
    assert ready.allowed and not ready.degraded


def test_a_cancelled_waiter_refunds_its_reservation(engine: EngineCase) -> None:
    bucket = TokenBucket(capacity=1, per_second=1.0)
    key = "rl:wait:cancel"

    async def run() -> Decision:
        lim = async_on(engine)
        assert (await lim.check(key, bucket)).allowed
        before = _state(engine.server, key)
        task = asyncio.create_task(lim.until_ready(key, bucket, 1, max_wait=5.0))
        while _state(engine.server, key) == before:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Had it kept its place, the next reservation would wait ~2 s (two tokens at 1 per second).
        return Decision.from_reply(await lim.call("RL.RESERVE", [key], [*bucket.params, 1, "5"]))

    nxt = asyncio.run(run())
    assert nxt.allowed and nxt.retry_after is not None and nxt.retry_after <= 1.0


def test_an_interrupted_sync_waiter_refunds_its_reservation(engine: EngineCase) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread")
    lim = on(engine)
    bucket = TokenBucket(capacity=1, per_second=1.0)
    key = "rl:wait:interrupt"
    assert lim.check(key, bucket).allowed

    class Interrupted(Exception):
        pass

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted()

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Interrupted):
            lim.until_ready(key, bucket, 1, max_wait=5.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    nxt = Decision.from_reply(lim.call("RL.RESERVE", [key], [*bucket.params, 1, "5"]))
    assert nxt.allowed and nxt.retry_after is not None and nxt.retry_after <= 1.0


def test_an_outage_is_no_capacity_to_wait_for(stopped_port: Server) -> None:
    bucket = TokenBucket(capacity=1, per_second=1.0)
    for failure, allowed in ((FailurePolicy.open(), True), (FailurePolicy.closed(), False)):
        lim = limiter(stopped_port, failure)
        start = time.monotonic()
        decision = lim.until_ready("rl:wait:down", bucket, 1, max_wait=30.0)
        assert decision.degraded and decision.allowed is allowed
        assert time.monotonic() - start < 0.1 + SLACK


def test_jitter_spreads_waiters() -> None:
    for _ in range(1000):
        assert 1.0 <= jittered(1.0) <= 1.1
        assert 0.002 <= jittered(0.002) <= 0.003
    assert len({jittered(1.0) for _ in range(100)}) > 50
    bucket = TokenBucket(capacity=10, per_second=10.0)  # a refill: 1 s
    assert 0.5 <= next_try(1.5, bucket) <= 0.55, "a bucket is asked again once the wait fits a reservation"
    assert next_try(0.0, FixedWindow(limit=1, window=1.0)) >= 0.001


def test_several_limits_reserve_and_decide_together(engine: EngineCase) -> None:
    lim = on(engine)
    bucket = TokenBucket(capacity=1, per_second=5.0)  # one token per 200 ms
    window = FixedWindow(limit=3, window=60.0)
    limits = [("rl:{w}:bucket", bucket, 1), ("rl:{w}:window", window, 1)]
    decisions = [lim.until_ready_all(limits, max_wait=2.0) for _ in range(3)]
    assert all(d.allowed and not d.degraded for d in decisions), "the bucket's waits are reserved"
    start = time.monotonic()
    denied = lim.until_ready_all(limits, max_wait=2.0)
    assert not denied.allowed and denied.limiting == 1, "the window is full for a minute: no wait helps"
    assert time.monotonic() - start < SLACK
    assert lim.peek("rl:{w}:window", window).remaining == 0


def test_a_waiter_cancelled_while_its_reservation_is_on_the_way_gives_it_back(engine: EngineCase) -> None:
    bucket = TokenBucket(capacity=1, per_second=1.0)
    key = "rl:wait:on-the-way"

    async def run() -> Decision:
        lim = async_on(engine, deadline=10.0)
        assert (await lim.check(key, bucket)).allowed
        engine.server.hang()  # the reservation is sent and waits for its answer
        try:
            task = asyncio.create_task(lim.until_ready(key, bucket, 1, max_wait=5.0))
            await asyncio.sleep(0.2)
            task.cancel()
            await asyncio.sleep(0.05)
        finally:
            engine.server.resume()
        with pytest.raises(asyncio.CancelledError):
            await task
        return Decision.from_reply(await lim.call("RL.RESERVE", [key], [*bucket.params, 1, "5"]))

    nxt = asyncio.run(run())
    assert nxt.allowed and nxt.retry_after is not None and nxt.retry_after <= 1.0


def test_take_within_takes_a_batch_waiting_its_turn_for_the_least(engine: EngineCase) -> None:
    lim = on(engine)
    bucket = TokenBucket(capacity=10, per_second=10.0)
    key = "rl:wait:batch"
    first = lim.take_within(key, bucket, 1, 4, max_wait=1.0)
    assert (first.taken, first.decision.allowed, first.decision.remaining) == (4, True, 6)
    assert lim.take_within(key, bucket, 1, 100, max_wait=1.0).taken == 6, "what the bucket holds"
    emptied = time.monotonic()
    assert lim.take_within(key, bucket, 5, 5, max_wait=0.1).taken == 0, "5 tokens take 0.5 s"
    waited = lim.take_within(key, bucket, 2, 5, max_wait=2.0)
    assert waited.taken == 2 and waited.decision.allowed and waited.decision.retry_after == 0
    assert time.monotonic() - emptied >= 0.19, "it slept until its 2 tokens were due"
    with pytest.raises(ValueError, match="max >= min"):
        lim.take_within(key, bucket, 3, 2)


def test_take_within_under_the_failure_policy(stopped_port: Server) -> None:
    bucket = TokenBucket(capacity=10, per_second=1.0)
    opened = limiter(stopped_port, FailurePolicy.open()).take_within("rl:wait:b", bucket, 1, 7, max_wait=5.0)
    assert opened.decision.degraded and opened.taken == 7
    closed = limiter(stopped_port, FailurePolicy.closed()).take_within("rl:wait:b", bucket, 1, 7, max_wait=5.0)
    assert closed.decision.degraded and closed.taken == 0
    local = limiter(stopped_port, FailurePolicy.fallback(instances=2)).take_within("rl:wait:b", bucket, 1, 7, 5.0)
    assert local.decision.degraded and local.taken == 5, "the in-process share: 10 / 2"


def test_a_cancelled_batch_gives_its_tokens_back(engine: EngineCase) -> None:
    bucket = TokenBucket(capacity=4, per_second=4.0)  # a refill: 1 s
    key = "rl:wait:batch-cancel"

    async def run() -> Decision:
        lim = async_on(engine)
        assert (await lim.check(key, bucket, 4)).allowed
        before = _state(engine.server, key)
        task = asyncio.create_task(lim.take_within(key, bucket, 2, 4, max_wait=5.0))
        while _state(engine.server, key) == before:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Had it kept its 2 tokens, 4 more would wait ~1.5 s: beyond one refill, denied.
        return Decision.from_reply(await lim.call("RL.RESERVE", [key], [*bucket.params, 4, "5"]))

    nxt = asyncio.run(run())
    assert nxt.allowed and nxt.retry_after is not None and nxt.retry_after <= 1.0


def test_take_within_strict_raises_where_take_within_degrades(engine: EngineCase, stopped_port: Server) -> None:
    """As the Rust client's take_within_strict: Redis' grant when it decides (the same batch, turns
    and sleeps as take_within), CallError when it does not; sync and asyncio."""
    bucket = TokenBucket(capacity=10, per_second=10.0)
    lim, alim = on(engine), async_on(engine)
    first = lim.take_within_strict("rl:wait:strict", bucket, 1, 4, max_wait=1.0)
    assert (first.taken, first.decision.allowed, first.decision.degraded) == (4, True, False)
    rest = asyncio.run(alim.take_within_strict("rl:wait:strict", bucket, 1, 100, max_wait=1.0))
    assert rest.taken == 6 and not rest.decision.degraded, "what the bucket holds"
    assert lim.take_within_strict("rl:wait:strict", bucket, 5, 5, max_wait=0.1).taken == 0, "5 tokens take 0.5 s"
    with pytest.raises(CallError):
        limiter(stopped_port, FailurePolicy.open()).take_within_strict("rl:wait:b", bucket, 1, 7, max_wait=5.0)
    with pytest.raises(CallError):
        asyncio.run(async_limiter(stopped_port, FailurePolicy.open()).take_within_strict("rl:wait:b", bucket, 1, 7))
    with pytest.raises(ValueError, match="max >= min"):
        lim.take_within_strict("rl:wait:strict", bucket, 3, 2)
