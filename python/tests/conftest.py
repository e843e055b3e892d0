"""Fixtures: real redis-server processes on free loopback ports (see servers.py), stopped at teardown,
also when the test fails.

- `module_server`: a module-enabled server (skipped, with the reason, when the module is not built);
- `stock_server`: a server without the module (the Lua library's engines);
- `servers`: a factory for more: `servers.redis(module=...)`, `servers.cluster(module=...)` (3 primaries),
  `servers.sentinel(module=...)` (a primary and one sentinel). Each Server can `hang()` (SIGSTOP),
  `resume()`, `stop()` and `restart()` (same port, empty);
- `engine`: a server and a backend, for each engine (the module; the library through AUTO, FCALL and
  EVALSHA on a stock server), with the name verify() gives it;
- `make_limiter`: a Limiter or an AsyncLimiter (called through `Blocking`) on a server or a client.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

import httpx
import pytest
import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

from redis_ratelimit import AsyncLimiter, Backend, FailurePolicy, Limiter
from servers import HOST, LONG_DEADLINE, SENTINEL_SERVICE, Cluster, Sentinel, Server, aclose, module_path
from web_serve import Served


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def lines() -> Iterator[Lines]:
    """A handler on the logger `redis_ratelimit` itself (not the root's, not the last-resort one)."""
    handler = Lines()
    logger = logging.getLogger("redis_ratelimit")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


class _Owned(Protocol):
    def cleanup(self) -> None: ...


def require_module() -> None:
    if not module_path().is_file():
        pytest.skip(f"the module is not built: {module_path()} (make build, or set RL_MODULE)")


class Servers:
    """Starts servers for one test and stops every one of them at its teardown."""

    def __init__(self) -> None:
        self.owned: list[_Owned] = []

    def _own(self, thing: _Owned) -> None:
        self.owned.append(thing)

    def redis(self, module: bool, args: tuple[str, ...] = (), binary: str | None = None) -> Server:
        if module:
            require_module()
        server = Server(module, args, binary=binary)
        self._own(server)
        return server.start()

    def cluster(self, module: bool = False, replicas: int = 0) -> Cluster:
        if module:
            require_module()
        cluster = Cluster(module, replicas)
        self._own(cluster)
        return cluster.start()

    def sentinel(self, module: bool = False) -> Sentinel:
        if module:
            require_module()
        sentinel = Sentinel(module)
        self._own(sentinel)
        return sentinel.start()

    def cleanup(self) -> None:
        for thing in reversed(self.owned):
            thing.cleanup()
        self.owned.clear()


@pytest.fixture
def servers() -> Iterator[Servers]:
    owner = Servers()
    try:
        yield owner
    finally:
        owner.cleanup()


@pytest.fixture
def module_server(servers: Servers) -> Server:
    return servers.redis(module=True)


@pytest.fixture
def stock_server(servers: Servers) -> Server:
    return servers.redis(module=False)


# Engines: each limiter behaviour is tested on the module and on the Lua library through FCALL and
# EVALSHA (a stock server), and through the sync and the asyncio limiter.

@dataclass(frozen=True)
class EngineCase:
    server: Server
    backend: Backend
    expected: str  # what verify() names: module, functions, scripts


ENGINES = [
    pytest.param(("module", Backend.AUTO, "module"), id="module"),
    pytest.param(("stock", Backend.AUTO, "functions"), id="library-auto"),
    pytest.param(("stock", Backend.FUNCTIONS, "functions"), id="fcall"),
    pytest.param(("stock", Backend.SCRIPTS, "scripts"), id="evalsha"),
]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, servers: Servers) -> EngineCase:
    kind, backend, expected = request.param
    return EngineCase(servers.redis(module=kind == "module"), backend, expected)


class Blocking:
    """An AsyncLimiter whose methods are called like a Limiter's: each coroutine runs to its end on the
    fixture's event loop (so one test body covers both limiters)."""

    def __init__(self, limiter: AsyncLimiter, loop: asyncio.AbstractEventLoop) -> None:
        self.limiter = limiter
        self.loop = loop

    def __getattr__(self, name: str) -> Any:
        member = getattr(self.limiter, name)
        if not inspect.iscoroutinefunction(member):
            return member

        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self.loop.run_until_complete(member(*args, **kwargs))

        return blocking


MakeLimiter = Callable[..., Any]


@pytest.fixture(params=["sync", "async"])
def make_limiter(request: pytest.FixtureRequest) -> Iterator[MakeLimiter]:
    """`make_limiter(target, failure, client={...}, **settings)`: a Limiter, or an AsyncLimiter called
    through `Blocking`, on a new client (with the `client` options: username, password, ...) of a
    Server, a Cluster or a Sentinel's primary, closed at teardown; or on a client given (of the mode's
    kind). The deadline is LONG_DEADLINE (5 s) unless given (tests of the deadline give theirs)."""
    loop = asyncio.new_event_loop()
    closers: list[Callable[[], Any]] = []

    def make(target: Any, failure: FailurePolicy | None = None, *, client: dict[str, Any] | None = None,
             **settings: Any) -> Any:
        failure = failure or FailurePolicy.closed()
        options = client or {}
        # Behaviour, not speed: a loaded test machine must not turn answers into degraded decisions.
        settings.setdefault("deadline", LONG_DEADLINE)
        if request.param == "sync":
            sync = _sync_client(target, options)
            closers.append(sync.close)
            return Limiter(sync, failure, **settings)
        aclient = _async_client(target, options)
        closers.append(lambda: loop.run_until_complete(aclose(aclient)))
        return Blocking(AsyncLimiter(aclient, failure, **settings), loop)

    try:
        yield make
    finally:
        for close in closers:
            try:
                close()
            except Exception:
                pass
        loop.close()


def _sync_client(target: Any, options: dict[str, Any]) -> Any:
    if isinstance(target, Server):
        return target.client(**options)
    if isinstance(target, Cluster):
        return target.client(**options)
    if isinstance(target, Sentinel):
        sentinel: Any = redis.sentinel.Sentinel
        return sentinel(target.sentinels, socket_timeout=5).master_for(SENTINEL_SERVICE, socket_timeout=5, **options)
    return target


def _async_client(target: Any, options: dict[str, Any]) -> Any:
    if isinstance(target, Server):
        return redis.asyncio.Redis(host=HOST, port=target.port, **options)
    if isinstance(target, Cluster):
        return redis.asyncio.RedisCluster(host=HOST, port=target.nodes[0].port, **options)
    if isinstance(target, Sentinel):
        sentinel: Any = redis.asyncio.sentinel.Sentinel
        return sentinel(target.sentinels, socket_timeout=5).master_for(SENTINEL_SERVICE, socket_timeout=5, **options)
    return target


@pytest.fixture
def serve() -> Iterator[Any]:
    """`serve(app)` serves an ASGI app on a free port (uvicorn) and gives an httpx client on it; every app
    served is stopped when the test ends."""
    started: list[Served] = []

    def start(app: Any) -> httpx.Client:
        served = Served(app).start()
        started.append(served)
        return httpx.Client(base_url=served.url, timeout=10)

    yield start
    for served in started:
        served.stop()

