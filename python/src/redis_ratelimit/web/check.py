"""The calls to Redis for one request: its concurrency slots first (each a permit, given back at once
if anything else denies), then its enforced rate limits in one atomic call (`check_all`), then, if
they let it through, its shadow limits in another, counted and never enforced. As
`client/src/http/check.rs`, with one difference: the Rust layer takes the slots and the rate limits
in one RL.ALL call; here a slot is taken first and released when the rate limits deny, so a denial
still takes from no limit."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..decision import Decision
from ..permit import AsyncPermit
from .config import RateLimitConfig
from .denial import Denial, DenialKind
from .plan import Plan, PlannedLimit
from .policies import window_secs
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
    """Checks the request `plan` describes."""
    limiter = config.limiter
    enforced = [lim for lim in plan.limits if not lim.shadow]
    rates = [lim for lim in enforced if not lim.concurrency]
    served = Served()
    kept = False
    try:
        for lease in (lim for lim in enforced if lim.concurrency):
            permit = _permit(limiter, lease)
            await permit.__aenter__()
            if not permit.granted:
                return _denied(config, plan, enforced, lease, permit.decision)
            served.permits.append(permit)
        answered = True
        if rates:
            decision = await limiter.check_all([(lim.key, lim.policy, lim.cost) for lim in rates])
            limiting = rates[min(decision.limiting, len(rates) - 1)]
            if not decision.allowed:
                return _denied(config, plan, enforced, limiting, decision)
            answered = not decision.degraded
            w = window_secs(limiting.policy)
            served.headers = RateHeaders(decision, limiting.name, w, limiting.cost, config.structured_headers)
        shadow = [lim for lim in plan.limits if lim.shadow]
        if shadow and answered:
            await _check_shadow(config, plan.route_name, shadow)
        kept = True
        return served
    finally:
        # A denial, an error or a cancellation gives the slots taken so far back.
        if not kept:
            await served.release()


def _permit(limiter: Any, lease: PlannedLimit) -> Any:
    """A permit for one slot of `lease` (the limiter's `acquire`, or an `AsyncPermit` on it)."""
    acquire = getattr(limiter, "acquire", None)
    if acquire is not None:
        return acquire(lease.key, lease.policy, 1)
    return AsyncPermit(limiter, lease.key, lease.policy, 1)


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
    flag = getattr(limiter, "misconfigured", False)
    return bool(flag() if callable(flag) else flag)


async def _check_shadow(config: RateLimitConfig, route: str, limits: Sequence[PlannedLimit]) -> None:
    """Checks the shadow limits of a request that is served whatever they say; a denial is logged."""
    decision = await config.limiter.check_all([(lim.key, lim.policy, lim.cost) for lim in limits])
    if not decision.allowed and not decision.degraded:
        _shadow_log.maybe(route, limits[min(decision.limiting, len(limits) - 1)])
