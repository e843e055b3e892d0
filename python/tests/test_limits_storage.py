"""The `limits` storage (redis_ratelimit.contrib.limits), synchronous, through `limits`' own strategies: on a
module server and on a stock server through the Lua library; one atomic call per hit; reads, clear and
reset; cluster and Sentinel URIs; URI parsing; errors."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from limits import RateLimitItem, RateLimitItemPerMinute, RateLimitItemPerSecond, RateLimitItemPerYear, strategies
from limits.errors import ConfigurationError, StorageError
from limits.storage import storage_from_string

import redis_ratelimit.contrib.limits  # noqa: F401  (registers the schemes)
from redis_ratelimit import CallError
from redis_ratelimit.contrib._limits_plan import COUNTER_LIMIT, inspect_fields, limit_in_key
from redis_ratelimit.contrib._limits_uri import parse
from redis_ratelimit.contrib.limits import RatelimitStorage
from clock import clear_of_minute_edge
from servers import HOST, LONG_DEADLINE, SENTINEL_SERVICE, Server, free_port

Strategy = type[strategies.FixedWindowRateLimiter | strategies.MovingWindowRateLimiter
                 | strategies.SlidingWindowCounterRateLimiter]
STRATEGIES: list[Strategy] = [strategies.FixedWindowRateLimiter, strategies.MovingWindowRateLimiter,
                              strategies.SlidingWindowCounterRateLimiter]


@pytest.fixture(params=["module", "lua"])
def server(request: pytest.FixtureRequest, servers: Any) -> Server:
    s: Server = servers.redis(module=request.param == "module")
    return s


# Behaviour tests: a deadline that a loaded machine cannot turn into the failure path (the
# deadline's own tests give theirs).
DEADLINE = f"deadline={LONG_DEADLINE:g}"


def storage_on(server: Server, **options: Any) -> RatelimitStorage:
    options.setdefault("deadline", LONG_DEADLINE)
    storage = storage_from_string(f"ratelimit://{HOST}:{server.port}/0", **options)
    assert isinstance(storage, RatelimitStorage)
    return storage


class Sent:
    """The commands clients send, as MONITOR shows them (those a Lua function calls are told apart)."""

    END = "rl-monitor-end"

    def __init__(self, server: Server) -> None:
        self.server = server
        self.commands: list[str] = []
        self.client = server.client()
        self.monitor = self.client.monitor()  # type: ignore[no-untyped-call]
        self.monitor.__enter__()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            seen = self.monitor.next_command()
            if self.END in seen["command"]:
                return
            if seen.get("client_type") != "lua":
                self.commands.append(seen["command"].split()[0].upper())

    def stop(self) -> list[str]:
        with self.server.client() as r:
            r.echo(self.END)
        self.thread.join(10)
        self.monitor.__exit__()
        self.client.close()
        return [c for c in self.commands if c not in ("HELLO", "CLIENT", "ECHO")]


def test_the_engine_is_the_module_or_the_library(server: Server) -> None:
    engine = storage_on(server).verify()["engine"]
    assert engine == ("module" if server.module else "functions")


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.__name__)
def test_each_strategy_allows_the_limit_then_denies(server: Server, strategy: Strategy) -> None:
    limiter = strategy(storage_on(server))
    item = RateLimitItemPerMinute(5)
    assert [limiter.hit(item, "ada") for _ in range(7)] == [True] * 5 + [False] * 2
    assert not limiter.test(item, "ada")
    stats = limiter.get_window_stats(item, "ada")
    assert stats.remaining == 0
    assert time.time() < stats.reset_time <= time.time() + 60.5
    # Another identifier has its own limit.
    assert limiter.hit(item, "bob")
    assert limiter.get_window_stats(item, "bob").remaining == 4


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.__name__)
def test_each_hit_is_one_atomic_call(server: Server, strategy: Strategy) -> None:
    """No read-then-write: a hit is exactly one call of the limiter's command (or one FCALL on the
    library), nothing else, allowed or denied."""
    limiter = strategy(storage_on(server))
    item = RateLimitItemPerMinute(2)
    limiter.hit(item, "warm")  # the engine is chosen (and the library loaded) on the first call
    commands: dict[Strategy, str] = {
        strategies.FixedWindowRateLimiter: "rl.fixed", strategies.MovingWindowRateLimiter: "rl.slide",
        strategies.SlidingWindowCounterRateLimiter: "rl.slidecount"}
    command = commands[strategy]
    expected = [command.upper()] if server.module else ["FCALL"]
    for allowed in (True, True, False):
        sent = Sent(server)
        assert limiter.hit(item, "ada") is allowed
        assert sent.stop() == expected


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.__name__)
def test_concurrent_hits_admit_exactly_the_limit(server: Server, strategy: Strategy) -> None:
    """200 hits from 8 threads on a limit of 50: exactly 50 allowed (a read-then-write would admit more)."""
    storage = storage_on(server)
    limiter = strategy(storage)
    item = RateLimitItemPerMinute(50)
    results: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        mine = [limiter.hit(item, "crowd") for _ in range(25)]
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 200
    assert results.count(True) == 50


def test_fixed_window_counts_and_expiry(server: Server) -> None:
    storage = storage_on(server)
    limiter = strategies.FixedWindowRateLimiter(storage)
    item = RateLimitItemPerSecond(3, 2)
    key = item.key_for("ada")
    assert [storage.incr(key, 2) for _ in range(4)] == [1, 2, 3, 4]  # the 4th: 3 counted + 1, denied
    assert storage.get(key) == 3  # a denial is not counted
    assert time.time() < storage.get_expiry(key) <= time.time() + 2.01
    assert not limiter.hit(item, "ada", cost=1)
    assert storage.get(key) == 3
    limiter.clear(item, "ada")
    assert storage.get(key) == 0
    assert storage.get_expiry(key) == pytest.approx(time.time(), abs=0.5)


def test_a_cost_above_the_limit_never_fits_and_writes_nothing(server: Server) -> None:
    storage = storage_on(server)
    item = RateLimitItemPerMinute(10)
    for strategy in STRATEGIES:
        limiter = strategy(storage)
        assert not limiter.hit(item, "big", cost=11)
        assert limiter.hit(item, "big", cost=10)
        assert not limiter.hit(item, "big", cost=1)
    with server.client() as r:
        assert sorted(k.decode().split(":")[1] for k in r.keys("*")) == ["fixed", "moving", "sliding"]


def test_moving_window_cost_takes_that_many_entries(server: Server) -> None:
    limiter = strategies.MovingWindowRateLimiter(storage_on(server))
    item = RateLimitItemPerMinute(10)
    clear_of_minute_edge()
    assert limiter.hit(item, "ada", cost=4)
    assert limiter.get_window_stats(item, "ada").remaining == 6
    assert limiter.test(item, "ada", cost=6)
    assert not limiter.test(item, "ada", cost=7)
    assert not limiter.hit(item, "ada", cost=7)
    assert limiter.get_window_stats(item, "ada").remaining == 6  # the denial recorded nothing
    assert limiter.hit(item, "ada", cost=6)
    assert not limiter.hit(item, "ada")


def test_moving_window_costs_under_concurrency_stay_within_the_documented_bound(server: Server) -> None:
    """Cost 3 from 8 threads on a limit of 30: each decision is atomic, the other 2 entries follow it, so
    at most 8 x 2 units beyond the limit can be admitted in the window (README), and the log itself
    never holds more than the limit."""
    storage = storage_on(server)
    limiter = strategies.MovingWindowRateLimiter(storage)
    item = RateLimitItemPerMinute(30)
    admitted: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        mine = sum(3 for _ in range(10) if limiter.hit(item, "crowd", cost=3))
        with lock:
            admitted.append(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 30 <= sum(admitted) <= 30 + 8 * 2
    assert storage.get_moving_window(item.key_for("crowd"), 30, 60)[1] == 30
    inspected = inspect_fields(storage.limiter.call("RL.INSPECT", [storage.plans.moving_key(item.key_for("crowd"))],
                                                    []))
    assert inspected is not None and int(inspected["recorded"]) <= 30


def test_moving_window_stats_name_the_oldest_entry(server: Server) -> None:
    storage = storage_on(server)
    limiter = strategies.MovingWindowRateLimiter(storage)
    item = RateLimitItemPerMinute(3)
    first = time.time()
    assert limiter.hit(item, "ada")
    time.sleep(0.3)
    assert limiter.hit(item, "ada")
    assert limiter.hit(item, "ada")
    # Full: the next unit frees when the oldest entry leaves, one window after it.
    stats = limiter.get_window_stats(item, "ada")
    assert stats.remaining == 0
    assert stats.reset_time == pytest.approx(first + 60, abs=0.1)
    # Not full: limits' contract is still the oldest entry counted (a second, read-only inspection).
    start, count = storage.get_moving_window(item.key_for("ada"), 5, 60)
    assert count == 3
    assert start == pytest.approx(first, abs=0.1)


def test_sliding_window_counter_reads_match_the_decision(server: Server) -> None:
    storage = storage_on(server)
    limiter = strategies.SlidingWindowCounterRateLimiter(storage)
    item = RateLimitItemPerMinute(10)
    assert limiter.hit(item, "ada", cost=4)
    previous, previous_ttl, current, current_ttl = storage.get_sliding_window(item.key_for("ada"), 60)
    assert (previous, current) == (0, 4)
    # Windows aligned to multiples of 60 s since the epoch (RL.SLIDECOUNT's), times from the server.
    left = 60 - time.time() % 60
    assert previous_ttl == pytest.approx(left, abs=0.1)
    assert current_ttl == pytest.approx(left + 60, abs=0.1)
    assert limiter.get_window_stats(item, "ada").remaining == 6
    limiter.clear(item, "ada")
    assert storage.get_sliding_window(item.key_for("ada"), 60) == (0, 0.0, 0, 0.0)


def test_a_key_limits_did_not_build_counts_without_a_limit(server: Server) -> None:
    storage = storage_on(server)
    assert [storage.incr("my-own-counter", 30, amount=5) for _ in range(3)] == [5, 10, 15]
    assert storage.get("my-own-counter") == 15


def test_clear_and_reset(server: Server) -> None:
    storage = storage_on(server, key_prefix="app1")
    other = storage_on(server, key_prefix="app2")
    item = RateLimitItemPerMinute(2)
    for strategy in STRATEGIES:
        for who in ("a", "b", "c"):
            strategy(storage).hit(item, who)
        strategy(other).hit(item, "a")
    assert storage.reset() == 9
    assert storage.reset() == 0
    with server.client() as r:
        assert len(r.keys("app2:*")) == 3


def test_check_and_errors_on_a_stopped_server(servers: Any) -> None:
    server = servers.redis(module=True)
    storage = storage_on(server)
    wrapped = storage_on(server, wrap_exceptions=True)
    assert storage.check()
    server.stop()
    assert not storage.check()
    limiter = strategies.FixedWindowRateLimiter(storage)
    with pytest.raises(CallError):
        limiter.hit(RateLimitItemPerMinute(1), "ada")
    with pytest.raises(StorageError) as caught:
        strategies.FixedWindowRateLimiter(wrapped).hit(RateLimitItemPerMinute(1), "ada")
    assert isinstance(caught.value.storage_error, CallError)


def test_every_call_on_a_hung_server_ends_within_its_deadline(servers: Any) -> None:
    """The hits go through the limiter (its deadline); `clear`, `check` and `reset` go to the client,
    whose socket timeouts are the deadline unless given."""
    server = servers.redis(module=True)
    storage = storage_on(server, deadline=0.3)
    assert storage.check()
    server.hang()
    try:
        calls: list[Any] = [lambda: strategies.FixedWindowRateLimiter(storage).hit(RateLimitItemPerMinute(1), "a"),
                            lambda: storage.clear("k"), storage.reset]
        for call in calls:
            started = time.monotonic()
            with pytest.raises((CallError, redis.RedisError)):
                call()
            assert time.monotonic() - started < 2.0  # 0.3 s, and a loaded machine's slack; forever without
        started = time.monotonic()
        assert not storage.check()
        assert time.monotonic() - started < 2.0
    finally:
        server.resume()
    assert storage.check()


def test_backend_option_and_a_module_asked_of_a_stock_server(servers: Any) -> None:
    stock = servers.redis(module=False)
    scripts: Any = storage_from_string(f"ratelimit://{HOST}:{stock.port}/0?backend=scripts&{DEADLINE}")
    assert isinstance(scripts, RatelimitStorage)
    assert strategies.FixedWindowRateLimiter(scripts).hit(RateLimitItemPerMinute(1), "ada")
    assert scripts.verify()["engine"] == "scripts"
    module_only = storage_from_string(f"ratelimit://{HOST}:{stock.port}/0?{DEADLINE}", backend="module")
    with pytest.raises(CallError):
        strategies.FixedWindowRateLimiter(module_only).hit(RateLimitItemPerMinute(1), "ada")


@pytest.mark.parametrize("module", [True, False], ids=["module", "lua"])
def test_cluster_uri(servers: Any, module: bool) -> None:
    cluster = servers.cluster(module=module)
    hosts = ",".join(f"{h}:{p}" for h, p in cluster.startup_nodes)
    storage = storage_from_string(f"ratelimit+cluster://{hosts}?{DEADLINE}")
    item = RateLimitItemPerMinute(2)
    for strategy in STRATEGIES:
        limiter = strategy(storage)
        for who in range(12):  # keys on every primary
            assert [limiter.hit(item, str(who)) for _ in range(3)] == [True, True, False]
        assert limiter.get_window_stats(item, "0").remaining == 0
    assert storage.reset() == 36


def test_sentinel_uri(servers: Any) -> None:
    sentinel = servers.sentinel(module=True)
    hosts = ",".join(f"{h}:{p}" for h, p in sentinel.sentinels)
    storage: Any = storage_from_string(f"ratelimit+sentinel://{hosts}/{SENTINEL_SERVICE}?{DEADLINE}")
    item = RateLimitItemPerMinute(2)
    for strategy in STRATEGIES:
        assert [strategy(storage).hit(item, "ada") for _ in range(3)] == [True, True, False]
    assert storage.verify()["engine"] == "module"
    with sentinel.primary.client() as r:
        assert len(r.keys("LIMITS:*")) == 3


def test_unix_socket_uri(servers: Any) -> None:
    server = servers.redis(module=True, args=("--unixsocket", "rl.sock", "--unixsocketperm", "700"))
    storage = storage_from_string(f"ratelimit+unix://{server.dir}/rl.sock?{DEADLINE}")
    assert strategies.FixedWindowRateLimiter(storage).hit(RateLimitItemPerMinute(1), "ada")


# Pure parts ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("item, expected", [
    (RateLimitItemPerMinute(10), 10),
    (RateLimitItemPerSecond(7, 2), 7),
    (RateLimitItemPerYear(3, 4), 3),
])
def test_the_limit_is_read_from_limits_key(item: RateLimitItem, expected: int) -> None:
    assert limit_in_key(item.key_for("a/b", "c"), item.get_expiry()) == expected


def test_a_key_whose_period_disagrees_names_no_limit() -> None:
    item = RateLimitItemPerMinute(10)
    assert limit_in_key(item.key_for("x"), 61) is None
    assert limit_in_key("plain-key", 60) is None
    assert COUNTER_LIMIT == 2**53 - 1


def test_inspect_replies_as_array_or_map() -> None:
    assert inspect_fields(None) is None
    assert inspect_fields([b"limiter", b"RL.FIXED", b"count", 3]) == {"limiter": "RL.FIXED", "count": 3}
    assert inspect_fields({b"count": 3}) == {"count": 3}


def test_uri_parsing() -> None:
    t = parse("async+ratelimits://u:p@h:6380/2?backend=functions&deadline=0.5&socket_timeout=3", {})
    assert (t.form, t.url, t.backend, t.deadline) == ("single", "rediss://u:p@h:6380/2?socket_timeout=3",
                                                     "functions", 0.5)
    t = parse("ratelimit+cluster://:secret@a:1,b:2", {"key_prefix": "X", "max_connections": 10})
    assert (t.form, t.locations, t.key_prefix) == ("cluster", [("a", 1), ("b", 2)], "X")
    assert t.client_options == {"password": "secret", "max_connections": 10}
    t = parse("ratelimit+sentinel://a:1/svc", {"use_replicas": False, "implementation": "coredis"})
    assert (t.form, t.service, t.client_options) == ("sentinel", "svc", {})
    assert parse("ratelimit+sentinel://a:1", {"service_name": "s2"}).service == "s2"
    for bad, options in [("ratelimit+sentinel://a:1", {}), ("ratelimit+cluster://", {}),
                         ("ratelimit://h:1?backend=turbo", {}), ("ratelimit://h:1", {"deadline": "soon"}),
                         ("redis://h:1", {})]:
        with pytest.raises(ConfigurationError):
            parse(bad, options)


def test_every_scheme_is_registered() -> None:
    from limits.storage import SCHEMES  # type: ignore[attr-defined]  # public on every limits since 4

    for scheme in ("ratelimit", "ratelimits", "ratelimit+unix", "ratelimit+cluster", "ratelimit+sentinel"):
        assert SCHEMES[scheme].__name__ == "RatelimitStorage"
        assert SCHEMES[f"async+{scheme}"].__name__ == "AsyncRatelimitStorage"


def test_nothing_listens(servers: Any) -> None:
    port = free_port()
    storage = storage_from_string(f"ratelimit://{HOST}:{port}/0", deadline=0.5)
    assert not storage.check()
    with pytest.raises((CallError, redis.RedisError)):
        storage.incr("k", 1)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_sliding_window_counter_reads_agree_with_the_next_hit(server: Server, asynchronous: bool) -> None:
    """Limit 5 per 10 s, 5 hits 8 s into a window, read 0.5 s into the next: the previous window
    weighs 5 x 0.95 = 4.75, so the next hit is denied (4.75 + 1 > 5): test() and the remaining say so
    (limits' float formula on the exact counts said 1 left)."""
    from limits import RateLimitItemPerSecond as PerSecond
    from limits.aio import strategies as aio_strategies
    import asyncio

    item = PerSecond(5, 10)
    left = 10 - time.time() % 10
    time.sleep(left + 8.0 if left < 2.5 else left - 2.0)  # 8 s into a 10 s window (epoch-aligned)
    if asynchronous:
        astorage = storage_from_string(f"async+ratelimit://{HOST}:{server.port}/0", deadline=2.0)
        alimiter = aio_strategies.SlidingWindowCounterRateLimiter(astorage)

        async def run(coro: Any) -> Any:
            return await coro

        loop = asyncio.new_event_loop()

        def hit() -> bool:
            return bool(loop.run_until_complete(alimiter.hit(item, "ada")))

        def test() -> bool:
            return bool(loop.run_until_complete(alimiter.test(item, "ada")))

        def remaining() -> int:
            return int(loop.run_until_complete(alimiter.get_window_stats(item, "ada")).remaining)
    else:
        limiter = strategies.SlidingWindowCounterRateLimiter(storage_on(server))
        hit = lambda: limiter.hit(item, "ada")  # noqa: E731
        test = lambda: limiter.test(item, "ada")  # noqa: E731
        remaining = lambda: limiter.get_window_stats(item, "ada").remaining  # noqa: E731
    assert [hit() for _ in range(5)] == [True] * 5
    time.sleep(10 - time.time() % 10 + 0.5)  # 0.5 s into the next window
    assert 0.3 < time.time() % 10 < 1.5, "the machine was too slow for this test's timing"
    assert (test(), remaining()) == (False, 0), "the reads must say what the next hit decides"
    assert hit() is False
    if asynchronous:
        loop.close()
