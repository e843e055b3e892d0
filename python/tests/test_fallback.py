"""The in-process fallback with explicit times (pure: no server), and the failure policies' decisions."""

from __future__ import annotations

from redis_ratelimit.errors import DeadlineError
from redis_ratelimit.failure_policy import FailurePolicy
from redis_ratelimit.local_fallback import MAX_KEYS, LocalLimiter
from redis_ratelimit.policy import Concurrency, FixedWindow, SlidingCounter, SlidingLog, TokenBucket

NOW = 1_700_000_000_000_000_000
SEC = 1_000_000_000


def test_each_instance_gets_its_share_and_limits_are_checked_together() -> None:
    local = LocalLimiter(2)
    route = TokenBucket(capacity=10, per_second=5.0)
    global_ = TokenBucket(capacity=4, per_second=1.0)
    allowed = sum(local.decide([("k", route, 1)], now=NOW).allowed for _ in range(10))
    assert allowed == 5, "half of capacity 10 on one of two instances"
    both = [("r2", route, 1), ("g", global_, 1)]
    decisions = [local.decide(both, now=NOW) for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False]
    assert (decisions[2].limiting, decisions[2].limit) == (1, 2)
    assert all(d.degraded for d in decisions)
    assert local.decide([("r2", route, 0)], now=NOW).remaining == 3, "the denial took nothing from the route"
    fixed = FixedWindow(limit=4, window=1.0)
    assert sum(local.decide([("f", fixed, 1)], now=NOW).allowed for _ in range(5)) == 2


def test_a_token_bucket_share_refills_at_its_share_of_the_rate() -> None:
    local = LocalLimiter(2)
    bucket = TokenBucket(capacity=10, per_second=1.0)
    for _ in range(5):
        assert local.decide([("b", bucket, 1)], now=NOW).allowed
    denied = local.decide([("b", bucket, 1)], now=NOW)
    assert not denied.allowed and denied.retry_after == 2.0, "one token at half the rate"
    assert not local.decide([("b", bucket, 1)], now=NOW + 2 * SEC - 1).allowed
    assert local.decide([("b", bucket, 1)], now=NOW + 2 * SEC).allowed
    never = local.decide([("b", bucket, 6)], now=NOW)
    assert not never.allowed and never.retry_after is None, "above the share: never fits"


def test_every_rate_kind_is_one_bucket_of_its_limit_over_its_period_at_the_share() -> None:
    """A window or a log is the token bucket of its limit per window (as the token bucket kind is
    itself): 10 per second on one of 3 instances is 3 at once, then one every 300 ms."""
    for policy in (FixedWindow(limit=10, window=1.0), SlidingCounter(limit=10, window=1.0),
                   SlidingLog(limit=10, window=1.0)):
        local = LocalLimiter(3)
        key = policy.kind.name
        burst = [local.decide([(key, policy, 1)], now=NOW) for _ in range(5)]
        assert [d.allowed for d in burst] == [True] * 3 + [False] * 2, "the share of 10 on one of 3"
        assert (burst[4].limit, burst[4].retry_after) == (3, 0.3)
        # In the second after the burst, 3 more: the share plus limit / instances in the period.
        later = [local.decide([(key, policy, 1)], now=NOW + k * SEC // 10).allowed for k in range(1, 11)]
        assert later == [False, False, True] * 3 + [False]
    bucket = TokenBucket(capacity=10, per_second=5.0)
    local = LocalLimiter(3)
    assert sum(local.decide([("b", bucket, 1)], now=NOW).allowed for _ in range(5)) == 3
    assert local.decide([("b", bucket, 1)], now=NOW).retry_after == 0.6, "a token bucket keeps its rate at the share"


def test_leases_are_shared_out_released_renewed_and_end_by_themselves() -> None:
    local = LocalLimiter(2)
    policy = Concurrency(limit=4, lease=10.0)

    def take(lease_id: str, at: int) -> bool:
        return local.acquire([("k", policy, 1)], lease_id, now=at).allowed

    assert take("a", NOW) and take("b", NOW), "half of 4 on one of two instances"
    denied = local.acquire([("k", policy, 1)], "c", now=NOW + SEC)
    assert not denied.allowed and denied.degraded and denied.retry_after == 9.0
    assert take("a", NOW + SEC), "a retry by a holder is the same request"
    assert not local.renew("k", 10.0, "c", now=NOW + SEC), "c holds nothing"
    assert local.release("k", "a", now=NOW + SEC) and not local.release("k", "a", now=NOW + SEC)
    assert local.renew("k", 10.0, "b", now=NOW + 5 * SEC)
    assert take("d", NOW + 12 * SEC), "a's slot is free"
    assert not take("e", NOW + 12 * SEC), "b (renewed to 15 s) and d hold both"
    assert take("f", NOW + 16 * SEC), "b's renewed lease ended by itself"
    assert not local.decide([("k2", policy, 1)], now=NOW).allowed, "a check takes no lease"


def test_take_takes_what_the_share_holds_and_refund_gives_back() -> None:
    local = LocalLimiter(2)
    bucket = TokenBucket(capacity=10, per_second=1.0)
    first, taken = local.take("w", bucket, 3, now=NOW)
    assert (taken, first.remaining, first.allowed) == (3, 2, True)
    assert local.take("w", bucket, 100, now=NOW)[1] == 2
    empty, none = local.take("w", bucket, 4, now=NOW)
    assert none == 0 and not empty.allowed and empty.retry_after == 2.0
    local.refund("w", bucket, 2, now=NOW)
    assert local.take("w", bucket, 4, now=NOW)[1] == 2


def test_memory_is_bounded() -> None:
    local = LocalLimiter(1)
    bucket = TokenBucket(capacity=10, per_second=1.0)
    for i in range(MAX_KEYS + 10):
        local.decide([(f"k{i}", bucket, 1)], now=NOW)
        assert len(local) <= MAX_KEYS
    # State that has expired goes first (a bucket full again after 10 s), then everything.
    local.decide([("late", bucket, 1)], now=NOW + 11 * SEC)
    assert len(local) <= MAX_KEYS


def test_the_policies_degraded_decisions() -> None:
    bucket = TokenBucket(capacity=10, per_second=1.0)
    error = DeadlineError(0.1)
    opened = FailurePolicy.open().decide([("k", bucket, 1)], error)
    assert (opened.allowed, opened.degraded, opened.limit, opened.remaining) == (True, True, 10, 10)
    closed = FailurePolicy.closed().decide([("k", bucket, 1)], error)
    assert (closed.allowed, closed.degraded, closed.retry_after, closed.retry_after_secs()) == (False, True, 1.0, 1)
    fallback = FailurePolicy.fallback(instances=5)
    decisions = [fallback.decide([("k", bucket, 1)], error) for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False] and all(d.degraded for d in decisions)
    assert (fallback.decisions, fallback.allowed) == (3, 2)
    assert FailurePolicy.closed().take("k", bucket, 5, error)[1] == 0
    assert FailurePolicy.open().take("k", bucket, 5, error)[1] == 5
    assert repr(fallback) == "FailurePolicy.fallback(instances=5)"
