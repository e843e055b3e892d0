"""Token-budget holds (RL.HOLD / RL.SETTLE) through `Limiter.hold` and `AsyncLimiter.hold`, on real
servers: the module, and the Lua library (FCALL, EVALSHA on a stock server) once it has the functions.
Every test body runs on both limiters: the async one through `Blocked` (its `async with`, awaited)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import re
import subprocess
import sys
import time
from typing import Any, Iterator

import pytest
import redis.asyncio

from conftest import Lines, Servers
from redis_ratelimit import (AsyncLimiter, Backend, Concurrency, FailurePolicy, FixedWindow, Limiter, SlidingCounter,
                             SlidingLog, TokenBucket, UsageError)
from redis_ratelimit.contract import HOLDS, hold_call, hold_error
from redis_ratelimit.engine import Call, library, module_command
from redis_ratelimit.hold import SETTLE_TRIES, Hold, ledger_of
from redis_ratelimit.request_steps import Request
from servers import HOST, LONG_DEADLINE, REPO, Server, aclose

TPM = FixedWindow(limit=100, window=60)
KEY = "rl:{key:42}:tpm"
LEDGER = ledger_of(KEY)


def hold_key(ledger: str, id: str) -> str:
    """Where the module records a hold: the contract's ``hold_key`` (``{ledger}:{id}: what it is``)."""
    return str(HOLDS["hold_key"]).split(": ", 1)[0].format(ledger=ledger, id=id)

ENGINES = [pytest.param((True, Backend.MODULE), id="module")]
if "rl_hold" in library():  # the library's functions, once written
    ENGINES += [pytest.param((False, Backend.FUNCTIONS), id="fcall"),
                pytest.param((False, Backend.SCRIPTS), id="evalsha")]


class Blocked:
    """An AsyncHold used like a Hold: entered with its ``async with`` (or awaited), each method run to
    its end on the loop."""

    def __init__(self, holding: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._holding = holding
        self._loop = loop
        self._hold = loop.run_until_complete(holding.__aenter__())

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._hold, name)
        if not inspect.iscoroutinefunction(member):
            return member
        return lambda *args, **kwargs: self._loop.run_until_complete(member(*args, **kwargs))

    def __bool__(self) -> bool:
        return bool(self._hold)

    def __enter__(self) -> Blocked:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.run_until_complete(self._holding.__aexit__(*exc))


class Holds:
    """`hold(...)` on a Limiter or an AsyncLimiter (through `Blocked`); `peek` and `r` on the server."""

    def __init__(self, server: Server, mode: str, failure: FailurePolicy, backend: Backend) -> None:
        self.server = server
        self.r = server.client()
        self.loop = asyncio.new_event_loop()
        settings: dict[str, Any] = {"deadline": LONG_DEADLINE, "backend": backend}
        self.sync = Limiter(server.client(), failure, **settings)
        self.aio = None
        if mode == "async":
            self.aio = AsyncLimiter(redis.asyncio.Redis(host=HOST, port=server.port), failure, **settings)

    def hold(self, limits: Any, **kwargs: Any) -> Any:
        if self.aio is None:
            return self.sync.hold(limits, **kwargs)
        return Blocked(self.aio.hold(limits, **kwargs), self.loop)

    def remaining(self, key: str = KEY, policy: Any = TPM) -> int:
        left = self.sync.peek(key, policy).remaining
        assert left is not None
        return left

    def close(self) -> None:
        if self.aio is not None:
            self.loop.run_until_complete(aclose(self.aio.client))
        self.loop.close()


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=ENGINES)
def holds(request: pytest.FixtureRequest, servers: Servers, mode: str) -> Iterator[Holds]:
    module, backend = request.param
    made = Holds(servers.redis(module=module), mode, FailurePolicy.closed(), backend)
    yield made
    made.close()


def test_allowed_hold_then_a_denied_one_that_writes_nothing(holds: Holds) -> None:
    h = holds.hold([(KEY, TPM, 60)])
    assert h and h.allowed and not h.local and h.decision.remaining == 40 and h.keys == [KEY]
    assert holds.r.exists(KEY, hold_key(LEDGER, h.id)) == 2, "the limit and the hold's own key"
    denied = holds.hold([(KEY, TPM, 50)])
    assert not denied and denied.decision.retry_after is not None and denied.decision.retry_after > 0
    assert holds.remaining() == 40, "a denied hold takes nothing"
    assert denied.settle(10) is None and denied.cancel() is None, "a denied hold has nothing to settle"
    fresh = "rl:{key:7}:tpm"
    denied = holds.hold([(fresh, TPM, 150)], abandon=HOLDS["abandon"][1])
    assert not denied, "more than the limit"
    assert holds.r.exists(fresh, ledger_of(fresh), hold_key(ledger_of(fresh), denied.id)) == 0, \
        "a denial writes no key, no hold and no ledger"


def test_settle_returns_the_unused_units_once(holds: Holds) -> None:
    h = holds.hold([(KEY, TPM, 60)], id="req-1")
    first = h.settle(20)
    assert first is not None and first.allowed
    assert holds.remaining() == 80, "40 of the 60 held went back"
    assert h.settle(20) == first, "a repeated settle replies as the first"
    assert h.settle(5) == first and holds.remaining() == 80, "and changes nothing"
    again = holds.hold([(KEY, TPM, 60)], id="req-1")
    assert again.allowed and holds.remaining() == 80, "a retried hold of a settled id takes nothing"


def test_a_retried_hold_takes_once(holds: Holds) -> None:
    first = holds.hold([(KEY, TPM, 30)], id="req-2")
    second = holds.hold([(KEY, TPM, 30)], id="req-2")
    assert first.decision == second.decision and holds.remaining() == 70


def test_add_says_stop_past_the_hold_when_the_limit_is_spent(holds: Holds) -> None:
    other = holds.hold([(KEY, TPM, 40)])
    h = holds.hold([(KEY, TPM, 50)])
    assert h.add(30) is False and holds.remaining() == 10, "usage within the hold charges nothing more"
    assert h.add(55) is False and holds.remaining() == 5, "the excess is charged as it comes"
    assert h.add(70) is True, "past the hold, nothing left: stop"
    assert other.cancel() is not None


def test_leaving_the_block_unsettled_applies_the_abandon_policy(holds: Holds) -> None:
    """Leaving the block without a settle applies the hold's abandon policy now (a FINAL): CHARGE keeps
    max(estimate, usage reported), RETURN gives back what the usage did not use; an explicit cancel
    still gives everything back, and the exit after a settle sends nothing more."""
    returns = HOLDS["abandon"][1]
    # (1) CHARGE (the default), no settle, no usage: the estimate stays charged, and the hold is ended.
    with holds.hold([(KEY, TPM, 60)]) as h:
        assert h and holds.remaining() == 40
    assert holds.remaining() == 40, "the estimate stays charged"
    assert h.settled is not None, "ended by a FINAL"
    assert h.cancel() == h.settled and holds.remaining() == 40, "a later cancel meets the settled hold"
    # An exception leaves it the same way.
    with pytest.raises(KeyError):
        with holds.hold([(KEY, TPM, 10)]) as h:
            raise KeyError("the block failed")
    assert holds.remaining() == 30, "an exception keeps the estimate charged too"
    holds.sync.refund(KEY, TPM, 70)
    # (2) CHARGE, usage past the estimate: the usage is charged; below it, the estimate stays.
    with holds.hold([(KEY, TPM, 60)]) as h:
        h.add(75)
    assert holds.remaining() == 25, "charged the usage reported (75 > 60)"
    holds.sync.refund(KEY, TPM, 75)
    with holds.hold([(KEY, TPM, 60)]) as h:
        h.add(30)
    assert holds.remaining() == 40, "charged the estimate (60 > the 30 reported): billing-safe"
    holds.sync.refund(KEY, TPM, 60)
    # (3) RETURN, add(30) of 100: the 70 unused come back; with no usage, everything.
    with holds.hold([(KEY, TPM, 100)], abandon=returns) as h:
        assert h.returns and h.add(30) is False
    assert holds.remaining() == 70, "the 70 unused came back"
    holds.sync.refund(KEY, TPM, 30)
    with holds.hold([(KEY, TPM, 100)], abandon=returns) as h:
        assert holds.remaining() == 0
    assert holds.remaining() == 100, "RETURN with no usage reported: everything back"
    # (4) An explicit cancel (a CHARGE hold, usage reported) still gives everything back.
    with holds.hold([(KEY, TPM, 60)]) as h:
        h.add(30)
        assert h.cancel() is not None
    assert holds.remaining() == 100, "cancelled: everything back, the exit sent nothing more"
    with holds.hold([(KEY, TPM, 60)]) as h:
        h.settle(60)
    assert holds.remaining() == 40, "settled in the block: the exit sends nothing more"


def test_a_cancelled_task_applies_the_abandon_policy(servers: Servers) -> None:
    """A task cancelled inside ``async with`` (a client gone): the shielded exit still applies the
    policy: CHARGE keeps the estimate, RETURN gives back what the usage did not use."""
    server = servers.redis(module=True)

    async def run() -> None:
        client = redis.asyncio.Redis(host=HOST, port=server.port)
        limiter = AsyncLimiter(client, FailurePolicy.closed(), deadline=LONG_DEADLINE)
        try:
            for key, abandon, left in (("rl:{c}:charge", None, 40), ("rl:{c}:return", HOLDS["abandon"][1], 70)):
                inside = asyncio.Event()

                async def call() -> None:
                    async with limiter.hold([(key, TPM, 60)], abandon=abandon) as h:
                        assert h and await h.add(30) is False
                        inside.set()
                        await asyncio.Event().wait()  # the model, until the task is cancelled

                task = asyncio.create_task(call())
                await inside.wait()
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert (await limiter.peek(key, TPM)).remaining == left, abandon
        finally:
            await aclose(client)

    asyncio.run(run())


def test_input_exact_and_output_held(holds: Holds) -> None:
    """Prompt tokens charged exactly up front, the completion's max_tokens held, a request counted."""
    prompt, completion, rpm = "rl:{key:42}:in", "rl:{key:42}:out", "rl:{key:42}:rpm"
    tin, tout, rq = FixedWindow(limit=1000, window=60), TokenBucket(capacity=500, per_second=1.0), \
        SlidingCounter(limit=10, window=60)
    h = holds.hold([(completion, tout, 400)], exact=[(prompt, tin, 300), (rpm, rq, 1)])
    assert h.allowed and h.keys == [completion]
    assert h.settle(100) is not None
    assert holds.remaining(prompt, tin) == 700, "the prompt stays charged exactly"
    assert holds.remaining(completion, tout) in (400, 401), "300 of the 400 held went back"
    assert holds.remaining(rpm, rq) == 9
    with pytest.raises(UsageError, match=hold_error("key")):
        h.settle({prompt: 10})


def test_per_key_settle_and_a_sliding_log_checked_not_held(holds: Holds) -> None:
    a, b, log_key = "rl:{t}:a", "rl:{t}:b", "rl:{t}:log"
    h = holds.hold([(a, TPM, 50), (b, TPM, 50), (log_key, SlidingLog(limit=5, window=60), 1)])
    assert h.allowed and h.keys == [a, b] and h.ledger == ledger_of(a)
    assert h.settle({a: 10}) is not None
    assert holds.remaining(a) == 90 and holds.remaining(b) == 50, "a key not named stays charged as held"


def test_a_settle_that_meets_an_outage_is_given_up(servers: Servers, mode: str, lines: Lines) -> None:
    holds = Holds(servers.redis(module=True), mode, FailurePolicy.closed(), Backend.MODULE)
    try:
        with holds.hold([(KEY, TPM, 60)]) as h:
            assert h.allowed
            holds.server.stop()
            assert h.settle(10) is None, "given up, not raised"
        given_up = [m for m in lines.messages() if "given up" in m]
        assert len(given_up) == 1, "logged once; the block's exit sends nothing more"
        assert f"sent {SETTLE_TRIES} times" in given_up[0]
    finally:
        holds.close()


def test_redis_down_at_hold_time_the_failure_policy_decides(servers: Servers, mode: str) -> None:
    server = servers.redis(module=True)
    server.stop()
    for failure, allowed in ((FailurePolicy.open(), True), (FailurePolicy.closed(), False)):
        holds = Holds(server, mode, failure, Backend.MODULE)
        try:
            with holds.hold([(KEY, TPM, 60)]) as h:
                assert h.local and h.decision.degraded and h.allowed is allowed
                assert h.add(10) is False and h.settle(10) is None, "a local hold settles nothing"
        finally:
            holds.close()


def test_the_callers_mistakes_are_raised(holds: Holds) -> None:
    for bad in (0, 0.0004, HOLDS["max_ttl_secs"] + 1):
        with pytest.raises(UsageError, match=hold_error("ttl")):
            holds.hold([(KEY, TPM, 1)], ttl=bad)
    with pytest.raises(UsageError, match=hold_error("id")):
        holds.hold([(KEY, TPM, 1)], id="x" * (HOLDS["max_id_bytes"] + 1))
    with pytest.raises(UsageError):
        holds.hold([(KEY, TPM, 1)], abandon="KEEP")
    with pytest.raises(UsageError) as untagged:
        holds.hold([(KEY, TPM, 1)], ledger="rl:holds:plain")
    assert untagged.value.message == hold_error("ledger", "hash tag")
    with pytest.raises(UsageError, match="permit"):
        holds.hold([(KEY, Concurrency(limit=1, lease=5.0), 1)])
    h = holds.hold([(KEY, TPM, 1)])
    with pytest.raises(UsageError, match=hold_error("key")):
        h.settle({"rl:{key:42}:other": 1})
    assert holds.r.exists(KEY) == 1 and h.cancel() is not None


def test_abandon_return_gives_back_when_the_ttl_ends_and_charge_keeps(holds: Holds) -> None:
    h = holds.hold([(KEY, TPM, 60)], ttl=0.2, abandon=HOLDS["abandon"][1])
    assert h.allowed and h.add(10) is False
    kept = holds.hold([("rl:{key:42}:other", TPM, 60)], ttl=0.2)
    assert kept.allowed and kept.abandon == HOLDS["abandon_default"]
    time.sleep(0.5)  # both have ended; the next call on the ledger finds the one to return
    holds.hold([(KEY, TPM, 0)])
    assert holds.remaining() == 90, "its unused units back, the usage reported kept"
    assert holds.remaining("rl:{key:42}:other") == 40, "an abandoned CHARGE hold stays charged"


def test_async_with_and_await(servers: Servers) -> None:
    """``async with limiter.hold(...)`` and ``hold = await limiter.hold(...)``, as written in code."""
    server = servers.redis(module=True)

    async def run() -> None:
        client = redis.asyncio.Redis(host=HOST, port=server.port)
        limiter = AsyncLimiter(client, FailurePolicy.closed(), deadline=LONG_DEADLINE)
        try:
            async with limiter.hold([(KEY, TPM, 60)]) as h:
                assert h.allowed and await h.add(30) is False
            assert (await limiter.peek(KEY, TPM)).remaining == 40, "left unsettled: the estimate stays charged"
            h = await limiter.hold([(KEY, TPM, 30)])
            assert (await limiter.peek(KEY, TPM)).remaining == 10
            assert await h.settle(0) is not None
            assert (await limiter.peek(KEY, TPM)).remaining == 40
        finally:
            await aclose(client)

    asyncio.run(run())


def test_the_ledger_is_named_by_the_contract() -> None:
    assert ledger_of("rl:{user:1}:tpm") == str(HOLDS["ledger"]).format(tag="user:1")
    assert ledger_of("rl:user:1") == str(HOLDS["ledger"]).format(tag="rl:user:1")
    assert ledger_of("rl:{}:x") == str(HOLDS["ledger"]).format(tag="rl:{}:x"), "an empty tag: the whole key"


def test_a_hold_logs_nothing_when_all_goes_well(holds: Holds, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="redis_ratelimit"):
        with holds.hold([(KEY, TPM, 60)]) as h:
            h.add(10)
            h.settle(20)
    assert not caplog.records


def test_the_readme_example_prints_what_it_says(servers: Servers) -> None:
    text = (REPO / "python/README.md").read_text()
    found = re.search(r"<!-- token-budgets -->\n```python\n(.*?)```", text, re.S)
    assert found, "the README's hold example is marked <!-- token-budgets -->"
    server = servers.redis(module=True)
    ran = subprocess.run([sys.executable, "-c", found.group(1)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "REDIS_URL": server.url})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["200", "98588"]
    assert "# 200" in found.group(1) and "# 98588" in found.group(1)


def test_the_commands_round_trip_through_the_library_form_and_call(holds: Holds) -> None:
    """RL.HOLD / RL.SETTLE split into keys and arguments (FCALL's form) and put back (`call`'s)."""
    hold = Hold(holds.sync, [(KEY, TPM, 5), ("rl:{key:42}:b", SlidingCounter(limit=9, window=60), 2)],
                [("rl:{key:42}:c", TokenBucket(capacity=4, per_second=1.0), 1)], "id-1", 30.0, None, None)
    settle = [*hold_call("settle", ledger=LEDGER, id="id-1", mode=HOLDS["modes"][0]), KEY, 3, "rl:{key:42}:b", 1]
    for cmd in (hold.plan.cmd, settle):
        split = Call.of(cmd)
        assert split is not None and split.keys[0] == LEDGER
        assert module_command(str(cmd[0]), split.keys, split.args) == cmd
        request = Request.of(cmd)
        holds.sync.call(request.command, request.keys, request.args)  # the module takes it as it is
    assert holds.remaining() == 97, "held 5, settled at 3"
