"""The pre-check's and batched units' rules (volume.py, pure: no server), on explicit times: each check's
steps are driven with the replies of `Bucket`, a token bucket without refill written here from the
reply format (what Redis would answer), shared by several instances. Properties over random sequences:
never more admitted than the bucket gave, never a unit spent twice, at most ``batch - 1`` held."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redis_ratelimit import Decision, FixedWindow, PolicyError, SlidingCounter, SlidingLog, TokenBucket
from redis_ratelimit.contract import BATCHING
from redis_ratelimit.policy import Concurrency
from redis_ratelimit.volume import AHEAD, Ahead, Send, Volume, Wait, Woken

MS = 1_000_000
LEASE_MS = 1000


class Bucket:
    """What RL.TOKEN and RL.REFUND TOKEN answer on one key whose bucket does not refill in the test."""

    def __init__(self, capacity: int) -> None:
        self.capacity = self.tokens = capacity
        self.calls = 0

    def answer(self, cmd: Sequence[Any]) -> list[int]:
        self.calls += 1
        if cmd[0] == "RL.REFUND":
            self.tokens = min(self.capacity, self.tokens + int(cmd[-1]))
            return [1, self.capacity, self.tokens, 0, 1000]
        assert cmd[0] == "RL.TOKEN" and len(cmd) == 5, cmd
        cost = int(cmd[-1])
        if cost > self.capacity:
            return [0, self.capacity, self.tokens, -1, 1000]
        if cost > self.tokens:
            return [0, self.capacity, self.tokens, 500, 1000]
        self.tokens -= cost
        return [1, self.capacity, self.tokens, 0, 1000]


def run(volume: Volume, bucket: Bucket, limits: list[Any], now_ms: int,
        before_ahead: Callable[[], None] | None = None) -> tuple[Decision, list[list[Any]]]:
    """One check's steps at `now_ms`, each command answered by `bucket`: the decision and what was sent.
    `before_ahead` runs when a batch taken ahead is about to land (after the decision was made)."""
    steps = volume.check(limits, now_ms * MS)
    sent: list[list[Any]] = []
    try:
        send = next(steps)
        while True:
            assert not isinstance(send, Wait), "nothing in flight between checks"
            sent.append(send.cmd)
            reply = bucket.answer(send.cmd)
            if isinstance(send, Ahead):  # a batch taken ahead, landed at once here
                if before_ahead is not None:
                    before_ahead()
                send.landed(reply)
                reply = None
            send = steps.send(reply)
    except StopIteration as done:
        return done.value, sent


def warmed(batch: int, checks: int) -> tuple[Volume, Bucket, TokenBucket]:
    """An instance that made `checks` checks of cost 1 on key ``k`` of a bucket of 100 at time 0."""
    volume, bucket = Volume(precheck=False), Bucket(100)
    policy = TokenBucket(100, 0.001, batch=batch)
    for _ in range(checks):
        run(volume, bucket, [("k", policy, 1)], 0)
    return volume, bucket, policy


def test_the_batch_option_is_refused_where_a_kind_takes_no_refunds_or_out_of_range() -> None:
    for make in (lambda: SlidingLog(10, 1, batch=2), lambda: Concurrency(3, 1, batch=1)):
        with pytest.raises(PolicyError, match="cannot batch: it takes no refunds") as e:
            make()
        assert e.value.field == "batch"
    for batch in (0, 11, -1, True, 2.0):
        with pytest.raises(PolicyError) as e:
            TokenBucket(10, 5, batch=batch)  # type: ignore[arg-type]
        assert e.value.field == "batch"
    with pytest.raises(PolicyError) as e:
        FixedWindow(10, 1, batch=2, lease=0)
    assert e.value.field == "lease"
    assert SlidingCounter(10, 1, batch=10, lease=0.25).lease_ns == 250 * MS
    assert TokenBucket(10, 5).lease_ns == BATCHING["lease_ms"] * MS


def test_a_quiet_key_costs_one_call_per_check() -> None:
    volume, bucket = Volume(precheck=False), Bucket(100)
    policy = TokenBucket(100, 0.001, batch=16)
    for i in range(10):
        decision, sent = run(volume, bucket, [("k", policy, 1)], i * (LEASE_MS + 1))
        assert sent == [["RL.TOKEN", "k", "100", "0.001", 1]] and not decision.local
    assert bucket.tokens == 90 and volume.batches.held("k", policy) == 0


def test_a_hot_key_grows_its_batch_and_spends_locally() -> None:
    volume, bucket = Volume(precheck=False), Bucket(10_000)
    policy = TokenBucket(10_000, 0.001, batch=16)
    decisions = [run(volume, bucket, [("k", policy, 1)], 0)[0] for _ in range(1000)]
    assert all(d.allowed for d in decisions)
    # Batches grow to 16, then are taken ahead when a quarter is left: batch - batch / AHEAD at a time.
    assert bucket.calls <= 1000 / (16 - 16 // AHEAD) + math.log2(16) + 3, bucket.calls
    assert sum(d.local for d in decisions) >= 1000 - bucket.calls
    held = volume.batches.held("k", policy)
    assert bucket.tokens + held + 1000 == 10_000 and held <= 16 - 1


def test_expired_units_go_back_before_the_check_s_own_call() -> None:
    volume, bucket, policy = warmed(batch=4, checks=5)  # sizes 1, 1, 2 (one held, spent), 4
    held = volume.batches.held("k", policy)
    assert held > 0
    _, sent = run(volume, bucket, [("k", policy, 1)], LEASE_MS)
    assert sent[0] == ["RL.REFUND", "TOKEN", "k", "100", "0.001", held]
    assert sent[1][0] == "RL.TOKEN"


def test_a_denial_with_extras_asks_again_for_the_request_alone() -> None:
    volume, bucket, policy = warmed(batch=16, checks=8)
    held = volume.batches.held("k", policy)
    bucket.tokens = 1  # other instances took the rest
    for _ in range(held):
        run(volume, bucket, [("k", policy, 1)], 0)
    decision, sent = run(volume, bucket, [("k", policy, 1)], 0)
    assert decision.allowed and [int(c[-1]) for c in sent] == [int(sent[0][-1]), 1] and int(sent[0][-1]) > 1


def test_a_batch_in_flight_is_waited_for_and_one_that_fails_is_asked_again() -> None:
    volume, bucket, policy = warmed(batch=8, checks=2)  # asked 1, then 2: one held
    spending = volume.check([("k", policy, 1)], 0)
    ahead = next(spending)
    assert isinstance(ahead, Ahead) and int(ahead.cmd[-1]) > 0, "the last unit spent: the next batch taken ahead"
    with pytest.raises(StopIteration) as spent:
        spending.send(None)
    assert spent.value.value.local
    waiting = volume.check([("k", policy, 1)], 0)
    wait = next(waiting)
    assert isinstance(wait, Wait), "no units, a batch in flight: wait for it"
    woken: list[bool] = []
    assert wait.subscribe(lambda: woken.append(True))
    ahead.landed(bucket.answer(ahead.cmd))
    assert woken == [True]
    with pytest.raises(StopIteration) as spent:
        waiting.send(Woken(0, True))
    assert spent.value.value.allowed and not spent.value.value.local, \
        "it spent what the batch brought after waiting for its round trip: not local (as the reference)"
    # A batch taken ahead that fails: nothing held, and the next check asks a batch itself.
    volume, bucket = Volume(precheck=False), Bucket(100)
    for _ in range(2):
        run(volume, bucket, [("k", policy, 1)], 0)
    spending = volume.check([("k", policy, 1)], 0)
    failed = next(spending)
    assert isinstance(failed, Ahead)
    failed.landed(None)
    with pytest.raises(StopIteration):
        spending.send(None)
    assert volume.batches.held("k", policy) == 0
    _, sent = run(volume, bucket, [("k", policy, 1)], 0)
    assert int(sent[0][-1]) > 1, sent


def test_one_call_at_a_time_asks_for_extra_units_and_the_others_wait_for_it() -> None:
    volume, bucket, policy = warmed(batch=16, checks=2)
    spending = volume.check([("k", policy, 1)], 0)
    ahead = next(spending)
    assert isinstance(ahead, Ahead)
    ahead.landed(None)  # failed: nothing held, nothing in flight
    with pytest.raises(StopIteration):
        spending.send(None)
    first, second, third = (volume.check([("k", policy, 1)], 0) for _ in range(3))
    asking = next(first)
    assert isinstance(asking, Send) and int(asking.cmd[-1]) > 1
    waiting, impatient = next(second), next(third)
    assert isinstance(waiting, Wait) and isinstance(impatient, Wait)
    woken: list[str] = []
    assert waiting.subscribe(lambda: woken.append("second"))
    with pytest.raises(StopIteration):
        first.send(bucket.answer(asking.cmd))
    assert woken == ["second"], "woken when the call is over"
    assert not impatient.subscribe(lambda: None), "the call is over: no wait"
    with pytest.raises(StopIteration) as spent:
        second.send(Woken(0, True))
    assert spent.value.value.allowed and not spent.value.value.local, "it waited for the call: not local"
    with pytest.raises(StopIteration) as spent:
        third.send(Woken(0, False))
    assert spent.value.value.allowed and not spent.value.value.local
    assert volume.batches.held("k", policy) == int(asking.cmd[-1]) - 3


def test_the_precheck_repeats_redis_denial_until_its_retry_after() -> None:
    volume, bucket = Volume(precheck=True), Bucket(2)
    policy = TokenBucket(2, 0.001)
    run(volume, bucket, [("k", policy, 2)], 0)
    denied, sent = run(volume, bucket, [("k", policy, 1)], 10)
    assert not denied.allowed and sent and denied.retry_after == 0.5
    held, sent = run(volume, bucket, [("k", policy, 1)], 110)
    assert sent == [] and held.local and not held.allowed
    assert (held.retry_after, held.reset_after) == (0.4, 0.9)
    assert run(volume, bucket, [("k", policy, 0)], 120)[1], "a smaller cost may fit: asked"
    assert run(volume, bucket, [("k", policy, 1)], 510)[1], "past the retry_after: asked"


def test_a_never_fitting_request_is_not_remembered() -> None:
    volume, bucket = Volume(precheck=True), Bucket(2)
    policy = TokenBucket(2, 0.001)
    for _ in range(2):
        decision, sent = run(volume, bucket, [("k", policy, 3)], 0)
        assert decision.never_fits and sent


def test_close_gives_every_unit_back() -> None:
    volume, bucket, policy = warmed(batch=8, checks=5)
    held = volume.batches.held("k", policy)
    assert volume.release_all(0) == [["RL.REFUND", "TOKEN", "k", "100", "0.001", held]]
    assert volume.batches.held("k", policy) == 0 and volume.release_all(0) == []


checks = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3), st.integers(0, 400)), max_size=120)


@settings(max_examples=150, deadline=None)
@given(checks, st.integers(1, 12), st.integers(1, 60))
def test_never_more_admitted_than_taken_nor_a_unit_spent_twice(
        seq: list[tuple[int, int, int]], batch: int, capacity: int) -> None:
    batch = min(batch, capacity)
    policy = TokenBucket(capacity, 0.001, batch=batch)
    bucket = Bucket(capacity)
    instances = [Volume(precheck=True) for _ in range(3)]
    admitted, now = 0, 0
    for who, cost, step in seq:
        now += step
        at_decision: list[int] = []
        decision, _ = run(instances[who], bucket, [("k", policy, cost)], now,
                          lambda: at_decision.append(instances[who].batches.held("k", policy)))
        admitted += cost if decision.allowed else 0
        held = [v.batches.held("k", policy) for v in instances]
        assert all(h >= 0 for h in held)
        # Every unit admitted or held was taken from the bucket, once.
        assert admitted + sum(held) + bucket.tokens == capacity
        if cost == 1 and decision.allowed and decision.local:
            # A local decision counts the units held when it was made; a batch taken ahead lands after
            # it (here at once), so its units are not in it. (Hypothesis found the case in CI: held 1
            # after the ahead batch, remaining 0 in the decision made before it.)
            assert decision.remaining >= (at_decision[0] if at_decision else held[who])
    for v in instances:
        for cmd in v.release_all(now):
            bucket.answer(cmd)
    assert admitted + bucket.tokens == capacity


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 300)), max_size=150), st.integers(1, 16))
def test_with_requests_of_cost_1_an_instance_holds_at_most_batch_minus_1(seq: list[tuple[int, int]], batch: int) -> None:
    policy = TokenBucket(1000, 0.001, batch=batch)
    bucket = Bucket(1000)
    instances = [Volume(precheck=False) for _ in range(2)]
    now = 0
    for who, step in seq:
        now += step
        run(instances[who], bucket, [("k", policy, 1)], now)
        assert all(v.batches.held("k", policy) <= batch - 1 for v in instances)
