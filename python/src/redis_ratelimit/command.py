"""RL.* commands as argument lists: the one place that turns limits into arguments (as
`client/src/command.rs`). Each limit's arguments follow its kind's declaration (`Policy.KIND`)."""

from __future__ import annotations

import itertools
import secrets
from typing import Sequence, Tuple, Union

from .contract import ERRORS
from .errors import UsageError
from .policy import Policy, TokenBucket

__all__ = ["Limit", "decide", "acquire", "take", "refund", "inspect", "release", "renew", "seconds"]

Arg = Union[str, bytes, int, float]
Limit = Tuple[str, Policy, int]
"""One limit to check: a key, its policy, and what this request costs (1 for most, 0 to peek)."""

NO_RELEASE = "a concurrency limit is taken with acquire, which releases it: check has no release"


def decide(limits: Sequence[Limit]) -> list[Arg]:
    """The one call that decides `limits` atomically: one limit goes to its own command, several token
    buckets into one RL.TOKEN, several limits of other or mixed kinds into one RL.ALL."""
    return _build(limits, None)


def acquire(limits: Sequence[Limit], holder: str) -> list[Arg]:
    """Like `decide`, the concurrency limits among `limits` taken as leases held by `holder`."""
    return _build(limits, holder)


def _build(limits: Sequence[Limit], holder: str | None) -> list[Arg]:
    if not limits:
        raise UsageError("no limits to check")
    for limit in limits:
        if not isinstance(limit[1], Policy):
            raise UsageError(f"not a policy: {limit[1]!r}")
    if len(limits) == 1:
        key, policy, cost = limits[0]
        return [policy.KIND.command, key, *policy.params, *_request(policy, cost, holder)]
    if all(isinstance(policy, TokenBucket) for _, policy, _ in limits):
        out: list[Arg] = ["RL.TOKEN"]
        for key, policy, cost in limits:
            out += [key, *policy.params, *_request(policy, cost, holder)]
        return out
    out = ["RL.ALL"]
    for key, policy, cost in limits:
        out += [key, policy.KIND.group, *policy.params, *_request(policy, cost, holder)]
    return out


def _request(policy: Policy, cost: int, holder: str | None) -> list[Arg]:
    """A limit's request after its parameters, in its kind's form."""
    if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
        raise UsageError(f"the cost must be a whole number >= 0, not {cost!r}")
    form = policy.KIND.request
    if form == "cost":
        return [cost]
    if form == "id":
        if cost != 1:
            raise UsageError(ERRORS["render"]["log_cost"])
        return [request_id()]
    if holder is None:
        raise UsageError(NO_RELEASE)
    if cost == 0:
        raise UsageError(ERRORS["render"]["lease_weight"])
    return [holder, "WEIGHT", cost]


def take(key: str, policy: Policy, most: int) -> list[Arg]:
    """``RL.TAKE key capacity rate max``: as many tokens as the bucket holds now, up to `most`."""
    if not isinstance(policy, TokenBucket):
        raise UsageError("partial grants are taken from token buckets")
    if isinstance(most, bool) or not isinstance(most, int) or most < 1:
        raise UsageError("take at least one token (max >= 1)")
    return ["RL.TAKE", key, *policy.params, most]


def refund(key: str, policy: Policy, units: int) -> list[Arg]:
    """``RL.REFUND KIND key p1 p2 units``: gives units back (token buckets, fixed windows, sliding counters)."""
    if not policy.KIND.refunds:
        raise UsageError(f"a {policy.KIND.name} takes no refunds")
    if isinstance(units, bool) or not isinstance(units, int) or units < 0:
        raise UsageError(f"the units must be a whole number >= 0, not {units!r}")
    return ["RL.REFUND", policy.KIND.group, key, *policy.params, units]


def inspect(key: str, policy: Policy | None) -> list[Arg]:
    """``RL.INSPECT key [p1 p2]``: what `key` holds; with the policy, what a request would meet now."""
    return ["RL.INSPECT", key, *(policy.params if policy is not None else ())]


def release(key: str, holder: str) -> list[Arg]:
    return ["RL.RELEASE", key, holder]


def renew(key: str, lease: float, holder: str) -> list[Arg]:
    """``RL.RENEW key lease id`` (`lease` in seconds, whole milliseconds)."""
    return ["RL.RENEW", key, seconds(lease), holder]


def seconds(value: float) -> str:
    """A length as the commands write it: whole milliseconds, ``1.500``."""
    ms = round(value * 1000)
    return f"{ms // 1000}.{ms % 1000:03d}"


_RUN = f"{secrets.randbits(64):x}"
_SEQ = itertools.count()


def request_id() -> str:
    """A request id unique to this process run and call, for RL.SLIDE."""
    return f"{_RUN}-{next(_SEQ):x}"
