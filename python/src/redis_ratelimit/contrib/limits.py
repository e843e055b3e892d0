"""A storage for `limits` (and so for Flask-Limiter and slowapi) on the redis-ratelimit module, or on its
Lua library where the module cannot be loaded.

Importing this module registers the storage with `limits` under these schemes::

    import redis_ratelimit.contrib.limits  # noqa: F401  (registers the schemes)

    ratelimit://host:port/db          ratelimits://... (TLS)      ratelimit+unix:///path/to.sock
    ratelimit+cluster://host:port,host:port
    ratelimit+sentinel://host:port,host:port/service_name
    async+ratelimit://...             (and async+ before each of the others, for limits.aio)

Each strategy is one atomic call: the fixed window RL.FIXED, the moving window RL.SLIDE, the sliding
window counter RL.SLIDECOUNT; reads (`get`, `get_expiry`, `get_moving_window`, `get_sliding_window`)
are RL.INSPECT, read-only; `clear` deletes the keys; `reset` deletes every key under the prefix. The
calls go through `Limiter.call` / `AsyncLimiter.call`, so the engine is the module, or the Lua library
through FCALL or EVALSHA, as `verify()` says. What differs from `limits`' contract is in the package's
README, section "limits, slowapi, Flask-Limiter".
"""

from __future__ import annotations

from typing import Any

import redis
from limits.aio.storage import MovingWindowSupport as AsyncMovingWindowSupport
from limits.aio.storage import SlidingWindowCounterSupport as AsyncSlidingWindowCounterSupport
from limits.aio.storage import Storage as AsyncStorage
from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
from limits.storage.base import TimestampedSlidingWindow

from .. import AsyncLimiter, Backend, FailurePolicy, Limiter, Verified
from ..errors import CallError
from . import _limits_uri
from ._limits_plan import FIXED_COMMAND, Arg, Plans, run_async, run_sync

__all__ = ["RatelimitStorage", "AsyncRatelimitStorage"]


def _limiter_options(target: _limits_uri.Target) -> dict[str, Any]:
    return {
        # `call` raises instead of deciding; limits' callers (Flask-Limiter's in-memory fallback,
        # swallow_errors) make their own choice when the storage fails.
        "failure": FailurePolicy.closed(),
        "backend": Backend(target.backend),
        "name": "limits",
        "deadline": target.deadline,
    }


def _no_elastic_expiry(elastic_expiry: bool) -> None:
    """`limits` before 5.0 passes `elastic_expiry` (False but for its deprecated elastic strategy)."""
    if elastic_expiry:
        raise NotImplementedError("the elastic-expiry fixed window (removed in limits 5) is not supported: "
                                  f"a window that moves with every hit is not {FIXED_COMMAND}'s")


class RatelimitStorage(Storage, MovingWindowSupport, SlidingWindowCounterSupport, TimestampedSlidingWindow):
    """`limits` storage on redis-ratelimit (synchronous): for `limits.strategies`, Flask-Limiter and
    slowapi. Built by `limits.storage.storage_from_string("ratelimit://...")`.

    It is a `TimestampedSlidingWindow`: the sliding window counter's windows are aligned to multiples of
    the period since the Unix epoch (RL.SLIDECOUNT's), as `limits`' memory and memcached storages' are.
    """

    STORAGE_SCHEME = _limits_uri.SYNC_SCHEMES

    def __init__(self, uri: str, wrap_exceptions: bool = False, **options: Any) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions)
        self.target = _limits_uri.parse(uri, dict(options))
        self.key_prefix = self.target.key_prefix
        self.plans = Plans(self.key_prefix)
        self.storage = _limits_uri.sync_client(self.target)
        self.limiter = Limiter(self.storage, **_limiter_options(self.target))

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return (redis.RedisError, CallError)

    def _call(self, command: str, keys: list[str], args: list[Arg]) -> Any:
        return self.limiter.call(command, keys, args)

    def verify(self) -> Verified:
        """Which engine the storage's calls take, and why (`Limiter.verify`)."""
        return self.limiter.verify()

    # Fixed window
    def incr(self, key: str, expiry: int, amount: int = 1, elastic_expiry: bool = False) -> int:
        _no_elastic_expiry(elastic_expiry)
        expiry = int(expiry)
        fixed_key, limit = self.plans.fixed_target(key, expiry)
        if limit < 1:
            return run_sync(self.plans.incr(key, expiry, amount), self._call)
        # The plan's one RL.FIXED, sent without driving a generator (the hit every request makes).
        return self.plans.fixed_count(self.limiter.call(FIXED_COMMAND, [fixed_key], [limit, expiry, amount]), amount)

    def get(self, key: str) -> int:
        return run_sync(self.plans.get(key), self._call)

    def get_expiry(self, key: str) -> float:
        return run_sync(self.plans.get_expiry(key), self._call)

    def clear(self, key: str) -> None:
        self.storage.delete(*self.plans.all_keys(key))

    # Moving window
    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return run_sync(self.plans.acquire_entry(key, limit, int(expiry), amount), self._call)

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        return run_sync(self.plans.get_moving_window(key, limit, int(expiry)), self._call)

    # Sliding window counter
    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return run_sync(self.plans.acquire_sliding_window_entry(key, limit, int(expiry), amount), self._call)

    def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        return run_sync(self.plans.get_sliding_window(key, int(expiry)), self._call)

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self.storage.delete(self.plans.sliding_key(key))

    # The storage as a whole
    def check(self) -> bool:
        try:
            return bool(self.storage.ping())
        except Exception:  # noqa: BLE001 - limits' contract: unhealthy, never an error
            return False

    def reset(self) -> int | None:
        """Deletes every key under the prefix (SCAN, on every primary of a cluster); the number deleted."""
        deleted = 0
        batch: list[Any] = []
        for key in self.storage.scan_iter(match=self.plans.pattern(), count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += int(self.storage.delete(*batch))
                batch.clear()
        if batch:
            deleted += int(self.storage.delete(*batch))
        return deleted


class AsyncRatelimitStorage(AsyncStorage, AsyncMovingWindowSupport, AsyncSlidingWindowCounterSupport,
                            TimestampedSlidingWindow):
    """`limits.aio` storage on redis-ratelimit (asyncio, redis.asyncio): for `limits.aio.strategies`.
    Built by `limits.storage.storage_from_string("async+ratelimit://...")`."""

    STORAGE_SCHEME = _limits_uri.ASYNC_SCHEMES

    def __init__(self, uri: str, wrap_exceptions: bool = False, **options: Any) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions)
        self.target = _limits_uri.parse(uri, dict(options))
        self.key_prefix = self.target.key_prefix
        self.plans = Plans(self.key_prefix)
        self.storage = _limits_uri.async_client(self.target)
        self.limiter = AsyncLimiter(self.storage, **_limiter_options(self.target))

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return (redis.RedisError, CallError)

    async def _call(self, command: str, keys: list[str], args: list[Arg]) -> Any:
        return await self.limiter.call(command, keys, args)

    async def verify(self) -> Verified:
        return await self.limiter.verify()

    async def incr(self, key: str, expiry: int, amount: int = 1, elastic_expiry: bool = False) -> int:
        _no_elastic_expiry(elastic_expiry)
        expiry = int(expiry)
        fixed_key, limit = self.plans.fixed_target(key, expiry)
        if limit < 1:
            return await run_async(self.plans.incr(key, expiry, amount), self._call)
        return self.plans.fixed_count(await self.limiter.call(FIXED_COMMAND, [fixed_key], [limit, expiry, amount]),
                                      amount)

    async def get(self, key: str) -> int:
        return await run_async(self.plans.get(key), self._call)

    async def get_expiry(self, key: str) -> float:
        return await run_async(self.plans.get_expiry(key), self._call)

    async def clear(self, key: str) -> None:
        await self.storage.delete(*self.plans.all_keys(key))

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return await run_async(self.plans.acquire_entry(key, limit, int(expiry), amount), self._call)

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        return await run_async(self.plans.get_moving_window(key, limit, int(expiry)), self._call)

    async def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return await run_async(self.plans.acquire_sliding_window_entry(key, limit, int(expiry), amount),
                               self._call)

    async def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        return await run_async(self.plans.get_sliding_window(key, int(expiry)), self._call)

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        await self.storage.delete(self.plans.sliding_key(key))

    async def check(self) -> bool:
        try:
            return bool(await self.storage.ping())
        except Exception:  # noqa: BLE001
            return False

    async def reset(self) -> int | None:
        deleted = 0
        batch: list[Any] = []
        async for key in self.storage.scan_iter(match=self.plans.pattern(), count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += int(await self.storage.delete(*batch))
                batch.clear()
        if batch:
            deleted += int(await self.storage.delete(*batch))
        return deleted
