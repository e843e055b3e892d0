"""Fixtures: real redis-server processes on free loopback ports (see servers.py), stopped at teardown,
also when the test fails.

- `module_server`: a module-enabled server (skipped, with the reason, when the module is not built);
- `stock_server`: a server without the module (the Lua library's engines);
- `servers`: a factory for more: `servers.redis(module=...)`, `servers.cluster(module=...)` (3 primaries),
  `servers.sentinel(module=...)` (a primary and one sentinel). Each Server can `hang()` (SIGSTOP),
  `resume()`, `stop()` and `restart()` (same port, empty).
"""

from __future__ import annotations

from typing import Iterator, Protocol

import pytest

from servers import Cluster, Sentinel, Server, module_path


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

    def redis(self, module: bool, args: tuple[str, ...] = ()) -> Server:
        if module:
            require_module()
        server = Server(module, args)
        self._own(server)
        return server.start()

    def cluster(self, module: bool = False) -> Cluster:
        if module:
            require_module()
        cluster = Cluster(module)
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
