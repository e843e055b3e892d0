"""The calls to Redis for one request: its enforced limits (and concurrency slots) in one RL.ALL
call, then, if they let it through, its shadow limits in another, counted and never enforced. As
`client/src/http/check.rs`."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from ..decision import Decision
from ..permit import AsyncPermit
from .config import RateLimitConfig, outcome_of, record
from .denial import Denial, DenialKind
from .plan import Plan, PlannedLimit
from .policies import is_peekable, window_secs
from .response import Described, RawHeaders, add_headers

log = logging.getLogger("redis_ratelimit.web")


@dataclass(frozen=True)
class RateHeaders:
    """The `RateLimit-*` fields of a served request: the decision of the rate limit it was held to."""

    decision: Decision
    limit: str
    window_secs: int
    cost: int
    structured: bool

    def add_to(self, headers: RawHeaders) -> None:
        described = Described(self.limit, self.window_secs, self.cost, True)
        add_headers(headers, self.decision, described, self.structured)


@dataclass
class Served:
    """Let through: its response gets `headers` (None when no rate limit was enforced), and the
    request holds `permits` (its concurrency slots) until its response has been sent."""

    headers: RateHeaders | None = None
    permits: list[Any] = field(default_factory=list)

    async def release(self) -> None:
        """Gives the slots back (at most once; a failed release is logged: the lease ends by itself)."""
        permits, self.permits = self.permits, []
        for permit in permits:
            await permit.__aexit__(None, None, None)


@dataclass(frozen=True)
class Denied:
    denial: Denial


class _ShadowLog:
    """One line per 10 s at most, with the number of lines held back."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self.last = -every
        self.suppressed = 0

    def maybe(self, route: str, limit: PlannedLimit) -> None:
        now = time.monotonic()
        if now - self.last < self.every:
            self.suppressed += 1
            return
        log.info(
            "shadow limit would have denied a request (served: shadow limits are not enforced) "
            "route=%s limit=%s key=%s suppressed=%d",
            route,
            limit.name,
            limit.key,
            self.suppressed,
        )
        self.last, self.suppressed = now, 0


_shadow_log = _ShadowLog()


async def enforce(config: RateLimitConfig, plan: Plan) -> Served | Denied:
    """Checks the request `plan` describes: the enforced limits first, in one call (`check_all`, or
    `acquire_all` when concurrency slots are among them); after they allowed, in a call of its own,
    the shadow limits, unless Redis just failed to answer."""
    limiter = config.limiter
    enforced = [lim for lim in plan.limits if not lim.shadow]
    served = Served()
    answered = True
    if enforced:
        calls = [(lim.key, lim.policy, lim.cost) for lim in enforced]
        if any(lim.concurrency for lim in enforced):
            permit = _permit(limiter, calls)
            await permit.__aenter__()
            decision: Decision = permit.decision
            if permit.granted:
                served.permits.append(permit)
        else:
            decision = await config.checks.check_all(calls)
        limiting = enforced[min(decision.limiting, len(enforced) - 1)]
        if not decision.allowed:
            record(config, plan.route_name, limiting.name, outcome_of(False, decision.degraded, False))
            return _denied(config, plan, enforced, limiting, decision)
        answered = not decision.degraded
        if limiting.concurrency:
            try:
                decision, limiting = await _peek_rates(config, enforced, decision, limiting)
            except BaseException:
                await served.release()
                raise
        record(config, plan.route_name, limiting.name, outcome_of(True, not answered, False))
        # The RateLimit-* fields describe rate limits; a lease that was the tightest has none.
        if not limiting.concurrency:
            w = window_secs(limiting.policy)
            served.headers = RateHeaders(decision, limiting.name, w, limiting.cost, config.structured_headers)
    shadow = [lim for lim in plan.limits if lim.shadow]
    if shadow and answered:
        try:
            await _check_shadow(config, plan.route_name, shadow)
        except BaseException:
            await served.release()
            raise
    return served


async def _peek_rates(
    config: RateLimitConfig, enforced: Sequence[PlannedLimit], decision: Decision, limiting: PlannedLimit
) -> tuple[Decision, PlannedLimit]:
    """Granted with a lease as the tightest limit: the fields still describe the rate limits, read
    with a peek (cost 0, writes nothing; a sliding log cannot be peeked)."""
    rates = [lim for lim in enforced if not lim.concurrency and is_peekable(lim.policy)]
    if not rates:
        return decision, limiting
    peeked = await config.checks.check_all([(lim.key, lim.policy, 0) for lim in rates])
    described = rates[min(peeked.limiting, len(rates) - 1)]
    return replace(peeked, allowed=True), described


def _permit(limiter: Any, calls: list[tuple[str, Any, int]]) -> Any:
    """A permit for the slots and rate limits of `calls`, taken in one RL.ALL call."""
    acquire_all = getattr(limiter, "acquire_all", None)
    if acquire_all is not None:
        return acquire_all(calls)
    return AsyncPermit(limiter, calls)


def _denied(
    config: RateLimitConfig, plan: Plan, enforced: Sequence[PlannedLimit], limiting: PlannedLimit, d: Decision
) -> Denied:
    outage: DenialKind | None = None
    if d.degraded and getattr(getattr(config.limiter, "failure", None), "kind", None) == "closed":
        outage = DenialKind.MISCONFIGURED if _misconfigured(config.limiter) else DenialKind.UNAVAILABLE
        # None of them could be checked: name the route's own limit, not the global one.
        limiting = next((lim for lim in enforced if lim.name == plan.route_name), limiting)
    denial = Denial.of(
        plan.route_name,
        limiting.name,
        window_secs(limiting.policy),
        limiting.cost,
        not limiting.concurrency,
        d,
        outage,
        config.structured_headers,
        config.outage_status,
    )
    return Denied(denial)


def _misconfigured(limiter: Any) -> bool:
    """The limiter's `misconfigured` (a limiter of this package: a property; a method elsewhere)."""
    flag = getattr(limiter, "misconfigured", False)
    return bool(flag() if callable(flag) else flag)


async def _check_shadow(config: RateLimitConfig, route: str, limits: Sequence[PlannedLimit]) -> None:
    """Checks the shadow limits of a request that is served whatever they say; a denial is logged."""
    decision = await config.checks.check_all([(lim.key, lim.policy, lim.cost) for lim in limits])
    limiting = limits[min(decision.limiting, len(limits) - 1)]
    record(config, route, limiting.name, outcome_of(decision.allowed, decision.degraded, True))
    if not decision.allowed and not decision.degraded:
        _shadow_log.maybe(route, limiting)
