"""Rate strings as `limits` (slowapi, Flask-Limiter) writes them: ``"10/minute"``, ``"5 per 15 minutes"``,
``"100/day"``, several separated by ``,``, ``;`` or ``|``, as a window policy of this package.

    parse_rate("10/minute")                      # SlidingCounter(limit=10, window=60)
    parse_rate("5 per 15 minutes", FixedWindow)  # FixedWindow(limit=5, window=900)

The grammar is `limits`' own (`limits.util.parse_many`; the same strings are accepted and read alike,
held together by tests/test_rate.py): an amount, ``/`` or ``per``, an optional count of units, and a
unit (second, minute, hour, day, month = 30 days, year = 12 months), an ``s`` allowed, any case. The
sliding window counter is the default kind: it is what "10 per minute" means to most readers (no
burst of 2x at a window's edge as a fixed window allows) in O(1) memory; name another kind to get it.
"""

from __future__ import annotations

import re
from typing import Type, Union

from .policy import FixedWindow, SlidingCounter, SlidingLog, TokenBucket

__all__ = ["parse_rate", "parse_rates", "RatePolicy", "UNITS"]

#: Seconds per unit, as `limits` counts them.
UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "month": 86400 * 30, "year": 86400 * 30 * 12}

RatePolicy = Union[SlidingCounter, FixedWindow, SlidingLog, TokenBucket]
RateKind = Union[Type[SlidingCounter], Type[FixedWindow], Type[SlidingLog], Type[TokenBucket]]

_SEPARATORS = re.compile(r"[,;|]")
_SINGLE = r"\s*([0-9]+)\s*(?:/|\s*per\s*)\s*([0-9]+)?\s*([a-z]+)\s*"
_ONE = re.compile(rf"^{_SINGLE}$", re.IGNORECASE)
_MANY = re.compile(rf"^{_SINGLE}(?:[,;|]{_SINGLE})*$", re.IGNORECASE)


def parse_rates(text: str, kind: RateKind = SlidingCounter) -> list[RatePolicy]:
    """Every rate of `text` (``"10/second; 100/minute"``) as a policy of `kind`; ValueError naming the
    string when it is none (PolicyError when a rate is out of the policy's bounds)."""
    if not isinstance(text, str) or not _MANY.match(text):
        raise ValueError(f"not a rate string: {text!r} (write \"10/minute\" or \"5 per 15 minutes\")")
    policies: list[RatePolicy] = []
    for part in _SEPARATORS.split(text):
        match = _ONE.match(part)
        assert match is not None
        amount, multiples, unit = match.groups()
        unit = unit.lower()
        seconds = UNITS.get(unit[:-1] if unit.endswith("s") and unit[:-1] in UNITS else unit)
        if seconds is None:
            raise ValueError(f"not a rate string: {text!r}: no unit {unit!r} (second, minute, hour, day, "
                             "month, year)")
        window = seconds * (int(multiples) if multiples else 1)
        policies.append(_policy(kind, int(amount), window))
    return policies


def parse_rate(text: str, kind: RateKind = SlidingCounter) -> RatePolicy:
    """The one rate of `text` as a policy of `kind`: `SlidingCounter` (the default), `FixedWindow`,
    `SlidingLog`, or `TokenBucket` (capacity the amount, refilled evenly over the window)."""
    policies = parse_rates(text, kind)
    if len(policies) != 1:
        raise ValueError(f"{text!r} holds {len(policies)} rates: one is expected here (parse_rates reads several)")
    return policies[0]


def _policy(kind: RateKind, amount: int, window: int) -> RatePolicy:
    if kind is TokenBucket:
        return TokenBucket(capacity=amount, per_second=amount / window)
    if kind in (SlidingCounter, FixedWindow, SlidingLog):
        return kind(limit=amount, window=window)
    raise TypeError(f"a rate string makes a SlidingCounter, FixedWindow, SlidingLog or TokenBucket, not {kind!r}")
