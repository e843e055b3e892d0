"""What the `limits` storage asks the server, without any I/O (the sync and async storages drive it).

Each storage method is a *plan*: a generator that yields the commands it needs, `(command, keys, args)`,
receives each reply, and returns the method's result. `run_sync` and `run_async` drive a plan through a
`Limiter.call` / `AsyncLimiter.call`, so the two storages share every decision and only differ in I/O.

Keys. One key per limiter kind, so an app that changes strategy never meets another kind's state:
`{prefix}:fixed:{key}` (RL.FIXED), `{prefix}:moving:{key}` (RL.SLIDE), `{prefix}:sliding:{key}`
(RL.SLIDECOUNT), where `key` is what `limits` passes (`LIMITER/<identifiers>/<amount>/<multiples>/<per>`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, Union

from ..contract import BOUNDS, call, kind
from ..request_steps import Request

T = TypeVar("T")
Arg = Union[str, bytes, int, float]
Command = tuple[str, list[str], list[Arg]]
Plan = Generator[Command, Any, T]

#: The commands of the three kinds the storage decides with (the contract's): a fixed window, a sliding
#: log (`limits`' moving window) and a sliding window counter.
FIXED_COMMAND: str = kind("fixed_window")["command"]
SLIDE_COMMAND: str = kind("sliding_log")["command"]
SLIDECOUNT_COMMAND: str = kind("sliding_counter")["command"]

#: Seconds in each of `limits`' granularities (limits.limits.TIME_TYPES).
GRANULARITY_SECONDS: Mapping[str, int] = {
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
    "month": 30 * 86400,
    "year": 12 * 30 * 86400,
}
_LIMIT_IN_KEY = re.compile(r"/(\d+)/(\d+)/(second|minute|hour|day|month|year)\Z")

#: The limit RL.FIXED is given for a key that does not name its own (a direct `storage.incr` on a key
#: `limits` did not build): nothing is ever denied, so the reply is a plain counter. 2^53 - 1 is the
#: largest the Lua library answers exactly.
COUNTER_LIMIT = 2**53 - 1

#: RL.SLIDE's largest limit (docs/commands.md); above it the moving window cannot be kept as a log.
SLIDE_MAX_LIMIT: int = BOUNDS["max_log_limit"]

#: The request id RL.SLIDE records. Without DEDUP the id is not stored (two requests with one id count
#: as two), so one constant id costs nothing and reveals nothing.
_SLIDE_ID = "limits"


def limit_in_key(key: str, expiry: int) -> int | None:
    """The limit `limits` wrote into the key (`RateLimitItem.key_for`: `.../<amount>/<multiples>/<per>`).

    `FixedWindowRateLimiter` calls `storage.incr(key, expiry, amount)` and compares the count with the
    limit itself, so the limit reaches the storage only through the key. It counts only when the key's
    period agrees with `expiry` (`multiples * per == expiry`); otherwise None.
    """
    m = _LIMIT_IN_KEY.search(key)
    if m is None:
        return None
    amount, multiples, per = int(m.group(1)), int(m.group(2)), m.group(3)
    if multiples * GRANULARITY_SECONDS[per] != expiry:
        return None
    return amount


@dataclass(frozen=True)
class Reply:
    """The five integers every RL.* limiter replies (docs/commands.md)."""

    allowed: bool
    limit: int
    remaining: int
    retry_after_ms: int
    reset_after_ms: int

    @staticmethod
    def of(reply: Any) -> Reply:
        r = list(reply)
        return Reply(bool(int(r[0])), int(r[1]), int(r[2]), int(r[3]), int(r[4]))


def inspect_fields(reply: Any) -> dict[str, Any] | None:
    """RL.INSPECT's reply as a dict: None for a missing key; RESP2's flat array or RESP3's map."""
    if reply is None:
        return None
    if isinstance(reply, Mapping):
        items = list(reply.items())
    else:
        flat = list(reply)
        items = list(zip(flat[0::2], flat[1::2]))
    out: dict[str, Any] = {}
    for name, value in items:
        key = name.decode() if isinstance(name, bytes) else str(name)
        out[key] = value.decode() if isinstance(value, bytes) else value
    return out


def _inspect(key: str, *params: Arg) -> Command:
    """RL.INSPECT of `key` (the contract's call), with a limit's two parameters when given: what a
    request would meet now."""
    argv = call("inspect_peek", key=key, p1=params[0], p2=params[1]) if params else call("inspect", key=key)
    request = Request.of(argv)
    return request.command, request.keys, request.args


class Plans:
    """The storage's methods as plans, for one key prefix."""

    #: How many `(key, expiry)` pairs `fixed_target` remembers (then it starts again, empty).
    CACHE = 4096

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._fixed: dict[tuple[str, int], tuple[str, int]] = {}

    # Keys ---------------------------------------------------------------------------------------------
    def fixed_key(self, key: str) -> str:
        return f"{self.prefix}:fixed:{key}"

    def moving_key(self, key: str) -> str:
        return f"{self.prefix}:moving:{key}"

    def sliding_key(self, key: str) -> str:
        return f"{self.prefix}:sliding:{key}"

    def all_keys(self, key: str) -> list[str]:
        """`clear(key)`: the strategy is not named (limits before 5 clears the sliding window counter this
        way too), so every kind's key goes."""
        return [self.fixed_key(key), self.moving_key(key), self.sliding_key(key)]

    def pattern(self) -> str:
        """Every key of this storage (for `reset`)."""
        return f"{_glob_escape(self.prefix)}:*"

    # Fixed window -------------------------------------------------------------------------------------
    def fixed_target(self, key: str, expiry: int) -> tuple[str, int]:
        """`(the RL.FIXED key, the limit)` for `limits`' key and expiry (`limit_in_key`, or
        COUNTER_LIMIT), remembered: a hit on a key seen before neither parses nor formats it again."""
        found = self._fixed.get((key, expiry))
        if found is None:
            limit = limit_in_key(key, expiry)
            found = (self.fixed_key(key), COUNTER_LIMIT if limit is None else limit)
            if len(self._fixed) >= self.CACHE:
                self._fixed.clear()
            self._fixed[(key, expiry)] = found
        return found

    @staticmethod
    def fixed_count(reply: Any, amount: int) -> int:
        """`incr`'s answer from RL.FIXED's reply: the count after it when allowed, else the count plus
        `amount` (above the limit)."""
        r = list(reply)
        count = int(r[1]) - int(r[2])
        return count if int(r[0]) else count + amount

    def incr(self, key: str, expiry: int, amount: int) -> Plan[int]:
        """RL.FIXED, one atomic call. Allowed: the count after it (<= the limit). Denied: nothing is
        counted (RL.FIXED writes nothing for a denial), and the reply is the count plus `amount`, which is
        above the limit, so `limits` sees the denial it would have computed from its own counter. (The
        storages call `fixed_target` and `fixed_count` directly for a limit of 1 or more: one call, no
        plan to drive.)"""
        fixed_key, limit = self.fixed_target(key, expiry)
        if limit < 1:  # "0/minute": nothing fits; RL.FIXED takes no limit of 0
            count = yield from self.get(key)
            return count + amount
        return self.fixed_count((yield (FIXED_COMMAND, [fixed_key], [limit, expiry, amount])), amount)

    def get(self, key: str) -> Plan[int]:
        f = inspect_fields((yield _inspect(self.fixed_key(key))))
        return 0 if f is None else int(f.get("count", 0))

    def get_expiry(self, key: str) -> Plan[float]:
        f = inspect_fields((yield _inspect(self.fixed_key(key))))
        now = time.time()
        return now if f is None else now + max(0, int(f["ttl_ms"])) / 1000

    # Moving window ------------------------------------------------------------------------------------
    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int) -> Plan[bool]:
        """RL.SLIDE. The decision is one atomic call: `limit - amount + 1` as the limit is allowed exactly
        when `amount` more fit. RL.SLIDE records one entry per call, so a cost above 1 records its other
        `amount - 1` entries with calls right after (each bounded by `limit`): see the README for what
        that allows under concurrency."""
        if amount > limit:
            return False
        if amount <= 0:
            return True
        k = self.moving_key(key)
        r = Reply.of((yield (SLIDE_COMMAND, [k], [limit - amount + 1, expiry, _SLIDE_ID])))
        if not r.allowed:
            return False
        for _ in range(amount - 1):
            yield (SLIDE_COMMAND, [k], [limit, expiry, _SLIDE_ID])
        return True

    def get_moving_window(self, key: str, limit: int, expiry: int) -> Plan[tuple[float, int]]:
        """(the time of the oldest entry still counted, the entries counted), as `limits` defines them:
        of the newest `limit` entries in the window. From RL.INSPECT with the limit: `remaining` gives
        the count; the oldest entry's time is where a unit frees, `retry_after_ms` of an inspection whose
        limit is that count (read-only, a second call only when 2 or more entries are counted and the
        window is not full)."""
        k = self.moving_key(key)
        f = inspect_fields((yield _inspect(k, limit, expiry)))
        now = time.time()
        if f is None:
            return now, 0
        count = limit - int(f["remaining"])
        if count <= 0:
            return now, 0
        if int(f["remaining"]) == 0:
            return now + int(f["retry_after_ms"]) / 1000 - expiry, count
        if count == 1:  # the only entry is the newest: the window empties when it leaves
            return now + int(f["reset_after_ms"]) / 1000 - expiry, 1
        g = inspect_fields((yield _inspect(k, count, expiry)))
        now = time.time()
        if g is None:
            return now, 0
        if int(g["remaining"]) > 0:
            # Entries left the window between the two reads: the oldest still counted is newer; the
            # newest is a bound that errs towards a later reset.
            return now + int(g["reset_after_ms"]) / 1000 - expiry, count - int(g["remaining"])
        return now + int(g["retry_after_ms"]) / 1000 - expiry, count

    # Sliding window counter ---------------------------------------------------------------------------
    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int) -> Plan[bool]:
        r = Reply.of((yield (SLIDECOUNT_COMMAND, [self.sliding_key(key)], [limit, expiry, amount])))
        return r.allowed

    def get_sliding_window(self, key: str, expiry: int) -> Plan[tuple[int, float, int, float]]:
        """(previous count, seconds the previous window still weighs (plus one unit's decay time when its
        weight is fractional: see below), current count, seconds until the current window has stopped
        counting), `limits`' contract, from RL.INSPECT's `window_index`,
        `current`, `previous` and `ttl_ms`. The windows are aligned to multiples of `expiry` since the
        epoch, and the key expires at the end of the window after its own, so the server's time is
        `(window_index + 2) * window - ttl_ms`, exact to the millisecond, without a clock of our own."""
        f = inspect_fields((yield _inspect(self.sliding_key(key))))
        if f is None:
            return 0, 0.0, 0, 0.0
        window = expiry * 1000
        index = int(f["window_index"])
        now = (index + 2) * window - int(f["ttl_ms"])
        now_index, elapsed = divmod(now, window)
        if now_index == index:
            previous, current = int(f["previous"]), int(f["current"])
        elif now_index == index + 1:
            previous, current = int(f["current"]), 0
        else:
            return 0, 0.0, 0, 0.0
        weighs = (window - elapsed) / 1000
        if previous and previous * (window - elapsed) % window:
            # RL.SLIDECOUNT allows when previous x weight + current + cost <= limit, exactly: a fractional
            # weight counts as the next whole unit. limits computes test() and the remaining from this
            # tuple with the weight as a float (test: < limit - cost + 1; remaining: its floor): one
            # unit's decay time more (expiry / previous) makes its weight the exact one plus 1, so its
            # reads say what the next hit decides, and its reset (this % (expiry / previous)) is unchanged.
            weighs += expiry / previous
        return previous, weighs, current, (2 * window - elapsed) / 1000


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def run_sync(plan: Plan[T], call: Callable[[str, list[str], list[Arg]], Any]) -> T:
    """Drives a plan: each command through `call`, its reply sent back in."""
    try:
        command = next(plan)
        while True:
            command = plan.send(call(*command))
    except StopIteration as done:
        result: T = done.value
        return result


async def run_async(plan: Plan[T], call: Callable[[str, list[str], list[Arg]], Awaitable[Any]]) -> T:
    try:
        command = next(plan)
        while True:
            command = plan.send(await call(*command))
    except StopIteration as done:
        result: T = done.value
        return result


__all__ = ["Arg", "Command", "Plan", "Plans", "Reply", "inspect_fields", "limit_in_key", "run_async",
           "run_sync", "COUNTER_LIMIT", "SLIDE_MAX_LIMIT", "GRANULARITY_SECONDS"]
