"""Request planning: which limits a request is checked against (its route's, the global one, the
concurrency limits), under which keys and at what cost, or why it is not checked at all (skipped, on
an allow or deny list). No call to Redis is made here. As `client/src/http/plan.rs`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Union

from ..contract import HTTP
from .access import Access
from .caller import PRINCIPAL_STATE, TENANT_STATE, Caller, IPAddress, caller_tag, default_caller, group_ip
from .config import GLOBAL, RateLimitConfig, Route, Scope, log, resolve, skipped, state_of, under_prefix
from .forwarded import peer_ip, rewritten_by_server


@dataclass(frozen=True)
class PlannedLimit:
    """One limit of a request: its key, policy, what the request costs, and its name (the route's,
    or `all`) in headers and bodies."""

    key: str
    policy: Any
    cost: int
    name: str
    shadow: bool = False
    concurrency: bool = False


@dataclass(frozen=True)
class Plan:
    route_name: str
    caller: Caller
    limits: list[PlannedLimit]


@dataclass(frozen=True)
class Allowlisted:
    route_name: str


@dataclass(frozen=True)
class Refused:
    route_name: str


Step = Union[Plan, Allowlisted, Refused]

_warned_unknown = False
#: The package's logger (the ASGI server's rewrite of the client address is said there, once per config).
warn = logging.getLogger("redis_ratelimit")


def plan(config: RateLimitConfig, scope: Scope) -> Step | None:
    """What to do with the request of `scope`; None: pass it on untouched."""
    path: str = scope.get("path", "")
    if config.skip and skipped(path, config.skip):
        return None
    method: str = scope.get("method") or "GET"  # a WebSocket's handshake is a GET
    route = _match(config.routes, path, method)
    concurrency = _match(config.concurrency, path, method)
    if route is None and config.global_limit is None and concurrency is None and config.global_concurrency is None:
        return None
    peer = peer_ip(scope)
    if (config.proxies.nets and not config.warned_rewritten and peer is not None
            and not config.proxies.contains(peer) and rewritten_by_server(scope, peer)):
        _warn_rewritten(config, peer)
    client_ip = config.proxies.client_ip(peer, scope.get("headers") or ())
    ip = None if client_ip is None else group_ip(client_ip, config.ipv6_prefix)
    caller = config.caller(scope, ip) if config.caller is not None else default_caller(scope, ip)
    if caller.kind == "unknown" and peer is None:
        _warn_unknown(config)
    named = route or concurrency
    route_name = named.name if named is not None else GLOBAL
    if config.access_lists is not None:
        access = _access(config, scope, caller, client_ip)
        if access is Access.DENIED:
            return Refused(route_name)
        if access is Access.ALLOWED:
            return Allowlisted(route_name)
    # The cost as the route's function gives it: `check` refuses what it would refuse (1.5, -1: a
    # UsageError), never rounded here.
    cost = 1 if route is None or route.cost is None else route.cost(scope)
    tag = caller_tag(config.key_prefix, caller)
    limits: list[PlannedLimit] = []
    if route is not None:
        shadow = route.name in config.shadow_routes
        policy = route.policy_for(caller)
        limits.append(PlannedLimit(limit_key(tag, route.name, policy), policy, cost, route.name, shadow))
    if config.global_limit is not None:
        policy = resolve(config.global_limit, caller)
        limits.append(PlannedLimit(limit_key(tag, GLOBAL, policy), policy, cost, GLOBAL, config.global_shadow))
    # Leases of weight 1: a request in flight is one, whatever its rate cost.
    if concurrency is not None:
        policy = concurrency.policy_for(caller)
        limits.append(PlannedLimit(limit_key(tag, concurrency.name, policy), policy, 1, concurrency.name, False, True))
    if config.global_concurrency is not None:
        policy = resolve(config.global_concurrency, caller)
        limits.append(PlannedLimit(limit_key(tag, GLOBAL, policy), policy, 1, GLOBAL, False, True))
    return Plan(route_name, caller, limits)


def limit_key(tag: str, name: str, policy: Any) -> str:
    """The key of the limit `name` of the caller `tag` (``rl:{user:42}``): the contract's
    `http.limit_key`, ending with the owner of the policy's kind (``rl:{user:42}:api:token_bucket``), so
    a deploy that changes a limit's kind starts it afresh on a new key instead of meeting the other
    kind's state, while a change of its numbers alone keeps counting on the same key."""
    return str(HTTP["limit_key"]).format(tag=tag, name=name, owner=policy.KIND.owner)


def _match(routes: Any, path: str, method: str) -> Route | None:
    for r in routes:
        if r.matches(path, method):
            return r  # type: ignore[no-any-return]
    return None


def _access(config: RateLimitConfig, scope: Scope, caller: Caller, client_ip: IPAddress | None) -> Access:
    """What the lists say: the request's principal and tenant (the state's, and a custom caller's)
    and its client address, not grouped."""
    assert config.access_lists is not None
    state = state_of(scope)
    principals = [str(state[PRINCIPAL_STATE])] if state.get(PRINCIPAL_STATE) is not None else []
    tenants = [str(state[TENANT_STATE])] if state.get(TENANT_STATE) is not None else []
    if caller.kind == "user":
        principals.append(caller.id)
    elif caller.kind == "tenant":
        tenants.append(caller.id)
    return config.access_lists.access_of(principals, tenants, client_ip)


def _warn_rewritten(config: RateLimitConfig, peer: IPAddress) -> None:
    config.warned_rewritten = True
    warn.warning(
        "rate limit middleware: the ASGI server already took the client address (%s) from the request's "
        "X-Forwarded-For / Forwarded, and trusted_proxies is set too: whoever the server trusts can send "
        "any address and be limited under it. Run uvicorn with --no-proxy-headers (proxy_headers=False) and "
        "let trusted_proxies decide, or leave proxies to the server and set no trusted_proxies; said once",
        peer,
    )


def _warn_unknown(config: RateLimitConfig) -> None:
    global _warned_unknown
    if not _warned_unknown:
        _warned_unknown = True
        log.error(
            "rate limit middleware: a request without a peer address (no scope['client']): every such "
            "caller shares the key %s:{unknown}; said once",
            config.key_prefix,
        )
