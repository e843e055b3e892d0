"""The limiters of the in-process fallback (``local_fallback.py``), one pure function per operation:
(parameters, previous state, now in ns, request) -> (verdict, next state). Integer nanoseconds
throughout; the sliding counter's weighting of the previous window is the one float (a fallback's
bound is rough anyway).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from .policy import Policy, TokenBucket

__all__ = ["Params", "Verdict", "Outcome", "decide", "take", "refund", "lease_op"]

NS = 1_000_000_000


class Verdict(NamedTuple):
    allowed: bool
    limit: int
    remaining: int
    retry_after_ns: int | None  # None: never fits
    reset_after_ns: int


class Outcome(NamedTuple):
    verdict: Verdict
    state: object | None = None  # None: nothing to write
    expires_at: int = 0


@dataclass(frozen=True)
class Params:
    """One policy at an instance's share: ``kind`` is token_bucket, fixed_window, sliding_counter
    (also standing in for sliding_log) or concurrency; ``period`` is ns per token for a bucket, the
    window or the lease otherwise."""

    kind: str
    limit: int
    period: int

    @staticmethod
    def of(policy: Policy, instances: int) -> Params:
        name = policy.kind.name
        limit = max(1, policy.limit // instances)
        if isinstance(policy, TokenBucket):
            interval = max(1, math.ceil(NS / float(policy.per_second))) * instances
            return Params("token_bucket", limit, interval)
        period = max(1, round(policy.period * NS))
        return Params(_KINDS[name], limit, period)


# The sliding log, which keeps every request, is approximated by the sliding counter.
_KINDS = {
    "fixed_window": "fixed_window",
    "sliding_counter": "sliding_counter",
    "sliding_log": "sliding_counter",
    "concurrency": "concurrency",
}


@dataclass(frozen=True)
class _Bucket:
    tat: int  # theoretical arrival time, ns


@dataclass(frozen=True)
class _Window:
    end: int
    count: int


@dataclass(frozen=True)
class _Counter:
    start: int  # of the current window, aligned to the window length
    prev: int
    curr: int


@dataclass(frozen=True)
class _Leases:
    held: dict[str, tuple[int, int]]  # id -> (end ns, weight)


def _never(limit: int) -> Outcome:
    return Outcome(Verdict(False, limit, 0, None, 0))


def decide(p: Params, state: object | None, now: int, cost: int, lease_id: str | None) -> Outcome:
    """One request of ``cost`` (a lease's weight for concurrency, held by ``lease_id``)."""
    if cost < 0:
        return _never(p.limit)
    if p.kind == "concurrency":
        if lease_id is None:
            return _never(p.limit)  # a check cannot take a lease it could never release
        return _acquire(p, state if isinstance(state, _Leases) else None, now, max(cost, 1), lease_id)
    if cost > p.limit:
        # Never fits: denied, with what is left and when it resets as a peek sees them (core's).
        peek = decide(p, state, now, 0, lease_id).verdict
        return Outcome(Verdict(False, p.limit, peek.remaining, None, peek.reset_after_ns))
    if p.kind == "token_bucket":
        return _bucket(p, state if isinstance(state, _Bucket) else None, now, cost)
    if p.kind == "fixed_window":
        return _fixed(p, state if isinstance(state, _Window) else None, now, cost)
    return _counter(p, state if isinstance(state, _Counter) else None, now, cost)


def _bucket(p: Params, s: _Bucket | None, now: int, cost: int) -> Outcome:
    tau = p.limit * p.period  # a full bucket's worth of time
    start = max(s.tat if s else now, now)
    new = start + cost * p.period
    if new - now > tau:
        remaining = max(0, (tau - (start - now)) // p.period)
        return Outcome(Verdict(False, p.limit, remaining, new - now - tau, start - now))
    verdict = Verdict(True, p.limit, (tau - (new - now)) // p.period, 0, new - now)
    return Outcome(verdict, _Bucket(new) if cost else None, new)


def take(p: Params, state: object | None, now: int, max_units: int) -> tuple[Outcome, int]:
    """As many whole tokens as the bucket holds, up to ``max_units`` (RL.TAKE)."""
    if p.kind != "token_bucket" or max_units < 1:
        return _never(p.limit), 0
    s = state if isinstance(state, _Bucket) else None
    tau = p.limit * p.period
    start = max(s.tat if s else now, now)
    n = min(max_units, max(0, (tau - (start - now)) // p.period))
    if n == 0:
        return Outcome(Verdict(False, p.limit, 0, start + p.period - now - tau, start - now)), 0
    return _bucket(p, s, now, n), n


def _fixed(p: Params, s: _Window | None, now: int, cost: int) -> Outcome:
    if s is None or s.end <= now:
        if not cost:  # an empty window is the initial state: nothing to reset
            return Outcome(Verdict(True, p.limit, p.limit, 0, 0))
        s = _Window(now + p.period, 0)
    if s.count + cost > p.limit:
        return Outcome(Verdict(False, p.limit, p.limit - s.count, s.end - now, s.end - now))
    count = s.count + cost
    verdict = Verdict(True, p.limit, p.limit - count, 0, s.end - now)
    return Outcome(verdict, _Window(s.end, count) if cost else None, s.end)


def _counter_now(p: Params, s: _Counter | None, now: int) -> _Counter:
    start = now - now % p.period
    if s is None or s.start < start - p.period:
        return _Counter(start, 0, 0)
    if s.start == start - p.period:
        return _Counter(start, s.curr, 0)
    return s


def _counter(p: Params, s: _Counter | None, now: int, cost: int) -> Outcome:
    c = _counter_now(p, s, now)
    w = p.period
    elapsed = now - c.start
    estimate = c.prev * (w - elapsed) / w + c.curr
    reset = c.start + (2 * w if c.curr else w) - now if c.curr or c.prev else 0
    if estimate + cost > p.limit:
        left = p.limit - cost
        if c.curr + cost > p.limit:  # only the next window's decay can make room
            retry = c.start + w - now + (w - w * left // max(c.curr, 1))
        else:  # the previous window's weight must decay: prev * (w - e) / w <= left - curr
            retry = w - w * (left - c.curr) // max(c.prev, 1) - elapsed
        remaining = max(0, int(p.limit - estimate))
        return Outcome(Verdict(False, p.limit, remaining, max(retry, 1_000_000), reset))
    verdict = Verdict(True, p.limit, int(p.limit - estimate - cost), 0, reset)
    if not cost:
        return Outcome(verdict)
    after = _Counter(c.start, c.prev, c.curr + cost)
    return Outcome(verdict._replace(reset_after_ns=c.start + 2 * w - now), after, c.start + 2 * w)


def _live(s: _Leases | None, now: int) -> dict[str, tuple[int, int]]:
    return {} if s is None else {i: e for i, e in s.held.items() if e[0] > now}


def _acquire(p: Params, s: _Leases | None, now: int, weight: int, lease_id: str) -> Outcome:
    held = _live(s, now)
    end = now + p.period
    if lease_id in held:  # a retry by a holder is the same request
        held[lease_id] = (end, held[lease_id][1])
    else:
        used = sum(w for _, w in held.values())
        if used + weight > p.limit:
            retry: int | None = None  # a weight above the limit never fits
            if weight <= p.limit:
                freed = 0
                for lease_end, w in sorted(held.values()):
                    freed += w
                    retry = lease_end - now
                    if used - freed + weight <= p.limit:
                        break
            last = max((e for e, _ in held.values()), default=now) - now
            return Outcome(Verdict(False, p.limit, p.limit - used, retry, last))
        held[lease_id] = (end, weight)
    used = sum(w for _, w in held.values())
    last = max(e for e, _ in held.values())
    return Outcome(Verdict(True, p.limit, p.limit - used, 0, last - now), _Leases(held), last)


def lease_op(
    state: object | None, now: int, lease_id: str, lease_ns: int | None
) -> tuple[bool, Outcome | None]:
    """RL.RENEW (``lease_ns`` given) or RL.RELEASE (None) of ``lease_id``'s lease: whether it was
    held, and the state to write."""
    held = _live(state if isinstance(state, _Leases) else None, now)
    if lease_id not in held:
        return False, None
    if lease_ns is None:
        del held[lease_id]
    else:
        held[lease_id] = (now + lease_ns, held[lease_id][1])
    last = max((e for e, _ in held.values()), default=now)
    return True, Outcome(Verdict(True, 0, 0, 0, 0), _Leases(held), last)


def refund(p: Params, state: object | None, now: int, units: int) -> Outcome | None:
    """Gives ``units`` back (RL.REFUND): a bucket's tokens, a window's count; None for the others."""
    if isinstance(state, _Bucket) and p.kind == "token_bucket":
        tat = max(now, state.tat - units * p.period)
        return Outcome(Verdict(True, p.limit, 0, 0, 0), _Bucket(tat), tat)
    if isinstance(state, _Window) and p.kind == "fixed_window":
        return Outcome(Verdict(True, p.limit, 0, 0, 0), _Window(state.end, max(0, state.count - units)), state.end)
    if isinstance(state, _Counter) and p.kind == "sliding_counter":
        c = _counter_now(p, state, now)
        after = _Counter(c.start, c.prev, max(0, c.curr - units))
        return Outcome(Verdict(True, p.limit, 0, 0, 0), after, c.start + 2 * p.period)
    return None
