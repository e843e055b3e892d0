"""What the limiters do with each class of answer (docs/errors.md), against real servers, on the sync and
the asyncio limiter: a conflicting key is decided by the failure policy, logged once per key with the key
and counted, and never opens the breaker; a misconfiguration is logged at error level once per cause,
flagged and counted, and never opens the breaker; the caller's mistakes (a missing or empty key, a key
twice, a cost that is no whole number in bounds, keys in several cluster slots) raise UsageError before
anything is sent, and an argument Redis refuses raises it too: never a degraded decision, never the
breaker, never an outage in the log."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from conftest import EngineCase, Lines, MakeLimiter, Servers
from redis_ratelimit import (Breaker, ConflictError, FailurePolicy, FixedWindow, SlidingCounter, TokenBucket,
                             UsageError)
from redis_ratelimit.contract import BOUNDS, ERRORS
from redis_ratelimit.reply_class import ReplyClass, behaviour
from servers import Server

BUCKET = TokenBucket(capacity=10, per_second=0.01)
WINDOW = FixedWindow(limit=10, window=60)


def errors_logged(lines: Lines) -> list[logging.LogRecord]:
    return [r for r in lines.records if r.levelno >= logging.ERROR]


def outages_logged(lines: Lines) -> list[str]:
    return [m for m in lines.messages() if "Redis did not decide" in m or "circuit breaker open" in m]


def test_a_key_of_another_kind_is_a_conflict_logged_once_with_the_key_and_counted(
        engine: EngineCase, make_limiter: MakeLimiter, lines: Lines) -> None:
    limiter = make_limiter(engine.server, FailurePolicy.open(), backend=engine.backend, breaker=Breaker(failures=2))
    assert limiter.check("rl:{user:42}:api", BUCKET).remaining == 9
    for _ in range(6):  # the limit's kind changed under the same key
        decision = limiter.check("rl:{user:42}:api", WINDOW)
        assert decision.allowed and decision.degraded, "the failure policy decides, visibly"
    assert limiter.counts.conflicts == 6
    [line] = errors_logged(lines)
    assert "rl:{user:42}:api" in line.getMessage() and "conflict" in line.getMessage()
    assert "del" in line.getMessage(), "it says how to recover"
    assert not limiter.breaker.open and limiter.breaker.opened == 0, "Redis answers: no outage"
    assert outages_logged(lines) == [] and not limiter.misconfigured
    assert not limiter.check("rl:{user:42}:api", BUCKET).degraded, "the key's own kind is still decided"
    limiter.check("rl:{user:7}:api", BUCKET)
    limiter.check("rl:{user:7}:api", WINDOW)
    assert len(errors_logged(lines)) == 2, "another key: its own line"


def test_a_key_of_another_type_is_a_conflict(module_server: Server, make_limiter: MakeLimiter, lines: Lines) -> None:
    limiter = make_limiter(module_server, FailurePolicy.closed())
    with module_server.client() as r:
        r.lpush("rl:plain", "an item")
    decision = limiter.check("rl:plain", BUCKET)
    assert not decision.allowed and decision.degraded
    assert limiter.counts.conflicts == 1 and "rl:plain" in errors_logged(lines)[0].getMessage()
    with pytest.raises(ConflictError) as raised:
        limiter.check_strict("rl:plain", BUCKET)
    assert raised.value.code == "WRONGTYPE"


def test_a_refused_user_is_misconfigured_logged_once_and_never_opens_the_breaker(
        module_server: Server, make_limiter: MakeLimiter, lines: Lines) -> None:
    with module_server.client() as r:
        r.execute_command("ACL", "SETUSER", "nothing", "on", ">pw", "~rl:*", "+ping", "+hello", "+client")
    limiter = make_limiter(module_server, FailurePolicy.open(), breaker=Breaker(failures=2),
                           client={"username": "nothing", "password": "pw"})
    for _ in range(6):
        decision = limiter.check("rl:x", BUCKET)
        assert decision.allowed and decision.degraded
    assert limiter.misconfigured and limiter.counts.misconfigured == 6
    assert limiter.breaker.opened == 0, "waiting does not fix an ACL: the breaker stays closed"
    [line] = errors_logged(lines)
    assert "misconfigured" in line.getMessage() and "ACL SETUSER" in line.getMessage()
    assert outages_logged(lines) == []
    with module_server.client() as r:
        r.execute_command("ACL", "SETUSER", "nothing", "+@all")
    assert not limiter.check("rl:x", BUCKET).degraded and not limiter.misconfigured


def test_a_key_outside_the_user_s_key_patterns_is_misconfigured_and_leaves_the_engine_unknown(
        module_server: Server, make_limiter: MakeLimiter, lines: Lines) -> None:
    """The command exists and the user may run it, but not on this key (a key-level NOPERM): the
    engine must not move to the library, and the line says to fix the key patterns."""
    with module_server.client() as r:
        r.execute_command("ACL", "SETUSER", "keyless", "on", ">pw", "~other:*", "+@all")
    limiter = make_limiter(module_server, FailurePolicy.open(), client={"username": "keyless", "password": "pw"})
    decision = limiter.check("rl:x", BUCKET)
    assert decision.allowed and decision.degraded and limiter.misconfigured
    assert str(limiter.engine) == "not yet known", "an error reply to the module's command settles nothing"
    [line] = errors_logged(lines)
    assert "key patterns" in line.getMessage() and "~rl:*" in line.getMessage()
    with module_server.client() as r:
        r.execute_command("ACL", "SETUSER", "keyless", "~rl:*")
    assert not limiter.check("rl:x", BUCKET).degraded and not limiter.misconfigured
    assert str(limiter.engine) == "the ratelimit module"


@pytest.mark.parametrize("key", [None, ""])
def test_a_missing_or_empty_key_raises_before_sending_and_never_opens_the_breaker(
        module_server: Server, make_limiter: MakeLimiter, lines: Lines, key: Any) -> None:
    limiter = make_limiter(module_server, FailurePolicy.open(), breaker=Breaker(failures=5))
    for _ in range(6):
        with pytest.raises(UsageError) as raised:
            limiter.check(key, BUCKET)
        expected = UsageError.of_reply(ERRORS["render"]["empty_key"])
        assert (raised.value.code, raised.value.message) == (expected.code, expected.message)
        assert isinstance(raised.value, ValueError)
    assert limiter.counts.usage_errors == 6
    assert limiter.breaker.opened == 0 and outages_logged(lines) == []
    assert not limiter.check("rl:after", BUCKET).degraded, "the next valid call is decided by Redis"
    assert calls(module_server, "rl.token") == 1, "nothing was sent for the refused ones"


def calls(server: Server, command: str) -> int:
    """How many times the server ran `command` (INFO commandstats)."""
    with server.client() as r:
        stats = r.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


@pytest.mark.parametrize("cost, text", [
    (1.5, ERRORS["format"].format(field="cost", expected="must be a whole number >= 0")),
    (-1, ERRORS["format"].format(field="cost", expected="must be a whole number >= 0")),
    (True, ERRORS["format"].format(field="cost", expected="must be a whole number >= 0")),
    (BOUNDS["max_whole"] + 1, ERRORS["format"].format(field="cost", expected=ERRORS["too_large"])),
])
def test_a_cost_that_is_no_whole_number_in_bounds_is_refused_with_the_module_s_text(
        module_server: Server, make_limiter: MakeLimiter, cost: Any, text: str) -> None:
    limiter = make_limiter(module_server, FailurePolicy.open())
    with pytest.raises(UsageError) as raised:
        limiter.check("rl:cost", BUCKET, cost)
    assert (raised.value.code, raised.value.message) == ("ERR", text)
    assert calls(module_server, "rl.token") == 0
    assert limiter.check("rl:cost", BUCKET, BOUNDS["max_whole"]).allowed is False, "the bound itself is sent"


def test_a_key_twice_in_one_call_is_refused_with_the_module_s_reply(
        module_server: Server, make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(module_server, FailurePolicy.open())
    with pytest.raises(UsageError) as raised:
        limiter.check_all([("rl:twice", BUCKET, 1), ("rl:twice", BUCKET, 1)])
    assert (raised.value.code, raised.value.message) == ("ERR", ERRORS["duplicate_key"])
    assert calls(module_server, "rl.token") == 0
    with module_server.client() as r:  # the module's own reply, word for word
        with pytest.raises(Exception) as direct:
            r.execute_command("RL.TOKEN", "rl:twice", 10, "0.01", 1, "rl:twice", 10, "0.01", 1)
    assert f"ERR {direct.value}" == ERRORS["duplicate_key"]


def test_keys_in_several_slots_are_refused_on_a_cluster_client(servers: Servers, make_limiter: MakeLimiter) -> None:
    cluster = servers.cluster(module=True)
    limiter = make_limiter(cluster, FailurePolicy.open())
    with pytest.raises(UsageError) as raised:
        limiter.check_all([("rl:{a}:api", BUCKET, 1), ("rl:{b}:api", BUCKET, 1)])
    assert (raised.value.code, raised.value.message) == ("CROSSSLOT", ERRORS["render"]["cross_slot"])
    assert limiter.counts.usage_errors == 1
    assert not limiter.check_all([("rl:{a}:api", BUCKET, 1), ("rl:{a}:login", BUCKET, 1)]).degraded


def test_an_argument_redis_refuses_raises_usage_error_and_is_no_outage(
        engine: EngineCase, make_limiter: MakeLimiter, lines: Lines) -> None:
    """Past every check here, Redis' own refusal of an argument (a limit of 0) is the caller's too."""
    limiter = make_limiter(engine.server, FailurePolicy.open(), backend=engine.backend, breaker=Breaker(failures=1))
    for _ in range(3):
        with pytest.raises(UsageError) as raised:
            limiter.call("RL.FIXED", ["rl:raw"], [0, 60, 1])
        assert raised.value.code == "ERR" and "invalid limit" in raised.value.message
    assert limiter.counts.usage_errors == 3 and limiter.breaker.opened == 0 and outages_logged(lines) == []


def test_sliding_counter_conflict_on_the_library_is_counted(stock_server: Server, make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(stock_server, FailurePolicy.closed())
    assert limiter.check("rl:k", SlidingCounter(limit=5, window=60)).allowed
    decision = limiter.check("rl:k", BUCKET)
    assert decision.degraded and not decision.allowed and limiter.counts.conflicts == 1


class Clock:
    """A breaker's clock that moves only when told (the cool-down is waited for without sleeping)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _conflict(server: Server, make_limiter: MakeLimiter, breaker: Breaker) -> Any:
    with server.client() as r:
        r.lpush("rl:plain", "an item")
    limiter = make_limiter(server, FailurePolicy.open(), breaker=breaker)
    return limiter, lambda: limiter.check("rl:plain", BUCKET).degraded


def _misconfigured(server: Server, make_limiter: MakeLimiter, breaker: Breaker) -> Any:
    with server.client() as r:
        r.execute_command("ACL", "SETUSER", "nothing", "on", ">pw", "~rl:*", "+ping", "+hello", "+client")
    limiter = make_limiter(server, FailurePolicy.open(), breaker=breaker,
                           client={"username": "nothing", "password": "pw"})
    return limiter, lambda: limiter.check("rl:x", BUCKET).degraded


def _usage(server: Server, make_limiter: MakeLimiter, breaker: Breaker) -> Any:
    limiter = make_limiter(server, FailurePolicy.open(), breaker=breaker)

    def refused() -> bool:
        with pytest.raises(UsageError):
            limiter.call("RL.FIXED", ["rl:raw"], [0, 60, 1])  # Redis refuses a limit of 0
        return True
    return limiter, refused


@pytest.mark.parametrize("cls, answered_by", [
    (ReplyClass.CONFLICT, _conflict), (ReplyClass.MISCONFIGURED, _misconfigured), (ReplyClass.USAGE, _usage),
], ids=["conflict", "misconfigured", "usage"])
def test_an_answer_of_a_class_the_contract_calls_answered_is_a_success_for_the_breaker(
        module_server: Server, make_limiter: MakeLimiter, cls: ReplyClass, answered_by: Any) -> None:
    """Redis answered, so the breaker records what a decision records (the contract's
    ``replies.classes[].breaker``): the failures in a row end, and a probe that meets such an answer
    closes the breaker (left probing, every later call would be turned away until the probe was given
    up). The outages here are the breaker's own ``failure`` calls: what is tested is the answer."""
    assert behaviour(cls).breaker == "answered"
    clock = Clock()
    breaker = Breaker(failures=2, cooldown=60.0, clock=clock)
    limiter, answer = answered_by(module_server, make_limiter, breaker)
    breaker.failure("an outage")
    assert answer()
    breaker.failure("an outage")
    assert not breaker.open, "the answer ended the failures in a row"
    breaker.failure("an outage")
    assert breaker.open and breaker.opened == 1
    clock.now += 60.0
    assert answer(), "the cool-down is over: this call is the probe"
    assert not breaker.open, "the probe met Redis answering: closed"
    assert answer() and breaker.rejected == 0 and breaker.opened == 1
