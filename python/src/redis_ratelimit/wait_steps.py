"""Waiting for capacity without I/O (``wait.py`` sends): the steps of a wait (ask, sleep, ask again),
the reservation each call sends, jitter, and what a given-up wait gives back. As ``client/src/wait.rs``."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Generator, Sequence
from typing import Any, NamedTuple

from . import command
from .command import Limit
from .contract import ALL_COMMAND, call, kind
from .decision import Decision, Taken
from .errors import UsageError
from .policy import Policy, TokenBucket
from .request_steps import Request

__all__ = ["jittered", "next_try"]

MIN_SLEEP = 0.001


class Ask(NamedTuple):
    """One call: reservations within ``max_wait`` (token buckets), the others deciding now."""

    max_wait: float


class Sleep(NamedTuple):
    seconds: float
    reserved: bool  # taken already: given back if the sleep is interrupted


def jittered(seconds: float, rand: Callable[[float, float], float] = random.uniform) -> float:
    """``seconds`` plus a random extra of up to a tenth of it (up to 1 ms for short waits)."""
    return seconds + rand(0.0, max(seconds / 10, MIN_SLEEP))


def next_try(retry_after: float, policy: Policy) -> float:
    """How long to sleep after a denial of ``retry_after`` by ``policy``: a token bucket can be asked
    again as soon as the wait is within one refill (a reservation's longest); any other limit once
    its ``retry_after`` is over; plus jitter, and at least 1 ms."""
    if isinstance(policy, TokenBucket):
        retry_after = max(0.0, retry_after - policy.period)  # a full refill
    return max(jittered(retry_after), MIN_SLEEP)


def steps(
    limits: Sequence[Limit], max_wait: float, clock: Callable[[], float]
) -> Generator[Ask | Sleep, Decision | None, Decision]:
    give_up = clock() + max_wait
    reserving = any(isinstance(p, TokenBucket) for _, p, _ in limits)
    while True:
        left = max(0.0, give_up - clock())
        decision = yield Ask(left)
        assert decision is not None
        if decision.degraded:
            return decision
        if decision.allowed:
            if reserving and (decision.retry_after or 0.0) > 0:
                yield Sleep(decision.retry_after or 0.0, reserved=True)
                decision = dataclasses.replace(decision, retry_after=0.0)
            return decision
        if decision.retry_after is None or left <= 0 or decision.retry_after > left:
            return decision
        limiting = limits[min(decision.limiting, len(limits) - 1)][1]
        yield Sleep(min(next_try(decision.retry_after, limiting), left), reserved=False)


#: A token bucket reserving (RL.RESERVE, RESERVE groups of RL.ALL): the contract's kind.
_RESERVATION = kind("reservation")


def reserve(limits: Sequence[Limit], max_wait: float) -> Request | None:
    """The call reserving the token buckets among ``limits`` within ``max_wait`` while the others
    decide now; None when none reserves (then it is ``check_all``)."""
    if not any(isinstance(p, TokenBucket) for _, p, _ in limits):
        return None
    command.distinct_keys(limits)
    for _, _, cost in limits:
        command.whole("cost", cost)
    wait = f"{int(max_wait * 1000) / 1000:.3f}"  # whole ms, rounded down: never past max_wait
    if len(limits) == 1:
        key, policy, cost = limits[0]
        return Request(_RESERVATION["command"], [key], [*policy.params, cost, wait])
    cmd: list[Any] = [ALL_COMMAND]
    for key, policy, cost in limits:
        if isinstance(policy, TokenBucket):
            cmd += [key, _RESERVATION["group"], *policy.params, cost, wait]
        else:  # its own command's arguments, as a group
            cmd += [key, policy.KIND.group, *command.decide([(key, policy, cost)])[2:]]
    return Request.of(cmd)


def refundable(limits: Sequence[Limit]) -> list[Limit]:
    """What an allowed call took that can be given back."""
    return [(k, p, c) for k, p, c in limits if c > 0 and p.KIND.refunds]


def batch(key: str, policy: Policy, least: int, most: int, max_wait: float) -> Request:
    """``RL.RESERVE key capacity rate least max_wait UPTO most``."""
    if not isinstance(policy, TokenBucket):
        raise UsageError("batches are reserved from token buckets")
    command.key_bytes(key)
    if least < 1 or most < least:
        raise UsageError("a batch takes at least one token, and max >= min")
    wait = f"{int(max_wait * 1000) / 1000:.3f}"
    p1, p2 = policy.params
    return Request.of(call("reserve_upto", key=key, p1=p1, p2=p2, min=least, max_wait=wait, max=most))


class Asked(NamedTuple):
    """One call's decision, and what it took that goes back if the wait is given up."""

    decision: Decision
    took: list[Limit]


def taken(asked: Asked) -> Taken:
    taken = sum(units for _, _, units in asked.took) if asked.decision.allowed else 0
    return Taken(asked.decision, taken)


def limits_of(limits: Sequence[Limit]) -> list[Limit]:
    if not limits:
        raise UsageError("no limits to wait for")
    return [(str(k), p, c) for k, p, c in limits]


# Before the first call: never returned (the steps always ask first).
NOTHING = Decision(allowed=False, limit=0, remaining=0, retry_after=None, reset_after=0.0)


def with_wait(request: Request, max_wait: float) -> Request:
    """A batch's reservation with this call's ``max_wait`` (its fourth argument)."""
    args = list(request.args)
    args[3] = f"{int(max_wait * 1000) / 1000:.3f}"
    return Request(request.command, request.keys, args)
