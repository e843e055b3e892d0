"""The circuit breaker on a fake clock (pure: no server)."""

from __future__ import annotations

import pytest

from redis_ratelimit.breaker import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_the_failures_in_a_row_then_lets_one_probe_through() -> None:
    clock = Clock()
    b = Breaker(failures=3, cooldown=5.0, clock=clock)
    for _ in range(2):
        assert b.allow()
        b.failure()
    assert not b.open
    b.failure()
    assert b.open and b.opened == 1
    clock.now += 1
    assert not b.allow(), "open: no call during the cool-down"
    clock.now += 4
    assert b.allow(), "the cool-down is over: one probe"
    assert not b.allow(), "only one probe at a time"
    b.failure()
    assert b.open
    clock.now += 1
    assert not b.allow(), "a failed probe opens it for another cool-down"
    clock.now += 4
    assert b.allow()
    b.success()
    assert not b.open and b.allow() and b.allow(), "a probe that succeeds closes it"
    assert b.rejected == 3


def test_a_success_resets_the_failures_in_a_row() -> None:
    b = Breaker(failures=3, cooldown=5.0, clock=Clock())
    b.failure()
    b.failure()
    b.success()
    b.failure()
    b.failure()
    assert not b.open


def test_a_probe_that_never_reports_is_given_up_after_a_while() -> None:
    clock = Clock()
    b = Breaker(failures=1, cooldown=0.5, clock=clock)
    b.failure()
    clock.now += 0.5
    assert b.allow()
    clock.now += 0.9
    assert not b.allow(), "the probe is still under way"
    clock.now += 0.2
    assert b.allow(), "the probe's caller never reported: another call probes"


def test_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="failures"):
        Breaker(failures=0)
    with pytest.raises(ValueError, match="cooldown"):
        Breaker(cooldown=float("nan"))


def test_opening_and_closing_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    b = Breaker(failures=1, cooldown=1.0, clock=clock, name="api")
    with caplog.at_level("WARNING", logger="redis_ratelimit"):
        b.failure("DeadlineError: no answer")
        clock.now += 1
        assert b.allow()
        b.failure("UnreachableError: refused")  # a failed probe: still open, not logged again
        clock.now += 1
        assert b.allow()
        b.success()
    assert [r.getMessage() for r in caplog.records] == [
        "limiter 'api': circuit breaker open after 1 failure in a row (DeadlineError: no answer): "
        "no call goes to Redis for 1 s, then one probes",
        "limiter 'api': circuit breaker closed: Redis answers again and decides"]
