"""`make bench`'s Python step: uvicorn (one worker) serving a trivial FastAPI endpoint, loaded by wrk,
in one run: no limiter; RateLimitMiddleware on the module; RateLimitMiddleware on the Lua library
(a stock redis-server); slowapi on `limits`' own redis storage; slowapi on this package's `limits`
storage (on the module, and on the library). Then where the middleware's time goes, measured in
process (no HTTP) with cProfile, and high volume on one hot key (bench_volume.py: one call per
check, the pre-check, batched units). Writes docs/bench-python.md.

    RL_MODULE=target/release/libredis_ratelimit.so python python/bench/bench_web.py [--seconds 8] [--rounds 3]

Needs wrk (scripts/ensure-deps.sh wrk) and the package's test extras in the running Python.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import platform
import pstats
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, MutableMapping

HERE = Path(__file__).resolve().parent
PYTHON_DIR = HERE.parent
REPO = PYTHON_DIR.parent
sys.path.insert(0, str(PYTHON_DIR / "tests"))

import bench_volume  # noqa: E402
from servers import HOST, Server, free_port, module_path  # noqa: E402


@dataclass
class Row:
    label: str
    row: str
    engine: str  # "module" or "library": which server it runs on
    rps: float = 0.0
    p99: str = ""
    errors: int = 0
    runs: list[tuple[float, str, int]] = field(default_factory=list)  # (req/s, p99, non-2xx) per round

    def settle(self) -> None:
        """The median round's figures."""
        self.rps, self.p99, self.errors = sorted(self.runs)[len(self.runs) // 2]


ROWS = [
    Row("no limiter", "none", "module"),
    Row("RateLimitMiddleware, module", "middleware", "module"),
    Row("RateLimitMiddleware, Lua library (stock Redis)", "middleware", "library"),
    Row("slowapi, `limits`' own redis storage", "slowapi", "module"),
    Row("slowapi, this package's storage (`ratelimit://`), module", "slowapi-ours", "module"),
    Row("slowapi, this package's storage (`ratelimit://`), Lua library", "slowapi-ours", "library"),
]


def serve(row: Row, redis_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = dict(os.environ, BENCH_ROW=row.row, REDIS_URL=redis_url, PYTHONPATH=str(HERE))
    cmd = [sys.executable, "-m", "uvicorn", "web_app:app", "--host", HOST, "--port", str(port), "--workers", "1",
           "--no-access-log", "--log-level", "warning", "--no-proxy-headers"]
    process = subprocess.Popen(cmd, env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://{HOST}:{port}/api/items"
    deadline = time.monotonic() + 20
    while True:
        try:
            out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url], capture_output=True,
                                 text=True, timeout=5).stdout
            if out == "200":
                return process, url
        except subprocess.TimeoutExpired:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            process.kill()
            raise RuntimeError(f"{row.label}: the app did not start: {err[-2000:]}")
        time.sleep(0.1)


def wrk(url: str, seconds: int, connections: int) -> str:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", url]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def measure(row: Row, redis_url: str, seconds: int, connections: int) -> None:
    process, url = serve(row, redis_url)
    try:
        wrk(url, 2, connections)  # warm up: connections made, engine chosen, caches filled
        out = wrk(url, seconds, connections)
    finally:
        process.kill()
        process.wait(10)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p99 = re.search(r"99%\s+(\S+)", out)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    run = (float(rps.group(1)) if rps else 0.0, p99.group(1) if p99 else "?", int(errors.group(1)) if errors else 0)
    row.runs.append(run)
    print(f"{row.label}: {run[0]:.0f} req/s, p99 {run[1]}, non-2xx {run[2]}", flush=True)


# -- where the time goes: the middleware path in process --------------------------------------------


async def in_process(redis_port: int, n: int) -> tuple[dict[str, float], str]:
    import redis.asyncio as aioredis
    from fastapi import FastAPI

    from redis_ratelimit import AsyncLimiter, FailurePolicy, TokenBucket
    from redis_ratelimit.web import RateLimitConfig, RateLimitMiddleware, Route
    from redis_ratelimit.web.check import enforce
    from redis_ratelimit.web.plan import Plan, plan

    app = FastAPI()

    @app.get("/api/items")
    async def items() -> list[str]:
        return ["a"]

    limiter = AsyncLimiter(aioredis.Redis(host=HOST, port=redis_port), FailurePolicy.open())
    policy = TokenBucket(100_000_000, 1_000_000.0)
    config = RateLimitConfig(limiter, routes=[Route("api", "/api", policy)])
    limited = RateLimitMiddleware(app, config)
    raw = aioredis.Redis(host=HOST, port=redis_port)

    def scope() -> dict[str, Any]:
        return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
                "path": "/api/items", "raw_path": b"/api/items", "query_string": b"", "root_path": "",
                "headers": [(b"host", b"bench"), (b"user-agent", b"wrk")], "client": ("127.0.0.1", 5000),
                "server": (HOST, 8000)}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        return None

    async def per_request(what: Any, rounds: int = n) -> float:
        for _ in range(min(200, rounds)):
            await what()
        start = time.perf_counter()
        for _ in range(rounds):
            await what()
        return (time.perf_counter() - start) / rounds * 1e6

    one_plan = plan(config, scope())
    assert isinstance(one_plan, Plan)
    timings = {
        "the app alone (FastAPI, no limiter)": await per_request(lambda: app(scope(), receive, send)),
        "the app behind RateLimitMiddleware": await per_request(lambda: limited(scope(), receive, send)),
        "plan(): path, peer, caller, key": await per_request(_awaitable(lambda: plan(config, scope()))),
        "enforce(): limiter.check_all + the fields' values": await per_request(lambda: enforce(config, one_plan)),
        "limiter.check_all alone": await per_request(lambda: limiter.check_all([("rl:{ip:127.0.0.1}:api", policy, 1)])),
        "a raw redis.asyncio round trip (PING)": await per_request(lambda: raw.ping()),
    }
    for batch in (False, True):
        burst_limiter = AsyncLimiter(aioredis.Redis(host=HOST, port=redis_port), FailurePolicy.open())
        burst_app = RateLimitMiddleware(app, RateLimitConfig(burst_limiter, routes=[Route("api", "/api", policy)],
                                                             batch=batch))

        async def burst(target: Any = burst_app) -> None:
            await asyncio.gather(*[target(scope(), receive, send) for _ in range(32)])

        label = "one pipeline per round (batch=True)" if batch else "one call each (batch=False)"
        timings[f"32 concurrent requests behind the middleware, {label}"] = await per_request(burst, n // 32) / 32
    timings.update(_limits_hits(redis_port, n))
    import redis as sync_redis

    with sync_redis.Redis(host=HOST, port=redis_port) as blocking:
        start = time.perf_counter()
        for _ in range(n):
            blocking.ping()
        timings["a raw redis (sync) round trip (PING)"] = (time.perf_counter() - start) / n * 1e6
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(n):
        await limited(scope(), receive, send)
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).strip_dirs().sort_stats("tottime").print_stats(18)
    await raw.aclose()
    return timings, text.getvalue()


def _limits_hits(redis_port: int, n: int) -> dict[str, float]:
    """What slowapi's decision costs: one `limits` fixed-window hit, synchronous (it blocks the event
    loop for its round trip), on `limits`' redis storage and on this package's."""
    from limits import parse
    from limits.storage import storage_from_string
    from limits.strategies import FixedWindowRateLimiter

    import redis_ratelimit.contrib.limits  # noqa: F401  (registers ratelimit://)

    item = parse("100000000/minute")
    out = {}
    for label, uri in (("limits' redis storage", f"redis://{HOST}:{redis_port}/0"),
                       ("this package's storage", f"ratelimit://{HOST}:{redis_port}/0")):
        strategy = FixedWindowRateLimiter(storage_from_string(uri))
        for _ in range(200):
            strategy.hit(item, "bench")
        start = time.perf_counter()
        for _ in range(n):
            strategy.hit(item, "bench")
        out[f"slowapi's decision: a `limits` fixed-window hit on {label} (sync)"] = (
            (time.perf_counter() - start) / n * 1e6)
    return out


def _awaitable(fn: Any) -> Any:
    async def run() -> Any:
        return fn()

    return run


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def _stack() -> str:
    import importlib.util

    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio's own loop"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11 (pure Python)"
    return f"{loop} and {http}"


def write(rows: list[Row], timings: dict[str, float], profile: str, seconds: int, connections: int,
          rounds: int, volume: list[str]) -> Path:
    by = {r.label: r for r in rows}
    base = by["no limiter"].rps
    mw_module = by["RateLimitMiddleware, module"].rps
    mw_library = by["RateLimitMiddleware, Lua library (stock Redis)"].rps
    slow = by["slowapi, `limits`' own redis storage"].rps
    ours_module = by["slowapi, this package's storage (`ratelimit://`), module"].rps
    ours_library = by["slowapi, this package's storage (`ratelimit://`), Lua library"].rps

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b else "n/a"

    def verdict(value: float, goal: float) -> str:
        return "met" if value >= goal else "**not met**"

    lines = [
        "# Python web stack: requests per second",
        "",
        "Written by `python/bench/bench_web.py` (`make bench`'s Python step). uvicorn with one worker serves one",
        "trivial FastAPI endpoint (`GET /api/items` returning `[\"a\"]`, `python/bench/web_app.py`); wrk loads it",
        f"with one thread and {connections} connections for {seconds} s per row, after a 2 s warm-up; {rounds} rounds",
        "over all the rows, each round in the other order than the one before, and each row's median round",
        "is shown. Every row",
        "uses the same Redis (a module-enabled `redis-server` for the module rows and `limits`' own storage, a",
        "stock one for the Lua library rows), and every limit is far above the load, so every request is",
        "allowed and each row measures the cost of a decision. The limiter rows decide one limit per request",
        "(the middleware: one route with a token bucket, one RL.TOKEN; slowapi: its default fixed window,",
        "`limits`' INCR script on its own storage, RL.FIXED on ours). All of it, wrk included, ran on the",
        f"same machine ({platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()},",
        f"uvicorn {_version('uvicorn')} with {_stack()}, FastAPI {_version('fastapi')}, slowapi",
        f"{_version('slowapi')}, limits {_version('limits')}, redis-py {_version('redis')}), with `nice -n 5`, while",
        "other work ran on it: read the ratios more than the absolute figures. The middleware runs with its",
        "defaults (`batch=True`: the decisions of requests that arrive together share one pipeline).",
        "",
        "| row | requests/s | p99 latency | vs no limiter | non-2xx |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(f"| {r.label} | {r.rps:,.0f} | {r.p99} | {ratio(r.rps, base)} | {r.errors} |")
    lines += [
        "",
        "## Against the goals (issue 25)",
        "",
        "| goal | measured | |",
        "| --- | ---: | --- |",
        f"| the middleware on the module at least 1.5x slowapi on `limits`' storage | {ratio(mw_module, slow)} | "
        f"{verdict(mw_module / slow if slow else 0, 1.5)} |",
        f"| the middleware on the library at least 1.0x slowapi on `limits`' storage | {ratio(mw_library, slow)} | "
        f"{verdict(mw_library / slow if slow else 0, 1.0)} |",
        f"| slowapi on this package's storage faster than on its own (module) | {ratio(ours_module, slow)} | "
        f"{verdict(ours_module / slow if slow else 0, 1.0)} |",
        f"| slowapi on this package's storage faster than on its own (library) | {ratio(ours_library, slow)} | "
        f"{verdict(ours_library / slow if slow else 0, 1.0)} |",
        "",
        "## Where the middleware's time goes",
        "",
        "Measured in process, without HTTP: the ASGI app called directly, one request after another, on",
        "the module-enabled Redis (microseconds per request, mean of several thousand):",
        "",
        "| step | µs per request |",
        "| --- | ---: |",
    ]
    for name, us in timings.items():
        lines.append(f"| {name} | {us:.1f} |")
    t = timings
    check = t.get("limiter.check_all alone", 0.0)
    aping = t.get("a raw redis.asyncio round trip (PING)", 0.0)
    sping = t.get("a raw redis (sync) round trip (PING)", 0.0)
    hit = t.get("slowapi's decision: a `limits` fixed-window hit on limits' redis storage (sync)", 0.0)
    plain = t.get("32 concurrent requests behind the middleware, one call each (batch=False)", 0.0)
    batched = t.get("32 concurrent requests behind the middleware, one pipeline per round (batch=True)", 0.0)
    lines += [
        "",
        f"Reading it: a decision through `AsyncLimiter.check_all` took {check:.0f} µs, of which a bare",
        f"redis.asyncio round trip is {aping:.0f} µs; a synchronous redis-py round trip is {sping:.0f} µs, and",
        f"slowapi's whole decision (a blocking `limits` hit) {hit:.0f} µs. The middleware itself (planning the",
        f"request: path, peer, caller, key) is {t.get('plan(): path, peer, caller, key', 0.0):.0f} µs. So the",
        "asyncio client's round trip, not the middleware, is most of the cost of a decision; slowapi's",
        "blocking call is cheaper per request but holds the event loop while it waits. Batching answers",
        f"that under load: 32 concurrent requests cost {plain:.0f} µs each with one call each and",
        f"{batched:.0f} µs each with one pipeline per round.",
        "",
        "The profile of the middleware path (cProfile, sorted by time spent in the function itself):",
        "",
        "```",
        profile.strip(),
        "```",
        "",
        *volume,
    ]
    path = REPO / "docs" / "bench-python.md"
    path.write_text("\n".join(lines))
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--profile-requests", type=int, default=3000)
    parser.add_argument("--volume-checks", type=int, default=8000)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: scripts/ensure-deps.sh wrk")
    if not module_path().is_file():
        raise SystemExit(f"the module is not built: {module_path()} (make build, or set RL_MODULE)")
    module, stock = Server(True).start(), Server(False).start()
    try:
        for round_ in range(args.rounds):
            for row in ROWS if round_ % 2 == 0 else ROWS[::-1]:
                server = module if row.engine == "module" else stock
                with server.client() as r:
                    r.flushall()
                measure(row, server.url, args.seconds, args.connections)
        for row in ROWS:
            row.settle()
        timings, profile = asyncio.run(in_process(module.port, args.profile_requests))
        with module.client() as r:
            r.flushall()
        volume = bench_volume.table(bench_volume.measure(module, args.volume_checks))
    finally:
        module.cleanup()
        stock.cleanup()
    for name, us in timings.items():
        print(f"{name}: {us:.1f} µs")
    print(f"wrote {write(ROWS, timings, profile, args.seconds, args.connections, args.rounds, volume)}")


if __name__ == "__main__":
    main()
