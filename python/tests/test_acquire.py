"""Permits (acquire as a context manager), sync and async, on each engine: released on exit and on an
exception (and on cancellation), renewed past their lease while held, `lost` when the lease is gone."""

from __future__ import annotations

import asyncio
import gc

import pytest

from redis_ratelimit import Concurrency, TokenBucket
from redis_ratelimit.permit import AsyncPermit, Permit
from resilience_support import async_on, eventually, on  # noqa: F401
from conftest import EngineCase

ONE = Concurrency(limit=1, lease=30.0)
SHORT = Concurrency(limit=1, lease=0.6)  # renewed every 300 ms


class Boom(Exception):
    pass


def test_released_on_exit_and_on_an_exception(engine: EngineCase) -> None:
    lim = on(engine)
    key = "rl:permit:exit"
    with lim.acquire(key, ONE) as permit:
        assert permit.granted and permit and permit.decision.remaining == 0
        assert not permit.decision.degraded and permit.id and len(permit.id) == 32
        with lim.acquire(key, ONE) as other:
            assert not other.granted and not other
            assert other.decision.retry_after is not None and 0 < other.decision.retry_after <= 30
    with engine.server.client() as r:
        assert r.exists(key) == 0, "the last release deletes the key"
    with pytest.raises(Boom):
        with lim.acquire(key, ONE) as permit:
            assert permit.granted
            raise Boom()
    with lim.acquire(key, ONE) as again:
        assert again.granted, "the permit of the block that raised was released"


def test_weight_and_explicit_release(engine: EngineCase) -> None:
    lim = on(engine)
    pool = Concurrency(limit=5, lease=30.0)
    with lim.acquire("rl:permit:w", pool, weight=3) as heavy:
        assert heavy.decision.remaining == 2
        with lim.acquire("rl:permit:w", pool, weight=3) as denied:
            assert not denied
        assert heavy.release() is True, "released now: it was still held"
        assert heavy.release() is True, "idempotent"
        with lim.acquire("rl:permit:w", pool, weight=5) as whole:
            assert whole.granted
    with pytest.raises(TypeError, match="Concurrency"):
        lim.acquire("rl:permit:w", TokenBucket(capacity=1, per_second=1.0))  # type: ignore[arg-type]


def test_renewed_past_its_lease_while_held(engine: EngineCase) -> None:
    lim = on(engine)
    key = "rl:permit:renew"
    with lim.acquire(key, SHORT) as permit:
        assert permit.granted
        with engine.server.client() as r:
            first = r.pexpiretime(key)
            # Three leases' time: held only because the renewer moves the lease on.
            eventually("the lease to be renewed past its first end and more",
                       lambda: r.pexpiretime(key) > first + 1200)
        with lim.acquire(key, SHORT) as other:
            assert not other.granted, "still held by the renewed permit"
        assert not permit.lost
    with lim.acquire(key, SHORT) as after:
        assert after.granted


def test_lost_when_the_lease_is_gone(engine: EngineCase) -> None:
    lim = on(engine)
    key = "rl:permit:lost"
    with lim.acquire(key, SHORT) as permit:
        assert permit.granted and not permit.lost
        with engine.server.client() as r:
            r.delete(key)
        eventually("the renewer to find the lease gone", lambda: permit.lost)
        assert permit.release() is False, "nothing was held any more"


def test_async_released_on_exit_exception_and_cancellation(engine: EngineCase) -> None:
    async def run() -> None:
        lim = async_on(engine)
        key = "rl:permit:async"
        async with lim.acquire(key, ONE) as permit:
            assert isinstance(permit, AsyncPermit) and permit.granted
            async with lim.acquire(key, ONE) as other:
                assert not other.granted
        with pytest.raises(Boom):
            async with lim.acquire(key, ONE) as permit:
                assert permit.granted
                raise Boom()
        entered = asyncio.Event()

        async def holder() -> None:
            async with lim.acquire(key, ONE) as held:
                assert held.granted
                entered.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(holder())
        await entered.wait()
        async with lim.acquire(key, ONE) as blocked:
            assert not blocked.granted
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with lim.acquire(key, ONE) as again:
            assert again.granted, "the cancelled holder released its slot"

    asyncio.run(run())


def test_async_renewed_and_lost(engine: EngineCase) -> None:
    async def run() -> None:
        lim = async_on(engine)
        r = engine.server.client()
        async with lim.acquire("rl:permit:arenew", SHORT) as permit:
            first = r.pexpiretime("rl:permit:arenew")
            while r.pexpiretime("rl:permit:arenew") <= first + 1200:
                await asyncio.sleep(0.02)
            async with lim.acquire("rl:permit:arenew", SHORT) as other:
                assert not other.granted
            assert not permit.lost
        async with lim.acquire("rl:permit:alost", SHORT) as permit:
            r.delete("rl:permit:alost")
            while not permit.lost:
                await asyncio.sleep(0.02)
            assert await permit.release() is False
        r.close()

    asyncio.run(asyncio.wait_for(run(), 20))


def test_a_sync_permit_is_the_sync_type(engine: EngineCase) -> None:
    permit = on(engine).acquire("rl:permit:t", ONE)
    assert isinstance(permit, Permit)
    with pytest.raises(RuntimeError, match="not entered"):
        permit.decision


def test_acquire_all_takes_leases_and_rate_limits_together(engine: EngineCase) -> None:
    lim = on(engine)
    slots = Concurrency(limit=2, lease=30.0)
    bucket = TokenBucket(capacity=2, per_second=0.001)
    limits = [("rl:{t}:slots", slots, 1), ("rl:{t}:rate", bucket, 1)]
    with lim.acquire_all(limits) as first:
        assert first.granted and first.leases and first.leases[0][0] == "rl:{t}:slots"
        with lim.acquire_all(limits) as second:
            assert second.granted, "two slots, two tokens"
        with lim.acquire_all(limits) as third:
            assert not third.granted and third.decision.limiting == 1, "the bucket is empty"
        with lim.acquire("rl:{t}:slots", slots) as alone:
            assert alone.granted, "the denial took no slot; the second permit gave its back"
    with engine.server.client() as r:
        assert r.exists("rl:{t}:slots") == 0


def test_a_permit_is_entered_once(engine: EngineCase) -> None:
    permit = on(engine).acquire("rl:permit:once", ONE)
    with permit:
        assert permit.granted
    with pytest.raises(RuntimeError, match="entered once"):
        with permit:
            pass


def test_a_permit_dropped_without_release_stops_renewing_and_its_lease_ends(engine: EngineCase) -> None:
    lim = on(engine)
    key = "rl:permit:dropped"
    permit = lim.acquire(key, SHORT)
    assert permit.__enter__().granted  # entered, never exited (a programming error)
    del permit
    gc.collect()
    with engine.server.client() as r:
        eventually("the dropped permit's lease to end by itself", lambda: r.exists(key) == 0)

    async def run() -> None:
        alim = async_on(engine)
        apermit = alim.acquire(key, SHORT)
        assert (await apermit.__aenter__()).granted
        del apermit
        gc.collect()
        r = engine.server.client()
        for _ in range(500):
            if r.exists(key) == 0:
                break
            await asyncio.sleep(0.02)
        assert r.exists(key) == 0, "the dropped async permit's lease ended by itself"
        r.close()

    asyncio.run(run())
