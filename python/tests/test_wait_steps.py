"""The steps of a wait (pure: no server): what the drivers are told to do for each answer, on a fake
clock; and the in-process fallback's bounds as properties over random request sequences."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redis_ratelimit import Decision, FixedWindow, SlidingCounter, TokenBucket
from redis_ratelimit.local_fallback import LocalLimiter
from redis_ratelimit.wait_steps import Ask, Sleep, reserve, steps

BUCKET = TokenBucket(capacity=10, per_second=10.0)  # a refill: 1 s
WINDOW = FixedWindow(limit=5, window=2.0)


def decision(allowed: bool, retry_after: float | None, degraded: bool = False) -> Decision:
    return Decision(allowed, 10, 0, retry_after, 1.0, 0, degraded)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_reservation_is_slept_once_then_allowed_now() -> None:
    walk = steps([("k", BUCKET, 1)], 5.0, Clock())
    assert next(walk) == Ask(5.0)
    assert walk.send(decision(True, 0.3)) == Sleep(0.3, reserved=True)
    try:
        walk.send(None)
    except StopIteration as done:
        assert done.value.allowed and done.value.retry_after == 0.0
    else:
        raise AssertionError("one sleep, then the decision")


def test_returns_at_once_when_waiting_cannot_help() -> None:
    for answer in (decision(False, None), decision(False, 6.0), decision(False, 0.1, degraded=True),
                   decision(True, 0.0, degraded=True)):
        walk = steps([("k", BUCKET, 1)], 5.0, Clock())
        next(walk)
        try:
            walk.send(answer)
        except StopIteration as done:
            assert done.value is answer
        else:
            raise AssertionError(f"{answer} should end the wait")


def test_a_window_is_polled_with_jitter_within_what_is_left() -> None:
    clock = Clock()
    walk = steps([("k", WINDOW, 1)], 1.0, clock)
    next(walk)
    sleep = walk.send(decision(False, 0.5))
    assert isinstance(sleep, Sleep) and not sleep.reserved and 0.5 <= sleep.seconds <= 0.55
    clock.now = 0.9
    ask = walk.send(None)
    assert isinstance(ask, Ask) and ask.max_wait == pytest.approx(0.1)
    sleep = walk.send(decision(False, 0.05))
    assert isinstance(sleep, Sleep) and sleep.seconds <= 0.1, "never past max_wait"


def test_a_denied_bucket_is_asked_again_once_its_wait_fits_a_reservation() -> None:
    walk = steps([("k", BUCKET, 1)], 5.0, Clock())
    next(walk)
    sleep = walk.send(decision(False, 1.5))  # more than one refill (1 s) queued ahead
    assert isinstance(sleep, Sleep) and 0.5 <= sleep.seconds <= 0.55


def test_the_reservations_sent() -> None:
    assert reserve([("k", BUCKET, 2)], 1.2345) == ("RL.RESERVE", ["k"], ["10", "10", 2, "1.234"])
    assert reserve([("k", WINDOW, 1)], 1.0) is None, "nothing reserves: a check"
    both = reserve([("{a}b", BUCKET, 1), ("{a}w", WINDOW, 2)], 0.5)
    assert both is not None and both.command == "RL.ALL" and both.keys == ["{a}b", "{a}w"]
    assert both.args == ["RESERVE", "10", "10", 1, "0.500", "FIXED", "5", "2.000", 2]


NS = 1_000_000_000
times = st.lists(st.integers(min_value=0, max_value=5 * NS), min_size=1, max_size=60).map(sorted)


@settings(max_examples=200, deadline=None)
@given(times, st.integers(min_value=1, max_value=4), st.integers(min_value=1, max_value=3))
def test_the_fallback_bucket_never_admits_more_than_its_share(at: list[int], instances: int, cost: int) -> None:
    local = LocalLimiter(instances)
    capacity, rate = 10 // instances, 10.0 / instances
    start = 1_700_000_000 * NS
    allowed = sum(cost for t in at if local.decide([("k", BUCKET, cost)], now=start + t).allowed)
    assert allowed <= capacity + (at[-1] - at[0]) / NS * rate + 1e-9


@settings(max_examples=200, deadline=None)
@given(times, st.integers(min_value=1, max_value=3))
def test_the_fallback_windows_never_admit_more_than_twice_the_limit_in_a_window(at: list[int], instances: int) -> None:
    for policy in (WINDOW, SlidingCounter(limit=5, window=2.0)):
        local = LocalLimiter(instances)
        start = 1_700_000_000 * NS
        admitted = [t for t in at if local.decide([("k", policy, 1)], now=start + t).allowed]
        share = max(1, 5 // instances)
        for t in admitted:  # any 2 s span holds at most two windows' worth
            assert sum(1 for u in admitted if t <= u < t + 2 * NS) <= 2 * share
