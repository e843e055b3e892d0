"""The `limits` storage's URIs: which Redis (one server, a cluster, a Sentinel service) and the storage's
own options, read from the URI's query and the keyword options (`storage_from_string(uri, **options)`,
Flask-Limiter's `RATELIMIT_STORAGE_OPTIONS`, slowapi's `storage_options`).

    ratelimit://[user:password@]host:port[/db]       ratelimits://... (TLS)     ratelimit+unix:///path.sock
    ratelimit+cluster://[user:password@]host:port[,host:port...]
    ratelimit+sentinel://[user:password@]host:port[,host:port...]/service_name
    and each with `async+` in front for `limits.aio`.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Literal

from limits.errors import ConfigurationError

from ..base import DEFAULT_DEADLINE

BASE_SCHEMES = ("ratelimit", "ratelimits", "ratelimit+unix", "ratelimit+cluster", "ratelimit+sentinel")
SYNC_SCHEMES = list(BASE_SCHEMES)
ASYNC_SCHEMES = [f"async+{s}" for s in BASE_SCHEMES]

#: The storage's own options (everything else goes to the redis-py client, as `limits` does).
#:   key_prefix   the prefix of every key (default "LIMITS", as `limits`' redis storages)
#:   backend      "auto" (default), "module", "functions" or "scripts": the engine (see verify())
#:   deadline     seconds for each call, connect included (default: the limiter's, 0.1)
#:   service_name the Sentinel service when the URI's path does not name it
#:   sentinel_kwargs  passed to redis-py's Sentinel for the sentinels themselves
#: Accepted for compatibility with `limits`' own redis storages and ignored: use_replicas (reads go to
#: the primary: RL.INSPECT there is as cheap as a GET), implementation (always redis-py),
#: connection_pool (not with a limiter that owns its client).
_OWN = {"key_prefix", "backend", "deadline", "service_name", "sentinel_kwargs"}
_IGNORED = {"use_replicas", "implementation", "connection_pool"}


@dataclass
class Target:
    form: Literal["single", "cluster", "sentinel"]
    url: str = ""
    locations: list[tuple[str, int]] = field(default_factory=list)
    service: str | None = None
    key_prefix: str = "LIMITS"
    backend: str = "auto"
    deadline: float = DEFAULT_DEADLINE
    client_options: dict[str, Any] = field(default_factory=dict)
    sentinel_options: dict[str, Any] = field(default_factory=dict)


def parse(uri: str, options: dict[str, Any]) -> Target:
    parsed = urllib.parse.urlsplit(uri)
    scheme = parsed.scheme.lower().removeprefix("async+")
    if scheme not in BASE_SCHEMES:
        raise ConfigurationError(f"not a redis-ratelimit storage uri: {uri}")
    query = urllib.parse.parse_qs(parsed.query)
    own: dict[str, Any] = {k: v[-1] for k, v in query.items() if k in _OWN}
    rest_query = [(k, x) for k, v in query.items() if k not in _OWN | _IGNORED for x in v]
    own.update({k: v for k, v in options.items() if k in _OWN})
    client_options = {k: v for k, v in options.items() if k not in _OWN | _IGNORED}

    target = Target(form="single", client_options=client_options)
    target.key_prefix = str(own.get("key_prefix", target.key_prefix))
    target.backend = str(own.get("backend", target.backend)).lower()
    if target.backend not in ("auto", "module", "functions", "scripts"):
        raise ConfigurationError(f"backend must be auto, module, functions or scripts, not {target.backend!r}")
    if own.get("deadline") is not None:
        try:
            target.deadline = float(own["deadline"])
        except ValueError:
            raise ConfigurationError(f"deadline must be a number of seconds, not {own['deadline']!r}") from None
    query_text = urllib.parse.urlencode(rest_query)

    if scheme in ("ratelimit", "ratelimits", "ratelimit+unix"):
        redis_scheme = {"ratelimit": "redis", "ratelimits": "rediss", "ratelimit+unix": "unix"}[scheme]
        target.url = f"{redis_scheme}://{parsed.netloc}{parsed.path}" + (f"?{query_text}" if query_text else "")
        return target

    username, password = parsed.username, parsed.password
    if username:
        target.client_options.setdefault("username", urllib.parse.unquote(username))
    if password:
        target.client_options.setdefault("password", urllib.parse.unquote(password))
    target.client_options.update({k: v for k, v in rest_query})
    target.locations = _locations(uri, parsed.netloc)
    if scheme == "ratelimit+cluster":
        target.form = "cluster"
        if not target.locations and "startup_nodes" not in target.client_options:
            raise ConfigurationError(f"a cluster uri names at least one host:port: {uri}")
        return target

    target.form = "sentinel"
    target.service = parsed.path.strip("/") or (str(own["service_name"]) if own.get("service_name") else None)
    if not target.service:
        raise ConfigurationError(f"'service_name' not provided (ratelimit+sentinel://host:port/service): {uri}")
    if not target.locations:
        raise ConfigurationError(f"a sentinel uri names at least one sentinel host:port: {uri}")
    sentinel_options = dict(own.get("sentinel_kwargs") or {})
    for k in ("username", "password"):
        if k in target.client_options:
            sentinel_options.setdefault(k, target.client_options[k])
    target.sentinel_options = sentinel_options
    return target


def _locations(uri: str, netloc: str) -> list[tuple[str, int]]:
    hosts = netloc.rsplit("@", 1)[-1]
    out: list[tuple[str, int]] = []
    for loc in filter(None, (h.strip() for h in hosts.split(","))):
        sub = urllib.parse.urlsplit(f"x://{loc}")
        try:
            port = sub.port
        except ValueError:
            raise ConfigurationError(f"bad port in {loc!r}: {uri}") from None
        if sub.hostname is None or port is None:
            raise ConfigurationError(f"missing host or port in {loc!r}: {uri}")
        out.append((sub.hostname, port))
    return out


def _timeouts(target: Target, options: dict[str, Any]) -> dict[str, Any]:
    """The client's options, with socket timeouts of the deadline unless given: what the storage sends
    past the limiter (`clear`, `check`, `reset`) waits no longer for any one reply."""
    return {"socket_timeout": target.deadline, "socket_connect_timeout": target.deadline, **options}


def sync_client(target: Target) -> Any:
    """The redis-py client for the target (redis.Redis, RedisCluster, or a Sentinel's primary)."""
    import redis
    import redis.cluster
    import redis.sentinel

    if target.form == "single":
        return redis.Redis.from_url(target.url, **_timeouts(target, target.client_options))
    # Typed as Any: redis-py's annotations of these differ between its releases (5.0 leaves some
    # untyped), and the package supports them all.
    cluster: Any = redis.cluster
    sentinels: Any = redis.sentinel
    if target.form == "cluster":
        options = _timeouts(target, target.client_options)
        nodes = options.pop("startup_nodes", None) or [cluster.ClusterNode(h, p) for h, p in target.locations]
        return cluster.RedisCluster(startup_nodes=nodes, **options)
    sentinel = sentinels.Sentinel(
        target.locations, sentinel_kwargs=_timeouts(target, target.sentinel_options),
        **_timeouts(target, target.client_options))
    return sentinel.master_for(str(target.service))


def async_client(target: Target) -> Any:
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.asyncio.sentinel

    if target.form == "single":
        # A burst of concurrent hits waits for a free connection (within the limiter's deadline) instead
        # of failing with "Too many connections" once redis-py's default pool of 100 is in use.
        options = {"max_connections": 100, **_timeouts(target, target.client_options)}
        pool = redis.asyncio.BlockingConnectionPool.from_url(target.url, **options)
        return redis.asyncio.Redis(connection_pool=pool)
    if target.form == "cluster":
        options = _timeouts(target, target.client_options)
        nodes = options.pop("startup_nodes", None) or [redis.asyncio.cluster.ClusterNode(h, p)
                                                        for h, p in target.locations]
        return redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, **options)
    sentinels: Any = redis.asyncio.sentinel
    sentinel = sentinels.Sentinel(
        target.locations, sentinel_kwargs=_timeouts(target, target.sentinel_options),
        **_timeouts(target, target.client_options))
    return sentinel.master_for(str(target.service))
