"""What the middleware is configured with, checked once when the configuration is made: a
configuration that cannot work is refused with `ConfigError`, naming the route (the messages of the
Rust layer's `LayerError`)."""

from __future__ import annotations

import inspect
from collections import Counter
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Collection, Iterable, Mapping, MutableMapping, Sequence, Union

from .access import AccessLists
from .batch import Batcher
from .caller import IPV6_PREFIX_DEFAULT, Caller, IPAddress
from .forwarded import Network, TrustedProxies
from ..policy import Policy
from ..rate import parse_rate
from .policies import is_concurrency, is_policy

Scope = MutableMapping[str, Any]
#: A policy, or a function of the caller giving one (the caller's plan).
PolicySource = Union[Policy, Callable[[Caller], Policy]]
#: What a policy parameter takes: also a `limits` rate string ("10/minute"), made a SlidingCounter.
PolicyInput = Union[PolicySource, str]
#: A custom key choice: the ASGI scope and the client IP (through trusted proxies, grouped per /64).
CallerFn = Callable[[Scope, Union[IPAddress, None]], Caller]
#: What a request costs, from its ASGI scope.
CostFn = Callable[[Scope], int]
#: The application's own denial answer: an ASGI app (a Starlette `Response` is one).
DenialFn = Callable[[Any], Callable[[Scope, Any, Any], Awaitable[None]]]

#: Where the middleware leaves its configuration in the ASGI scope of a request it saw.
CONFIG_SCOPE = "redis_ratelimit.config"

#: The global limit's name in keys, headers and bodies.
GLOBAL = "all"

log = logging.getLogger("redis_ratelimit.web")


class ConfigError(ValueError):
    """A middleware configuration that cannot work as written."""


@dataclass(frozen=True)
class Route:
    """Requests under `prefix` (whole segments: `/api` matches `/api` and `/api/items`, not
    `/apiary`; a prefix ending in `/` matches what is below it) are limited by `policy` per caller,
    under `name` (in keys, headers and bodies). `policy` may be a function of the `Caller` (plans).
    `cost` says what a request costs (default 1). `methods` (``["POST"]``) limits only requests of those
    HTTP methods (a WebSocket's handshake is a GET); the others go on to the next matching route."""

    name: str
    prefix: str
    policy: PolicyInput
    cost: CostFn | None = None
    methods: Collection[str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", from_rate(self.policy))
        mistake = source_mistake(f"route '{self.name}'", "policy", self.policy)
        if mistake is None and self.cost is not None and not callable(self.cost):
            mistake = (f"route '{self.name}': cost must be a function of the ASGI scope giving an int "
                       f"(cost=lambda scope: 2), not {self.cost!r}")
        if mistake is None and self.methods is not None:
            given = [self.methods] if isinstance(self.methods, str) else list(self.methods)
            if not given or not all(isinstance(m, str) and m.strip() for m in given):
                mistake = (f"route '{self.name}': methods must be HTTP method names (methods=[\"POST\"]), "
                           f"not {self.methods!r}")
            else:
                object.__setattr__(self, "methods", frozenset(m.strip().upper() for m in given))
        if mistake is not None:
            raise ConfigError(mistake)

    def matches(self, path: str, method: str) -> bool:
        """True when a request of `method` to `path` is this route's."""
        return under_prefix(path, self.prefix) and (self.methods is None or method in self.methods)

    def policy_for(self, caller: Caller) -> Any:
        return resolve(self.policy, caller)


_POLICIES = "a policy (TokenBucket, SlidingLog, SlidingCounter, FixedWindow, Concurrency)"


def from_rate(source: Any) -> Any:
    """A `limits` rate string ("10/minute") as the sliding window counter it means (`parse_rate`);
    anything else as it is (a string that is no rate string too: `source_mistake` names it)."""
    if isinstance(source, str):
        try:
            return parse_rate(source)
        except ValueError:
            return source
    return source


def source_mistake(where: str, parameter: str, source: Any) -> str | None:
    """What is wrong with a policy parameter (`route 'api'`'s `policy`), or None: it takes a policy or
    a function of the `Caller` giving one (a `limits` rate string is made a policy before)."""
    if is_policy(source) or (callable(source) and not isinstance(source, type)):
        return None
    hint = " (nor a rate string: \"10/minute\", \"5 per 15 minutes\")" if isinstance(source, str) else ""
    return (f"{where}: {parameter} must be {_POLICIES} or a function of the Caller giving one, "
            f"not {source!r} ({type(source).__name__}){hint}")


def resolve(source: PolicyInput, caller: Caller) -> Any:
    """The policy of `source` for `caller`: a policy as it is, a function's answer."""
    return _policy_of(source, caller)


def _policy_of(source: Any, caller: Caller) -> Any:
    if is_policy(source) or not callable(source):
        return source
    return source(caller)


@dataclass
class RateLimitConfig:
    """The middleware's configuration, checked when made (`ConfigError` names the first mistake).

    - `routes`: rate limits by path prefix (the longest matching prefix wins);
    - `global_limit`: a per-caller limit over all routes, checked with the route's in one atomic call;
    - `concurrency` / `global_concurrency`: at most so many requests of a caller in flight (key
      `<prefix>:{<caller>}:<name>:concurrency`), the slot held until the response body has been sent;
    - `skip`: paths never limited, exact or, ending in `/`, a prefix;
    - `shadow`: names of limits (a route's, or `all`) decided and counted but never enforced;
    - `trusted_proxies`: networks whose `Forwarded` / `X-Forwarded-For` are believed (none);
    - `caller`: a custom key choice; by default the principal, the tenant (`set_principal`,
      `set_tenant`), then the client IP, IPv6 per `ipv6_prefix` (64) bits;
    - `structured_headers`: also the draft's `RateLimit-Policy` and `RateLimit` fields;
    - `batch`: the decisions of requests that arrive together go to Redis in one pipeline (each
      still its own atomic command; on by default, for a single server's client);
    - `outage_status`: the status of a denial by the closed failure policy (429; 503 tells callers the
      outage is not their overuse); `on_denial`: your own answer; `access_lists`: allow and deny lists.
    """

    limiter: Any
    routes: Sequence[Route] = ()
    global_limit: PolicyInput | None = None
    concurrency: Sequence[Route] = ()
    global_concurrency: PolicySource | None = None
    skip: Sequence[str] = ()
    shadow: Sequence[str] = ()
    trusted_proxies: Iterable[str | Network] | TrustedProxies = ()
    caller: CallerFn | None = None
    structured_headers: bool = False
    key_prefix: str = "rl"
    ipv6_prefix: int = IPV6_PREFIX_DEFAULT
    outage_status: int = 429
    on_denial: DenialFn | None = None
    access_lists: AccessLists | None = None
    #: Send the decisions of requests that arrive together in one pipeline (`batch.py`).
    batch: bool = True
    # Derived when made.
    #: Decisions counted as the Rust layer's `ratelimit_http_requests_total{route, limit, outcome}`:
    #: (route, limit, outcome) -> count; outcomes `allowed`, `denied`, `degraded_allowed`,
    #: `degraded_denied`, their `shadow_` forms, `allowlisted`, `denylisted`.
    counts: Counter[tuple[str, str, str]] = field(init=False, repr=False)
    proxies: TrustedProxies = field(init=False)
    checks: Batcher = field(init=False, repr=False)
    shadow_routes: frozenset[str] = field(init=False)
    global_shadow: bool = field(init=False)
    #: Whether the middleware said that the ASGI server rewrote the client address (`plan.py`).
    warned_rewritten: bool = field(init=False, default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.counts = Counter()
        self.global_limit = from_rate(self.global_limit)
        self.routes, self.concurrency = tuple(self.routes), tuple(self.concurrency)
        self.skip = tuple(self.skip)
        self.shadow = tuple(dict.fromkeys(self.shadow))
        tp = self.trusted_proxies
        self.proxies = tp if isinstance(tp, TrustedProxies) else TrustedProxies(tp)
        self.shadow_routes = frozenset(self.shadow)
        self.global_shadow = GLOBAL in self.shadow_routes and self.global_limit is not None
        mistake = self.first_mistake()
        if mistake is not None:
            raise ConfigError(mistake)
        self.checks = Batcher(self.limiter)
        self.checks.enabled = self.checks.enabled and self.batch
        # Matched longest prefix first (checked above in the order written, as named there).
        # Of one prefix, a route of some methods before one of all.
        self.routes = tuple(sorted(self.routes, key=lambda r: (-len(r.prefix), r.methods is None)))
        self.concurrency = tuple(sorted(self.concurrency, key=lambda r: (-len(r.prefix), r.methods is None)))

    def limiter_mistake(self) -> str | None:
        """What is wrong with the limiter for this middleware (the ASGI one needs an AsyncLimiter)."""
        if not inspect.iscoroutinefunction(getattr(self.limiter, "check_all", None)):
            return f"the middleware needs an AsyncLimiter (redis.asyncio), not {type(self.limiter).__name__}"
        return None

    def first_mistake(self) -> str | None:
        """What cannot work, in the order the Rust layer checks it (after the limiter's kind)."""
        m = self.limiter_mistake()
        if m is not None:
            return m
        for i, route in enumerate(self.routes):
            m = _limit_mistake(self.routes[:i], route, concurrency=False)
            if m is None and route.name == GLOBAL:
                m = f"route '{route.name}': the name is reserved for the global limit's key"
            if m is not None:
                return m
        for i, route in enumerate(self.concurrency):
            m = _limit_mistake(self.concurrency[:i], route, concurrency=True)
            if m is not None:
                return m
        for source, concurrency, parameter in ((self.global_limit, False, "global_limit"),
                                               (self.global_concurrency, True, "global_concurrency")):
            if source is None:
                continue
            m = source_mistake(f"limit '{GLOBAL}'", parameter, source)
            if m is not None:
                return m
            if is_policy(source) and is_concurrency(source) != concurrency:
                return _kind_mistake(GLOBAL, concurrency)
        if not 0 <= self.ipv6_prefix <= 128:
            return f"IPv6 prefix /{self.ipv6_prefix}: must be at most 128"
        if not (self.routes or self.global_limit is not None or self.concurrency or self.global_concurrency is not None):
            return "the layer limits nothing: add a route or a global limit"
        names = [f"'{r.name}'" for r in self.routes]
        for name in self.shadow:
            if not any(r.name == name for r in self.routes) and not (name == GLOBAL and self.global_limit is not None):
                known = names + (["'all'"] if self.global_limit is not None else [])
                return f"shadow '{name}': there is no limit of that name (limits: {', '.join(known)})"
        return None


def _limit_mistake(existing: Sequence[Route], route: Route, concurrency: bool) -> str | None:
    if any(r.name == route.name for r in existing):
        return f"route '{route.name}' is defined twice"
    first = next((r for r in existing if r.prefix == route.prefix and _same_methods(r, route)), None)
    if first is not None:
        return (
            f"routes '{first.name}' and '{route.name}' have the same prefix {route.prefix!r}: "
            f"'{route.name}' would never match"
        )
    if not route.prefix.startswith("/"):
        return f"route '{route.name}': the prefix {route.prefix!r} must start with '/'"
    if is_policy(route.policy) and is_concurrency(route.policy) != concurrency:
        return _kind_mistake(route.name, concurrency)
    if concurrency and route.cost is not None:
        return f"limit '{route.name}': a concurrency limit takes no cost (a request in flight is one)"
    return None


def _same_methods(a: Route, b: Route) -> bool:
    """Two routes of one prefix that would take the same request: both of every method, or of one
    method in common (a route of some methods is checked before one of all)."""
    if a.methods is None or b.methods is None:
        return a.methods is None and b.methods is None
    return bool(set(a.methods) & set(b.methods))


def _kind_mistake(name: str, concurrency: bool) -> str:
    expected = "a concurrency policy (Concurrency)" if concurrency else "a rate policy"
    return f"limit '{name}': expected {expected}"


def record(config: RateLimitConfig, route: str, limit: str, outcome: str) -> None:
    config.counts[(route, limit, outcome)] += 1


def outcome_of(allowed: bool, degraded: bool, shadow: bool) -> str:
    """The `outcome` label of a decision; a shadow limit's says what enforcing it would have done."""
    outcome = ("degraded_" if degraded else "") + ("allowed" if allowed else "denied")
    return "shadow_" + outcome if shadow else outcome


def under_prefix(path: str, prefix: str) -> bool:
    """True when `path` is `prefix` or below it, by whole segments."""
    if not path.startswith(prefix):
        return False
    rest = path[len(prefix) :]
    return not rest or rest.startswith("/") or prefix.endswith("/")


def skipped(path: str, skip: Sequence[str]) -> bool:
    return any(path == s or (s.endswith("/") and path.startswith(s)) for s in skip)


def state_of(scope: Mapping[str, Any]) -> Mapping[str, Any]:
    state = scope.get("state")
    return state if isinstance(state, Mapping) else {}
