"""What the web layer needs to know of a policy: its family (rate or concurrency), whether it can be
peeked, and the window the `RateLimit-Policy` field names (`w=`), as the Rust layer computes it
(`Policy::window_length`, in whole seconds, at least 1)."""

from __future__ import annotations

from typing import Any

from ..policy import Concurrency, Policy


def is_policy(value: Any) -> bool:
    return isinstance(value, Policy)


def is_concurrency(policy: Any) -> bool:
    return isinstance(policy, Concurrency)


def is_peekable(policy: Any) -> bool:
    """Whether its kind can be peeked without recording a request (the contract's `peeks`: a sliding
    log cannot)."""
    return isinstance(policy, Policy) and policy.KIND.peeks


def window_secs(policy: Any) -> int:
    """Whole seconds of the time the limit is measured over (a window, a full refill, a lease), at
    least 1."""
    return max(1, int(policy.period))
