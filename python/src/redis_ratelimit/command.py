"""RL.* commands as argument lists: the one place that turns limits into arguments (as
`client/src/command.rs`). Each limit's arguments follow its kind's declaration (`Policy.KIND`)."""

from __future__ import annotations

import itertools
import secrets
from typing import Sequence, Tuple, Union

from .contract import ALL_COMMAND, BOUNDS, ERRORS, call, request_error, request_option
from .errors import UsageError
from .policy import Policy, TokenBucket

__all__ = ["Limit", "decide", "groups", "acquire", "take", "refund", "inspect", "release", "renew", "seconds"]

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
    distinct_keys(limits)
    for limit in limits:
        if not isinstance(limit[1], Policy):
            raise UsageError(f"not a policy: {limit[1]!r}")
    if len(limits) == 1:
        key, policy, cost = limits[0]
        return [policy.KIND.command, key, *policy.params, *_request(policy, cost, holder)]
    if all(isinstance(policy, TokenBucket) for _, policy, _ in limits):
        out: list[Arg] = [TokenBucket.KIND.command]
        for key, policy, cost in limits:
            out += [key, *policy.params, *_request(policy, cost, holder)]
        return out
    return [ALL_COMMAND, *_groups(limits, holder)]


def groups(limits: Sequence[Limit]) -> list[Arg]:
    """RL.ALL's groups for `limits` (``key KIND p1 p2 request`` each), as RL.HOLD takes them too."""
    if not limits:
        raise UsageError("no limits to check")
    distinct_keys(limits)
    return _groups(limits, None)


def _groups(limits: Sequence[Limit], holder: str | None) -> list[Arg]:
    out: list[Arg] = []
    for key, policy, cost in limits:
        if not isinstance(policy, Policy):
            raise UsageError(f"not a policy: {policy!r}")
        out += [key, policy.KIND.group, *policy.params, *_request(policy, cost, holder)]
    return out


def distinct_keys(limits: Sequence[Limit]) -> None:
    """UsageError, the module's own reply, when a key is missing or empty, or named twice in one call."""
    seen: set[bytes] = set()
    for limit in limits:
        name = key_bytes(limit[0])
        if name in seen:
            raise UsageError.of_reply(ERRORS["duplicate_key"])
        seen.add(name)


def parse_cost(text: str) -> int:
    """A cost written by a caller (a header, a query parameter, a config file), by the module's own
    grammar: plain decimal digits (a leading ``+`` allowed), from 0 to the contract's `max_whole`; else
    UsageError with the module's reply (``1.5``, ``1e3``, ``-1``, ``""``: ``ERR invalid cost: must be a
    whole number >= 0``; ``2^64``: ``...: too large``)."""
    digits = text[1:] if text.startswith("+") else text
    if not digits or not (digits.isascii() and digits.isdigit()):
        raise UsageError.of_reply(_reply("cost", request_error("cost")))
    return whole("cost", int(digits))


def key_bytes(name: object) -> bytes:
    """A key as Redis takes it; UsageError for a missing or empty one (the contract's text): it would
    name one key for every caller without one."""
    if name is None or isinstance(name, (str, bytes)) and len(name) == 0:
        raise UsageError.of_reply(ERRORS["render"]["empty_key"])
    return name if isinstance(name, bytes) else str(name).encode()


def whole(field: str, value: object) -> int:
    """`value` when it is a whole number from 0 to the contract's `max_whole`; else UsageError with the
    module's own reply (``ERR invalid cost: must be a whole number >= 0``, ``...: too large``): a cost of
    1.5 or 2^64 is refused before it is sent, never rounded."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError.of_reply(_reply(field, request_error(field)))
    if value > BOUNDS["max_whole"]:
        raise UsageError.of_reply(_reply(field, ERRORS["too_large"]))
    return value


def _reply(field: str, expected: str) -> str:
    return str(ERRORS["format"]).format(field=field, expected=expected)


def _request(policy: Policy, cost: int, holder: str | None) -> list[Arg]:
    """A limit's request after its parameters, in its kind's form."""
    whole("cost", cost)
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
    return [holder, request_option(form), cost]


def take(key: str, policy: Policy, most: int) -> list[Arg]:
    """``RL.TAKE key capacity rate max``: as many tokens as the bucket holds now, up to `most`."""
    key_bytes(key)
    if not isinstance(policy, TokenBucket):
        raise UsageError("partial grants are taken from token buckets")
    if isinstance(most, bool) or not isinstance(most, int) or most < 1:
        raise UsageError("take at least one token (max >= 1)")
    return call("take", key=key, **_params(policy), max=most)


def refund(key: str, policy: Policy, units: int) -> list[Arg]:
    """``RL.REFUND KIND key p1 p2 units``: gives units back (token buckets, fixed windows, sliding counters)."""
    key_bytes(key)
    if not policy.KIND.refunds:
        raise UsageError(f"a {policy.KIND.name} takes no refunds")
    whole("cost", units)
    return call("refund", group=policy.KIND.group, key=key, **_params(policy), units=units)


def inspect(key: str, policy: Policy | None) -> list[Arg]:
    """``RL.INSPECT key [p1 p2]``: what `key` holds; with the policy, what a request would meet now."""
    key_bytes(key)
    if policy is None:
        return call("inspect", key=key)
    return call("inspect_peek", key=key, **_params(policy))


def release(key: str, holder: str) -> list[Arg]:
    key_bytes(key)
    return call("release", key=key, id=holder)


def renew(key: str, lease: float, holder: str) -> list[Arg]:
    """``RL.RENEW key lease id`` (`lease` in seconds, whole milliseconds)."""
    key_bytes(key)
    return call("renew", key=key, lease=seconds(lease), id=holder)


def _params(policy: Policy) -> dict[str, Arg]:
    """A policy's two parameters as the calls' ``{p1}`` and ``{p2}``."""
    p1, p2 = policy.params
    return {"p1": p1, "p2": p2}


def seconds(value: float) -> str:
    """A length as the commands write it: whole milliseconds, ``1.500``."""
    ms = round(value * 1000)
    return f"{ms // 1000}.{ms % 1000:03d}"


_RUN = f"{secrets.randbits(64):x}"
_SEQ = itertools.count()


def request_id() -> str:
    """A request id unique to this process run and call, for RL.SLIDE."""
    return f"{_RUN}-{next(_SEQ):x}"
