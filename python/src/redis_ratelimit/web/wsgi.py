"""Rate limits for synchronous web applications: a WSGI middleware (Flask without Flask-Limiter,
Bottle, Pyramid, any WSGI app) on a synchronous `Limiter`, with the ASGI middleware's routes, global
limit, shadow limits, trusted proxies, callers, access lists, keys, `RateLimit-*` fields and 429 and
problem bodies, byte for byte. The Django middleware and decorator (`redis_ratelimit.django`) use the
same gate.

    from redis_ratelimit.web import Route
    from redis_ratelimit.web.wsgi import SyncRateLimitConfig, RateLimitWSGIMiddleware

    app.wsgi_app = RateLimitWSGIMiddleware(app.wsgi_app, SyncRateLimitConfig(limiter, routes=[...]))  # Flask

Not here (ConfigError when asked for): concurrency limits (a WSGI response's end is its iterable's
`close`, which this middleware does not hold leases across), `on_denial` (an ASGI app), WebSockets.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Callable, Iterable, MutableMapping

from .check import Denied, RateHeaders, Served, _denied, _shadow_log
from .config import RateLimitConfig, Scope, outcome_of, record
from .plan import Allowlisted, Plan, Refused, plan
from .policies import window_secs
from .response import RATELIMIT_LIMIT, Answer, forbidden

_LIMIT_HEADER = RATELIMIT_LIMIT.decode()

__all__ = ["SyncRateLimitConfig", "RateLimitWSGIMiddleware", "Gate", "Pass", "scope_of_environ", "check"]

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass
class SyncRateLimitConfig(RateLimitConfig):
    """`RateLimitConfig` for a synchronous `Limiter` (redis.Redis, Sentinel, cluster): the same fields
    and checks; refused: `concurrency`, `global_concurrency`, `on_denial`; `batch` does not apply."""

    def limiter_mistake(self) -> str | None:
        check_all = getattr(self.limiter, "check_all", None)
        if check_all is None or inspect.iscoroutinefunction(check_all):
            return f"the WSGI middleware needs a Limiter (redis.Redis), not {type(self.limiter).__name__}"
        if self.concurrency or self.global_concurrency is not None:
            return "concurrency limits are not supported by the WSGI middleware (use the ASGI one)"
        if self.on_denial is not None:
            return "on_denial is not supported by the WSGI middleware (the ASGI middleware's hook is an ASGI app)"
        return None


@dataclass(frozen=True)
class Pass:
    """Let through: the response gets `fields` (none when no rate limit was enforced)."""

    fields: list[tuple[str, str]]


Gate = Pass | Answer  # what `check` says: serve (with these fields), or send this answer


def check(config: SyncRateLimitConfig, scope: Scope) -> Pass | Answer:
    """The request of `scope` (ASGI-shaped: `scope_of_environ`) checked as the ASGI middleware checks it."""
    step = plan(config, scope)
    if step is None:
        return Pass([])
    if isinstance(step, Allowlisted):
        record(config, step.route_name, step.route_name, "allowlisted")
        return Pass([])
    if isinstance(step, Refused):
        record(config, step.route_name, step.route_name, "denylisted")
        return forbidden()
    verdict = enforce_sync(config, step)
    if isinstance(verdict, Denied):
        return verdict.denial.default_response()
    raw: list[tuple[bytes, bytes]] = []
    if verdict.headers is not None:
        verdict.headers.add_to(raw)
    return Pass([(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw])


def enforce_sync(config: RateLimitConfig, plan: Plan) -> Served | Denied:
    """`check.enforce` on a synchronous limiter, rate limits only: the enforced limits in one call,
    then the shadow ones in another when those allowed and Redis answered."""
    limiter = config.limiter
    enforced = [lim for lim in plan.limits if not lim.shadow]
    served = Served()
    answered = True
    if enforced:
        decision = limiter.check_all([(lim.key, lim.policy, lim.cost) for lim in enforced])
        limiting = enforced[min(decision.limiting, len(enforced) - 1)]
        if not decision.allowed:
            record(config, plan.route_name, limiting.name, outcome_of(False, decision.degraded, False))
            return _denied(config, plan, enforced, limiting, decision)
        answered = not decision.degraded
        record(config, plan.route_name, limiting.name, outcome_of(True, not answered, False))
        served.headers = RateHeaders(decision, limiting.name, window_secs(limiting.policy), limiting.cost,
                                     config.structured_headers)
    shadow = [lim for lim in plan.limits if lim.shadow]
    if shadow and answered:
        decision = limiter.check_all([(lim.key, lim.policy, lim.cost) for lim in shadow])
        limiting = shadow[min(decision.limiting, len(shadow) - 1)]
        record(config, plan.route_name, limiting.name, outcome_of(decision.allowed, decision.degraded, True))
        if not decision.allowed and not decision.degraded:
            _shadow_log.maybe(plan.route_name, limiting)
    return served


def scope_of_environ(environ: MutableMapping[str, Any]) -> Scope:
    """The ASGI-shaped view of a WSGI environ the planning reads: path, method, headers, peer, state
    (`set_principal(environ, ...)` writes `environ["state"]`)."""
    headers: list[tuple[bytes, bytes]] = []
    for name, value in environ.items():
        if name.startswith("HTTP_"):
            header = name[5:].replace("_", "-").lower()
        elif name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            header = name.replace("_", "-").lower()
        else:
            continue
        headers.append((header.encode("latin-1"), str(value).encode("latin-1")))
    addr = environ.get("REMOTE_ADDR")
    port = environ.get("REMOTE_PORT") or 0
    scope: Scope = {
        "type": "http",
        "method": str(environ.get("REQUEST_METHOD", "GET")).upper(),
        "path": (environ.get("SCRIPT_NAME") or "") + (environ.get("PATH_INFO") or "/"),
        "headers": headers,
        "client": (addr, int(port)) if addr else None,
        "state": environ.setdefault("state", {}),
    }
    return scope


def status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def answer_headers(answer: Answer) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in answer.headers]


class RateLimitWSGIMiddleware:
    """Rate limits for a WSGI app, as `config` (a `SyncRateLimitConfig`) says. The fields go on every
    response of a limited request, unless it already has `RateLimit-Limit`."""

    def __init__(self, app: WSGIApp, config: SyncRateLimitConfig) -> None:
        if not isinstance(config, SyncRateLimitConfig):
            raise TypeError("RateLimitWSGIMiddleware takes a SyncRateLimitConfig (a synchronous Limiter)")
        self.app = app
        self.config = config

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        gate = check(self.config, scope_of_environ(environ))
        if isinstance(gate, Answer):
            start_response(status_line(gate.status), answer_headers(gate))
            return [gate.body]
        if not gate.fields:
            return self.app(environ, start_response)
        fields = gate.fields

        def with_fields(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if not any(name.lower() == _LIMIT_HEADER for name, _ in headers):
                headers = list(headers) + fields
            return start_response(status, headers, exc_info) if exc_info is not None else start_response(status, headers)

        return self.app(environ, with_fields)
