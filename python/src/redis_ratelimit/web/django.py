"""Django: a middleware (limits by path prefix and a global limit, as the ASGI middleware) and a
per-view decorator (`@ratelimit(rate="5/m", key="ip", method="POST")`, as django-ratelimit's), both
on a synchronous `Limiter`, configured from Django settings, with the ASGI middleware's keys,
`RateLimit-*` fields and 429 problem bodies.

    MIDDLEWARE = [..., "django.contrib.auth.middleware.AuthenticationMiddleware",
                  "redis_ratelimit.web.django.RateLimitMiddleware", ...]
    RATELIMIT_REDIS_URL = "redis://127.0.0.1:6379/0"
    RATELIMIT_ROUTES = [("login", "/login/", "5/m", ["POST"]), ("api", "/api/", "100/m")]

Settings (all optional; read when first needed, again after `override_settings`):

- ``RATELIMIT_ENABLE`` (True): False lets every request through;
- ``RATELIMIT_REDIS_URL``, else the ``LOCATION`` of the cache ``RATELIMIT_USE_CACHE`` names ("default")
  when it is Django's ``RedisCache`` or django-redis, else ``redis://127.0.0.1:6379/0``;
  ``RATELIMIT_LIMITER``: a `Limiter`, or the dotted path of one or of a function returning one;
- ``RATELIMIT_FAIL_OPEN`` (False: closed) or ``RATELIMIT_FAILURE`` ("open", "closed", "fallback:4");
  ``RATELIMIT_DEADLINE`` (0.1): the seconds a call to Redis may take; ``RATELIMIT_LOCAL_PRECHECK``
  (False): a caller Redis denied stays denied in this process until its retry_after, without a call;
- ``RATELIMIT_KEY`` ("ip"): "ip", "user" (the authenticated user's pk, else the IP),
  "header:X-API-Key" (its SHA-256), or a function of the request giving an id (None: the IP);
- ``RATELIMIT_ROUTES``: (name, prefix, rate[, methods]) tuples or dicts with those keys;
  ``RATELIMIT_GLOBAL``: a rate over every path; ``RATELIMIT_SKIP``, ``RATELIMIT_SHADOW``;
- ``RATELIMIT_TRUSTED_PROXIES``, ``RATELIMIT_IPV6_MASK`` (64), ``RATELIMIT_STRUCTURED_HEADERS``,
  ``RATELIMIT_OUTAGE_STATUS`` (429), ``RATELIMIT_KEY_PREFIX`` ("rl").

A rate is a policy, django-ratelimit's short form ("5/m", "100/h", "10/5m", "1000/d") or `limits`'
("5 per 15 minutes"), made the sliding window counter (not django-ratelimit's fixed window).
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any, Callable, Collection, Iterable, MutableMapping

import redis
from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed
from django.core.signals import setting_changed
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from ..base import DEFAULT_DEADLINE
from ..failure_policy import FailurePolicy
from ..limiter import Limiter
from ..policy import Policy, SlidingCounter
from ..rate import parse_rate
from .caller import IPV6_PREFIX_DEFAULT, Caller, IPAddress, caller_from_header, default_caller, set_principal
from .config import ConfigError, Route
from .response import RATELIMIT_LIMIT, Answer
from .wsgi import Pass, SyncRateLimitConfig, check, scope_of_environ

__all__ = ["RateLimitMiddleware", "ratelimit", "parse_django_rate", "limiter", "reset"]

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SHORT = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])?\s*$")
_state: dict[str, Any] = {}

CallerFn = Callable[[MutableMapping[str, Any], "IPAddress | None"], Caller]


def parse_django_rate(rate: Any) -> Any:
    """A policy as it is; django-ratelimit's "5/m" / "10/5m" (no unit: seconds); else `limits`' grammar."""
    if not isinstance(rate, str):
        return rate
    short = _SHORT.match(rate)
    if short:
        count, multiple, unit = short.groups()
        return SlidingCounter(limit=int(count), window=int(multiple or 1) * _PERIODS[unit or "s"])
    try:
        return parse_rate(rate)
    except ValueError:
        raise ConfigError(f"not a rate: {rate!r} (\"5/m\", \"10/5m\", \"5 per 15 minutes\")") from None


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, f"RATELIMIT_{name}", default)


def reset(**_: Any) -> None:
    """Forgets the limiter and configurations made from the settings (on `setting_changed`)."""
    _state.clear()


setting_changed.connect(reset)


def limiter() -> Limiter:
    """The `Limiter` the settings give (made once)."""
    made = _state.get("limiter")
    if made is None:
        given = _setting("LIMITER", None)
        if isinstance(given, str):
            given = import_string(given)
        if callable(given) and not isinstance(given, Limiter):
            given = given()
        made = given if given is not None else Limiter(
            redis.Redis.from_url(_redis_url()), _failure(), name="django",
            deadline=float(_setting("DEADLINE", DEFAULT_DEADLINE)),
            local_precheck=bool(_setting("LOCAL_PRECHECK", False)))
        _state["limiter"] = made
    return made


def _redis_url() -> str:
    url = _setting("REDIS_URL", None)
    if url:
        return str(url)
    cache = getattr(settings, "CACHES", {}).get(_setting("USE_CACHE", "default"), {})
    if "redis" in str(cache.get("BACKEND", "")).lower():
        location = cache.get("LOCATION")
        if isinstance(location, (list, tuple)):
            location = location[0]
        if location:
            return str(location)
    return "redis://127.0.0.1:6379/0"


def _failure() -> FailurePolicy:
    named = _setting("FAILURE", None)
    if named is None:
        return FailurePolicy.open() if _setting("FAIL_OPEN", False) else FailurePolicy.closed()
    kind, _, n = str(named).partition(":")
    if kind == "fallback":
        return FailurePolicy.fallback(int(n or 1))
    if kind in ("open", "closed"):
        return FailurePolicy.open() if kind == "open" else FailurePolicy.closed()
    raise ConfigError(f"RATELIMIT_FAILURE: 'open', 'closed' or 'fallback:N', not {named!r}")


def _caller(key: Any, where: str = "RATELIMIT_KEY") -> CallerFn | None:
    """The caller function of a key setting; None: the default (principal, tenant, IP)."""
    if key in (None, "ip", "user", "user_or_ip"):
        return None  # "user": the principal the middleware names from request.user, else the IP
    if isinstance(key, str) and key.lower().startswith("header:"):
        if not key.split(":", 1)[1].strip():
            raise ConfigError(f"{where}: 'header:<name>' names a header (header:X-API-Key), not {key!r}")
        return caller_from_header(key.split(":", 1)[1])
    if callable(key):
        return None  # a function of the request: its id is set as the principal (see _scope)
    raise ConfigError(f"{where}: 'ip', 'user', 'header:<name>' or a function of the request, not {key!r}")


def _scope(request: HttpRequest, key: Any) -> MutableMapping[str, Any]:
    scope = scope_of_environ(request.META)
    scope["path"] = request.path
    if key in ("user", "user_or_ip"):
        user = getattr(request, "user", None)
        if user is not None and getattr(user, "is_authenticated", False):
            set_principal(scope, str(user.pk))
    elif callable(key):
        id = key(request)
        if id is not None:
            set_principal(scope, str(id))
    return scope


def _config(routes: Iterable[Route], global_limit: Any, key: Any, **overrides: Any) -> SyncRateLimitConfig:
    options: dict[str, Any] = dict(
        routes=list(routes),
        global_limit=global_limit,
        skip=list(_setting("SKIP", ())),
        shadow=list(_setting("SHADOW", ())),
        trusted_proxies=list(_setting("TRUSTED_PROXIES", ())),
        caller=_caller(key),
        structured_headers=bool(_setting("STRUCTURED_HEADERS", False)),
        key_prefix=str(_setting("KEY_PREFIX", "rl")),
        ipv6_prefix=int(_setting("IPV6_MASK", IPV6_PREFIX_DEFAULT)),
        outage_status=int(_setting("OUTAGE_STATUS", 429)),
    )
    options.update(overrides)
    return SyncRateLimitConfig(limiter(), **options)


def _route(entry: Any) -> Route:
    if isinstance(entry, Route):
        return Route(entry.name, entry.prefix, parse_django_rate(entry.policy), entry.cost, entry.methods)
    if isinstance(entry, dict):
        return Route(entry["name"], entry["prefix"], parse_django_rate(entry["rate"]), None, entry.get("methods"))
    name, prefix, rate, *rest = entry
    return Route(name, prefix, parse_django_rate(rate), None, rest[0] if rest else None)


def response_of(answer: Answer) -> HttpResponse:
    response = HttpResponse(answer.body, status=answer.status)
    for name, value in answer.headers:
        response[name.decode("latin-1")] = value.decode("latin-1")
    return response


def _add_fields(response: HttpResponse, fields: list[tuple[str, str]]) -> HttpResponse:
    if fields and not response.has_header(RATELIMIT_LIMIT.decode()):
        for name, value in fields:
            response[name] = value
    return response


class RateLimitMiddleware:
    """The settings' routes and global limit for every request (`MiddlewareNotUsed` when there are
    none: the decorator alone is in use). Put it after Django's AuthenticationMiddleware when keyed
    by user. The config (counts included) is `middleware.config`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        routes = [_route(e) for e in _setting("ROUTES", ())]
        global_rate = _setting("GLOBAL", None)
        if not routes and global_rate is None:
            raise MiddlewareNotUsed("RATELIMIT_ROUTES and RATELIMIT_GLOBAL are empty")
        self.key = _setting("KEY", "ip")
        self.config = _config(routes, parse_django_rate(global_rate) if global_rate is not None else None, self.key)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not _setting("ENABLE", True):
            return self.get_response(request)
        gate = check(self.config, _scope(request, self.key))
        if isinstance(gate, Answer):
            return response_of(gate)
        return _add_fields(self.get_response(request), gate.fields)


ALL = None


def ratelimit(rate: Policy | str, *, key: Any = None, group: str | None = None,
              method: str | Collection[str] | None = ALL, block: bool = True) -> Callable[[Any], Any]:
    """A view's own limit, as django-ratelimit's decorator: `rate` ("5/m", "5 per 15 minutes", or a
    policy), `key` ("ip", "user", "header:<name>", a function of the request; the settings'
    RATELIMIT_KEY by default), `group` (the limit's name in keys and fields; the view's dotted name by
    default), `method` (only those methods count), `block` (False: the view runs, with
    ``request.limited = True``). The fields go on the view's response.

    Its arguments are checked when it is applied (ConfigError: a rate that is none, an unknown key, a
    header key without a name), and so is the view: an ``async def`` view is refused (the decorator
    checks on a synchronous Limiter)."""
    policy = parse_django_rate(rate)
    if key is not None:
        _caller(key, "ratelimit(key=...)")

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        name = group or f"{view.__module__}.{view.__qualname__}"
        slot = f"view:{name}"
        if inspect.iscoroutinefunction(view):
            raise ConfigError(f"@ratelimit on {name}: an async def view is not supported (the decorator "
                              "checks on a synchronous Limiter); limit it with the ASGI middleware instead")
        Route(name, "/", policy, None, method)  # ConfigError now, not a 500 at its first request

        @functools.wraps(view)
        def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not _setting("ENABLE", True):
                return view(request, *args, **kwargs)
            chosen = key if key is not None else _setting("KEY", "ip")
            config = _state.get(slot)
            if config is None:
                config = _config([Route(name, "/", policy, None, method)], None, chosen, skip=[], shadow=[])
                _state[slot] = config
            gate = check(config, _scope(request, chosen))
            setattr(request, "limited", isinstance(gate, Answer))
            if isinstance(gate, Answer):
                if block:
                    return response_of(gate)
                return view(request, *args, **kwargs)
            assert isinstance(gate, Pass)
            return _add_fields(view(request, *args, **kwargs), gate.fields)

        setattr(limited, "ratelimit_config", lambda: _state.get(slot))
        return limited

    return decorator
