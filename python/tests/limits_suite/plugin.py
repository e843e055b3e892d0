"""A pytest plugin that runs `limits`' OWN storage tests (from its sdist's tests/) against this package's
storage: every test class that `limits` parametrizes over its storages gets this storage's URIs instead
(on a module server and on a stock server through the Lua library), and nothing else.

Loaded by run.py (`-p plugin`, rootdir the sdist, its conftest.py left out: it starts docker services).
The servers are started here for the session (servers.py, beside conftest.py), flushed before every
test (as `limits`' own fixtures flush theirs) and stopped at the end, also when tests fail.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # servers.py

from servers import Server, module_path  # noqa: E402

# The test classes that run against storages (the rest of limits' tests are about limits itself).
STORAGE_CLASSES = {
    "tests/test_storage.py": ["TestConcreteStorages"],
    "tests/test_strategy.py": ["TestFixedWindow", "TestSlidingWindow", "TestMovingWindow"],
    "tests/aio/test_storage.py": ["TestConcreteStorages"],
    "tests/aio/test_strategy.py": ["TestAsyncFixedWindow", "TestAsyncMovingWindow", "TestAsyncSlidingWindow"],
}

# Tests that cannot pass on this storage, by node id (without the parameter), and why. Each reason is
# a documented difference (python/README.md, "limits, slowapi, Flask-Limiter").
EXCLUDED: dict[str, str] = {
    "tests/test_strategy.py::TestMovingWindow::test_moving_window_huge_cost":
        "a moving-window cost of n is n RL.SLIDE calls (the log records one request per call): a cost of "
        "999,999 is 999,999 calls, not a test that ends in its window",
    "tests/aio/test_strategy.py::TestAsyncMovingWindow::test_moving_window_huge_cost":
        "as the synchronous test_moving_window_huge_cost",
    "tests/test_strategy.py::TestSlidingWindow::test_sliding_window_counter_previous_window":
        "RL.SLIDECOUNT's estimate is exact (previous * (window - elapsed) / window + current, in integers); "
        "limits' storages floor the previous window's weighted share first, so they admit a hit that this "
        "storage denies while that share's fraction lasts (less than one unit, at most window / previous "
        "seconds); the test expects the floored answer",
    "tests/aio/test_strategy.py::TestAsyncSlidingWindow::test_sliding_window_counter_previous_window":
        "as the synchronous test_sliding_window_counter_previous_window",
}

_servers: list[Server] = []


def _uris(async_: bool) -> list[tuple[str, str]]:
    prefix = "async+" if async_ else ""
    # A deadline of 2 s: limits' tests check behaviour, which a loaded machine must not turn into
    # the failure path.
    return [(f"{prefix}ratelimit://127.0.0.1:{s.port}/0?deadline=2",
             "ratelimit-module" if s.module else "ratelimit-lua") for s in _servers]


def _params(async_: bool, with_instance: bool) -> Any:
    from redis_ratelimit.contrib.limits import AsyncRatelimitStorage, RatelimitStorage

    instance = AsyncRatelimitStorage if async_ else RatelimitStorage
    if with_instance:
        return pytest.mark.parametrize("uri, args, expected_instance, fixture",
                                       [pytest.param(u, {}, instance, None, id=i) for u, i in _uris(async_)])
    return pytest.mark.parametrize("uri, args, fixture", [pytest.param(u, {}, None, id=i) for u, i in _uris(async_)])


def _stub_lazy_fixtures() -> None:
    """limits' test modules import pytest_lazy_fixtures.lf for their own storages' fixtures; this storage's
    parameters need none, so an absent package is stood in for."""
    try:
        import pytest_lazy_fixtures  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        stub = types.ModuleType("pytest_lazy_fixtures")
        stub.lf = lambda name: None  # type: ignore[attr-defined]
        sys.modules["pytest_lazy_fixtures"] = stub


def pytest_configure(config: pytest.Config) -> None:
    import redis_ratelimit.contrib.limits  # noqa: F401  (registers the schemes)

    if module_path().is_file():
        _servers.append(Server(module=True).start())
    else:
        print(f"limits suite: the module is not built ({module_path()}): the Lua library only")
    try:
        _servers.append(Server(module=False).start())
    except Exception:
        for server in _servers:
            server.cleanup()
        raise
    _stub_lazy_fixtures()
    root = Path(str(config.rootpath))
    sys.path.insert(0, str(root))
    import importlib

    utils: Any = importlib.import_module("tests.utils")
    utils.all_storage = _params(False, False)
    utils.moving_window_storage = _params(False, False)
    utils.sliding_window_counter_storage = _params(False, False)
    utils.async_all_storage = _params(True, False)
    utils.async_moving_window_storage = _params(True, False)
    utils.async_sliding_window_counter_storage = _params(True, False)
    for module_name, async_ in (("tests.test_storage", False), ("tests.aio.test_storage", True)):
        module = importlib.import_module(module_name)
        cls = module.TestConcreteStorages
        marks = [m for m in getattr(cls, "pytestmark", []) if m.name != "parametrize"]
        cls.pytestmark = marks + [_params(async_, True).mark]


def pytest_unconfigure(config: pytest.Config) -> None:
    for server in _servers:
        server.cleanup()
    _servers.clear()


@pytest.fixture(autouse=True)
def _flushed() -> Iterator[None]:
    for server in _servers:
        with server.client() as r:
            r.flushall()
    yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, dropped = [], []
    for item in items:
        path, _, rest = item.nodeid.partition("::")
        cls = rest.split("::")[0]
        if cls not in STORAGE_CLASSES.get(path, []):
            dropped.append(item)
            continue
        base = item.nodeid.split("[")[0]
        if base in EXCLUDED:
            item.add_marker(pytest.mark.skip(reason=f"excluded: {EXCLUDED[base]}"))
        keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep
    os.environ.setdefault("RL_LIMITS_SUITE", "1")
