"""A request the middleware turns away, as a value: the application can shape the answer itself
(`on_denial`) or take the default one. As `client/src/http/denial.rs`."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..decision import Decision
from .response import Answer, Described, concurrency_limited, denied, unavailable


class DenialKind(enum.Enum):
    """Why a request was denied."""

    #: Over the limit: retry after `Denial.retry_after_secs`.
    RATE_LIMITED = "rate_limited"
    #: The request costs more than the limit: it can never be allowed.
    COST_EXCEEDS_LIMIT = "cost_exceeds_limit"
    #: Redis could not decide and the limiter fails closed: not the caller's overuse.
    UNAVAILABLE = "unavailable"
    #: Redis answers that the limiter cannot work with it as configured, and it fails closed.
    MISCONFIGURED = "misconfigured"
    #: A concurrency limit: too many of the caller's requests in flight.
    CONCURRENCY_LIMITED = "concurrency_limited"


@dataclass(frozen=True)
class Denial:
    """A denied request: which limit, why, and the decision it came from."""

    kind: DenialKind
    #: The route the request matched (`all` when only the global limit applied).
    route: str
    #: The limit that denied it: the route's name or `all`. When Redis could not decide, the route's.
    limit: str
    window_secs: int
    #: What the request cost.
    cost: int
    #: The limit that denied is a rate policy (not a concurrency limit).
    rate: bool
    decision: Decision
    structured: bool = False
    outage_status: int = 429

    @staticmethod
    def of(
        route: str,
        limit: str,
        window_secs: int,
        cost: int,
        rate: bool,
        decision: Decision,
        outage: DenialKind | None,
        structured: bool,
        outage_status: int,
    ) -> Denial:
        if outage is not None:
            kind = outage
        elif not decision.allowed and decision.retry_after is None:
            kind = DenialKind.COST_EXCEEDS_LIMIT
        else:
            kind = DenialKind.RATE_LIMITED if rate else DenialKind.CONCURRENCY_LIMITED
        return Denial(kind, route, limit, window_secs, cost, rate, decision, structured, outage_status)

    def retry_after_secs(self) -> int | None:
        """`Retry-After` in whole seconds; None when waiting would not help."""
        return self.decision.retry_after_secs()

    def in_flight_limit(self) -> int | None:
        """The concurrency limit that denied the request, or None when a rate limit or an outage did."""
        return self.decision.limit if self.kind is DenialKind.CONCURRENCY_LIMITED else None

    def described(self) -> Described:
        return Described(self.limit, self.window_secs, self.cost, self.rate)

    def default_response(self) -> Answer:
        """The middleware's own answer: 429 (or the outage status) with an RFC 9457 problem body and
        the rate limit headers. An ASGI app, like what `on_denial` returns."""
        d = self.described()
        if self.kind in (DenialKind.UNAVAILABLE, DenialKind.MISCONFIGURED):
            misconfigured = self.kind is DenialKind.MISCONFIGURED
            return unavailable(self.decision, d, self.structured, self.outage_status, misconfigured)
        if self.kind is DenialKind.CONCURRENCY_LIMITED:
            return concurrency_limited(self.decision, d)
        return denied(self.decision, d, self.structured)
