"""High volume on real servers (docs/high-volume.md): batched units shared by several limiter instances
(each its own connections) never admit beyond the limit and hold at most ``batch - 1`` units each; a
limiter closed gives its units back, one dropped loses at most ``batch - 1``; the pre-check spares the
round trips of a denied caller and never denies past the retry_after Redis gave; a hot key's calls per
decision fall while a quiet key keeps one call per check. On the module and on the Lua library (a
stock server), through Limiter and AsyncLimiter. Redis' side is read with RL.INSPECT (a peek) and
INFO commandstats."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from conftest import MakeLimiter, Servers
from redis_ratelimit import AsyncLimiter, FailurePolicy, FixedWindow, Limiter, TokenBucket
from redis_ratelimit.volume import AHEAD
from servers import HOST, LONG_DEADLINE, Server, aclose

# Nothing refills during a test (a token per 1,000 s).
SLOW = 0.001
ON = [pytest.param(True, id="module"), pytest.param(False, id="library")]


def limiter_calls(server: Server) -> int:
    """The calls of the limiter's commands the server ran: the module's RL.*, the library's FCALL
    and EVALSHA (INFO commandstats)."""
    with server.client() as r:
        stats: dict[str, Any] = r.info("commandstats")
    return sum(int(v["calls"]) for name, v in stats.items()
               if name.startswith("cmdstat_rl.") or name in ("cmdstat_fcall", "cmdstat_evalsha"))


def remaining(limiter: Any, key: str, policy: TokenBucket) -> int:
    """What Redis has left for `key` (a peek: RL.INSPECT), the capacity when the key does not exist."""
    seen = limiter.peek(key, policy)
    return policy.capacity if seen.remaining is None else int(seen.remaining)


def close(limiter: Any) -> int:
    """`close()`, or an AsyncLimiter's `aclose()` (through conftest's `Blocking`): the units given back."""
    given: int = (getattr(limiter, "aclose", None) or limiter.close)()
    return given


@pytest.mark.parametrize("module", ON)
def test_threads_of_instances_sharing_a_key_never_admit_beyond_the_limit(servers: Servers, module: bool) -> None:
    server = servers.redis(module=module)
    policy = TokenBucket(300, SLOW, batch=16)
    limiters = [Limiter(redis.Redis(host=HOST, port=server.port), FailurePolicy.closed(), deadline=LONG_DEADLINE)
                for _ in range(4)]
    admitted = [0] * len(limiters)

    def app(i: int) -> None:
        for _ in range(150):
            d = limiters[i].check("rl:{hot}:k", policy)
            assert not d.degraded
            admitted[i] += d.allowed

    threads = [threading.Thread(target=app, args=(i,)) for i in range(len(limiters)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = [lim.volume.batches.held("rl:{hot}:k", policy) for lim in limiters]
    assert sum(admitted) <= 300
    assert all(h <= 16 - 1 for h in held), held  # the idle bound: instances x (batch - 1)
    # Every unit Redis granted is admitted or held here: none counted twice, none lost.
    assert remaining(limiters[0], "rl:{hot}:k", policy) == 300 - sum(admitted) - sum(held)
    assert sum(lim.counts.local for lim in limiters) > 0
    for lim in limiters:
        lim.close()
    assert remaining(limiters[0], "rl:{hot}:k", policy) == 300 - sum(admitted)


@pytest.mark.parametrize("module", ON)
async def test_tasks_of_async_instances_sharing_a_key_never_admit_beyond_the_limit(
        servers: Servers, module: bool) -> None:
    server = servers.redis(module=module)
    policy = TokenBucket(300, SLOW, batch=16)
    clients = [aioredis.Redis(host=HOST, port=server.port) for _ in range(3)]
    limiters = [AsyncLimiter(c, FailurePolicy.closed(), deadline=LONG_DEADLINE) for c in clients]
    admitted = 0

    async def app(limiter: AsyncLimiter) -> None:
        nonlocal admitted
        for _ in range(50):
            d = await limiter.check("rl:{hot}:k", policy)
            assert not d.degraded
            admitted += d.allowed

    await asyncio.gather(*[app(lim) for lim in limiters for _ in range(8)])
    held = [lim.volume.batches.held("rl:{hot}:k", policy) for lim in limiters]
    assert admitted <= 300 and all(h <= 16 - 1 for h in held), (admitted, held)
    assert await_remaining(await limiters[0].peek("rl:{hot}:k", policy), policy) == 300 - admitted - sum(held)
    for lim in limiters:
        await lim.aclose()
    assert await_remaining(await limiters[0].peek("rl:{hot}:k", policy), policy) == 300 - admitted
    for c in clients:
        await aclose(c)


def await_remaining(seen: Any, policy: TokenBucket) -> int:
    return policy.capacity if seen.remaining is None else int(seen.remaining)


@pytest.mark.parametrize("module", ON)
def test_a_limiter_closed_gives_its_units_back_and_one_dropped_loses_at_most_batch_minus_1(
        servers: Servers, make_limiter: MakeLimiter, module: bool) -> None:
    server = servers.redis(module=module)
    policy = TokenBucket(100, SLOW, batch=8)
    closing, dropped = make_limiter(server), make_limiter(server)
    for _ in range(12):
        assert closing.check("rl:k", policy).allowed
    held = closing.volume.batches.held("rl:k", policy)
    assert held > 0
    assert remaining(closing, "rl:k", policy) == 100 - 12 - held
    assert close(closing) == held
    assert remaining(closing, "rl:k", policy) == 100 - 12, "every held unit given back"
    for _ in range(12):
        assert dropped.check("rl:k", policy).allowed
    lost = dropped.volume.batches.held("rl:k", policy)
    del dropped  # never closed: its units stay taken
    assert 0 < lost <= 8 - 1
    assert remaining(closing, "rl:k", policy) == 100 - 24 - lost


def test_a_window_s_units_go_back_on_close(module_server: Server, make_limiter: MakeLimiter) -> None:
    policy = FixedWindow(50, 600, batch=8)
    limiter = make_limiter(module_server)
    for _ in range(10):
        assert limiter.check("rl:w", policy).allowed
    held = limiter.volume.batches.held("rl:w", policy)
    assert held > 0 and limiter.peek("rl:w", policy).remaining == 50 - 10 - held
    assert close(limiter) == held
    assert limiter.peek("rl:w", policy).remaining == 50 - 10


@pytest.mark.parametrize("module", ON)
def test_the_precheck_spares_a_denied_caller_s_round_trips(
        servers: Servers, make_limiter: MakeLimiter, module: bool) -> None:
    server = servers.redis(module=module)
    limiter = make_limiter(server, local_precheck=True)
    policy = TokenBucket(2, 0.01)  # a token per 100 s: the denial lasts the whole test
    assert limiter.check("rl:k", policy, 2).allowed
    before = limiter_calls(server)
    decisions = [limiter.check("rl:k", policy) for _ in range(200)]
    assert not any(d.allowed for d in decisions)
    assert limiter_calls(server) - before == 1, "one denial from Redis, then none asked"
    assert sum(d.local for d in decisions) == 199 and limiter.counts.local == 199
    assert decisions[-1].retry_after is not None and decisions[-1].retry_after <= decisions[0].retry_after


@pytest.mark.parametrize("module", ON)
def test_the_precheck_never_denies_past_the_retry_after_redis_gave(
        servers: Servers, make_limiter: MakeLimiter, module: bool) -> None:
    server = servers.redis(module=module)
    limiter = make_limiter(server, local_precheck=True)
    policy = TokenBucket(1, 5.0)  # a token per 200 ms
    assert limiter.check("rl:k", policy).allowed
    denied = limiter.check("rl:k", policy)
    assert not denied.allowed and denied.retry_after is not None
    time.sleep(denied.retry_after)
    before = limiter_calls(server)
    after = limiter.check("rl:k", policy)
    assert after.allowed and not after.local, "past its retry_after the request went to Redis"
    assert limiter_calls(server) == before + 1


@pytest.mark.parametrize("module", ON)
def test_a_hot_key_s_calls_per_decision_fall_and_a_quiet_key_keeps_one_call_per_check(
        servers: Servers, make_limiter: MakeLimiter, module: bool) -> None:
    server = servers.redis(module=module)
    limiter = make_limiter(server)
    hot = TokenBucket(10_000, SLOW, batch=16)
    limiter.check("rl:warm", TokenBucket(1, 1.0), 0)  # the library loaded, the engine chosen
    before = limiter_calls(server)
    assert all(limiter.check("rl:hot", hot).allowed for _ in range(1000))
    calls = limiter_calls(server) - before
    # Batches grow to 16, then are taken ahead when a quarter is left: batch - batch / AHEAD at a time.
    assert calls <= 1000 / (16 - 16 // AHEAD) + math.log2(16) + 3, calls
    quiet = TokenBucket(10_000, SLOW, batch=16, lease=0.01)
    before = limiter_calls(server)
    for _ in range(10):
        assert limiter.check("rl:quiet", quiet).allowed
        time.sleep(0.02)  # longer than its lease: each check finds the key cool
    assert limiter_calls(server) - before == 10
    assert limiter.volume.batches.held("rl:quiet", quiet) == 0


def test_an_outage_leaves_the_failure_policy_deciding_and_the_units_held(module_server: Server,
                                                                         make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(module_server, FailurePolicy.closed(), deadline=0.5)
    policy = TokenBucket(100, SLOW, batch=8)
    for _ in range(8):
        limiter.check("rl:k", policy)
    held = limiter.volume.batches.held("rl:k", policy)
    module_server.hang()
    try:
        local = [limiter.check("rl:k", policy) for _ in range(held)]
        assert all(d.allowed and d.local and not d.degraded for d in local), "units held are spent"
        degraded = limiter.check("rl:k", policy)
        assert degraded.degraded and not degraded.allowed, "then the failure policy decides"
    finally:
        module_server.resume()
