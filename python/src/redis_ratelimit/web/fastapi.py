"""FastAPI: a dependency for per-endpoint limits. The endpoint declares its limit and takes no
`request` it does not use; the `RateLimit-*` fields go on its response (through FastAPI's `Response`
injection: on what the endpoint returns), on the error response of an `HTTPException` it raises (with
`install(app)`), and on a `Response` object it builds itself with `add_fields(request, response)`.

    limit = RateLimit(limiter, "items", TokenBucket(capacity=10, per_second=5.0))

    @app.get("/items", dependencies=[Depends(limit)])
    async def items() -> list[str]: ...

A denial raises `RateLimited`, an `HTTPException` (429, `Retry-After`, the `RateLimit-*` fields):
with `install(app)` its body is the middleware's RFC 9457 problem, byte for byte; without it,
FastAPI's `{"detail": ...}` with the problem's sentence. Keys, headers and bodies are the middleware's
(`<prefix>:{<caller>}:<name>`), so a dependency and a middleware route of one name share the bucket.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Iterable, TypeVar

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.exception_handlers import http_exception_handler
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response as StarletteResponse

from ..command import whole
from ..decision import Decision
from .caller import IPV6_PREFIX_DEFAULT
from .check import Denied, Served, enforce
from .config import (CONFIG_SCOPE, CallerFn, ConfigError, PolicyInput, RateLimitConfig, Route, from_rate,
                     source_mistake)
from .denial import Denial
from .forwarded import Network, TrustedProxies
from .plan import Plan, plan
from .response import Answer

__all__ = ["RateLimit", "RateLimited", "add_fields", "install", "problem_response"]

R = TypeVar("R", bound=StarletteResponse)

# Where a request's fields wait for a response the injected `Response` does not reach.
_FIELDS = "redis_ratelimit_fields"


class RateLimited(HTTPException):
    """A request a `RateLimit` dependency denied: `denial` says why, `answer` is the problem
    response (status, headers, body)."""

    def __init__(self, denial: Denial) -> None:
        self.denial = denial
        self.answer: Answer = denial.default_response()
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in self.answer.headers if k != b"content-type"}
        super().__init__(self.answer.status, detail=self.answer.json().get("detail"), headers=headers)


def problem_response(request: Request, exc: Exception) -> StarletteResponse:
    """The exception handler of `RateLimited`: the RFC 9457 problem as the middleware sends it."""
    if not isinstance(exc, RateLimited):
        raise exc
    answer = exc.answer
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in answer.headers}
    return StarletteResponse(answer.body, status_code=answer.status, headers=headers)


def add_fields(request: Request, response: R) -> R:
    """Puts the `RateLimit-*` fields of the request's limit on `response` (one the endpoint or an
    exception handler built itself), unless it has them; returns it."""
    for name, value in getattr(request.state, _FIELDS, ()):
        if name not in response.headers:
            response.headers[name] = value
    return response


async def _http_exception_with_fields(request: Request, exc: Exception) -> StarletteResponse:
    """FastAPI's own answer to an `HTTPException`, with the fields of the limit the request passed."""
    if not isinstance(exc, StarletteHTTPException):
        raise exc
    return add_fields(request, await http_exception_handler(request, exc))


def install(app: FastAPI) -> None:
    """Answers `RateLimited` with the RFC 9457 problem body (`application/problem+json`), and puts the
    fields on the error response of any other `HTTPException` an endpoint that passed its limit raises
    (FastAPI's own answer otherwise: an app's own handler replaces it, and can call `add_fields`)."""
    app.add_exception_handler(RateLimited, problem_response)
    app.add_exception_handler(StarletteHTTPException, _http_exception_with_fields)


class RateLimit:
    """A per-endpoint limit: `Depends(RateLimit(limiter, name, policy))`.

    - `policy`: a rate policy, or a function of the `Caller` giving one (plans);
    - `cost`: what a request costs, a number or a function of the `Request`;
    - `global_limit`: a per-caller limit checked with this one in one atomic call (key `...:all`);
    - `shadow`: decided and counted, never enforced (no fields, no 429 from it);
    - the caller as the middleware finds it: `trusted_proxies`, `caller`, `ipv6_prefix`, `key_prefix`
      (the principal and tenant set with `set_principal` / `set_tenant` by an earlier middleware);
    - `structured_headers`, `outage_status` as the middleware's; `structured_headers=None` (the
      default) takes the `RateLimitMiddleware`'s setting when the request went through one (False
      without one).

    The dependency returns the decision of the limit that applied (None for a shadow limit).
    `config.counts` counts its decisions as the middleware's do.
    """

    def __init__(
        self,
        limiter: Any,
        name: str,
        policy: PolicyInput,
        *,
        cost: int | Callable[[Request], int] = 1,
        global_limit: PolicyInput | None = None,
        shadow: bool = False,
        trusted_proxies: Iterable[str | Network] | TrustedProxies = (),
        caller: CallerFn | None = None,
        ipv6_prefix: int = IPV6_PREFIX_DEFAULT,
        key_prefix: str = "rl",
        structured_headers: bool | None = None,
        outage_status: int = 429,
    ) -> None:
        policy = from_rate(policy)
        mistake = source_mistake(f"RateLimit '{name}'", "policy", policy)
        if mistake is None and not inspect.iscoroutinefunction(getattr(limiter, "check_all", None)):
            mistake = (f"RateLimit '{name}': the FastAPI dependency needs an AsyncLimiter (redis.asyncio), "
                       f"not {type(limiter).__name__}")
        if mistake is not None:
            raise ConfigError(mistake)
        cost_fn: Callable[[Any], int]
        if callable(cost):
            request_cost = cost
            cost_fn = lambda scope: request_cost(Request(scope))  # noqa: E731
        else:
            fixed = whole("cost", cost)  # as check takes it: 1.5 is refused, not rounded
            cost_fn = lambda scope: fixed  # noqa: E731
        self.config = RateLimitConfig(
            limiter,
            routes=[Route(name, "/", policy, cost_fn)],
            global_limit=global_limit,
            shadow=[name] if shadow else [],
            trusted_proxies=trusted_proxies,
            caller=caller,
            structured_headers=bool(structured_headers),
            key_prefix=key_prefix,
            ipv6_prefix=ipv6_prefix,
            outage_status=outage_status,
        )
        # Inheriting: the same limit with the draft's fields, for requests of a middleware that sends
        # them (its counts are the config's).
        self._structured: RateLimitConfig | None = None
        if structured_headers is None:
            self._structured = dataclasses.replace(self.config, structured_headers=True)
            self._structured.counts = self.config.counts
        self.name = name

    def __repr__(self) -> str:
        return f"RateLimit({self.name!r})"

    async def __call__(self, request: Request, response: Response) -> Decision | None:
        config = self.config
        if self._structured is not None:
            outer = request.scope.get(CONFIG_SCOPE)
            if isinstance(outer, RateLimitConfig) and outer.structured_headers:
                config = self._structured
        step = plan(config, request.scope)
        if not isinstance(step, Plan):  # every path is under "/": only a misused config lands here
            return None
        verdict = await enforce(config, step)
        if isinstance(verdict, Denied):
            raise RateLimited(verdict.denial)
        return _decorate(verdict, request, response)


def _decorate(served: Served, request: Request, response: Response) -> Decision | None:
    if served.headers is None:
        return None
    raw: list[tuple[bytes, bytes]] = []
    served.headers.add_to(raw)
    fields = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]
    for name, value in fields:
        response.headers[name] = value
    setattr(request.state, _FIELDS, fields)
    return served.headers.decision

