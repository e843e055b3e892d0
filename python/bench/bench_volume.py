"""High volume (docs/high-volume.md), in `bench_web.py`'s run: one hot key, two app instances (two
AsyncLimiters, each on its own connections) with 8 concurrent callers each, in one mode after another
on the same module-enabled Redis: one call per check, the pre-check, batched units (batch 16), and
both; twice: with a bucket far above the load (every check allowed), and with one holding half of
the checks (not refilling during a run: an allowed half, then a denied half). Per mode: Redis calls
per decision (INFO commandstats), the p50 and p99 time of a check, the local decisions, and admitted
against the limit (counted in the apps, and in Redis after every held unit went back).

    python python/bench/bench_volume.py [--checks 8000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from servers import HOST, Server  # noqa: E402

INSTANCES = 2
CALLERS = 8  # concurrent callers per instance
BATCH = 16


@dataclass
class Mode:
    label: str
    precheck: bool
    batch: int | None
    capacity: float  # the bucket, per check made
    calls: int = 0
    checks: int = 0
    local: int = 0
    p50: float = 0.0
    p99: float = 0.0
    admitted: int = 0
    in_redis: int = 0
    limit: int = 0


SCENARIOS = [("every check allowed", 4.0), ("half denied", 0.5)]
MODES = [Mode(label, precheck, batch, capacity) for _, capacity in SCENARIOS for label, precheck, batch in (
    ("one call per check", False, None), ("pre-check", True, None), (f"batch {BATCH}", False, BATCH),
    (f"batch {BATCH} + pre-check", True, BATCH))]


def limiter_calls(server: Server) -> int:
    with server.client() as r:
        stats: dict[str, Any] = r.info("commandstats")
    return sum(int(v["calls"]) for name, v in stats.items() if name.startswith("cmdstat_rl."))


async def run(mode: Mode, server: Server, checks: int) -> None:
    import redis.asyncio as aioredis

    from redis_ratelimit import AsyncLimiter, FailurePolicy, TokenBucket

    capacity = int(checks * mode.capacity)
    policy = TokenBucket(capacity, 0.001, batch=mode.batch)
    key = f"rl:{{bench}}:{mode.label}:{mode.capacity}"
    clients = [aioredis.Redis(host=HOST, port=server.port) for _ in range(INSTANCES)]
    limiters = [AsyncLimiter(c, FailurePolicy.closed(), deadline=5.0, local_precheck=mode.precheck) for c in clients]
    for lim in limiters:  # connections made, engine chosen
        await lim.check("rl:{bench}:warm", TokenBucket(1, 1.0), 0)
    times: list[float] = []
    admitted = 0
    per_caller = checks // (INSTANCES * CALLERS)

    async def caller(limiter: AsyncLimiter) -> None:
        nonlocal admitted
        for _ in range(per_caller):
            start = time.perf_counter()
            decision = await limiter.check(key, policy)
            times.append(time.perf_counter() - start)
            admitted += decision.allowed
            assert not decision.degraded

    before = limiter_calls(server)
    await asyncio.gather(*[caller(lim) for lim in limiters for _ in range(CALLERS)])
    mode.calls = limiter_calls(server) - before
    mode.checks = len(times)
    mode.local = sum(lim.counts.local for lim in limiters)
    for lim in limiters:
        await lim.aclose()  # held units back: Redis' count is then exact
    seen = await limiters[0].peek(key, policy)
    mode.in_redis = capacity - (capacity if seen.remaining is None else int(seen.remaining))
    mode.admitted, mode.limit = admitted, capacity
    times.sort()
    mode.p50, mode.p99 = times[len(times) // 2] * 1e6, times[int(len(times) * 0.99)] * 1e6
    for c in clients:
        await c.aclose()


def measure(server: Server, checks: int) -> list[Mode]:
    for mode in MODES:
        asyncio.run(run(mode, server, checks))
        print(f"{mode.label}, limit {mode.limit}: {mode.calls / mode.checks:.3f} calls/decision, p50 {mode.p50:.0f} us, "
              f"p99 {mode.p99:.0f} us, admitted {mode.admitted} (Redis {mode.in_redis}) of {mode.limit}", flush=True)
    return MODES


def table(modes: list[Mode]) -> list[str]:
    checks = modes[0].checks
    lines = [
        "## High volume: one hot key, two app instances",
        "",
        f"Written by `python/bench/bench_volume.py` (in the same run). {INSTANCES} AsyncLimiters (\"app instances\",",
        f"each on its own connections) with {CALLERS} concurrent callers each check one key, {checks:,} checks in all",
        "per row, in process on the module-enabled Redis, with a token bucket far above the load (every check",
        "allowed) and with one holding half of the checks (not refilling during a run: an allowed half, then",
        "a denied half). Redis calls per decision are counted by the server (INFO commandstats: RL.TOKEN,",
        "RL.REFUND and the batches taken ahead); a check's time is that of one `await limiter.check(...)` under",
        "this concurrency; admitted is counted in the apps and in Redis (after `aclose()` gave every held unit",
        "back). docs/high-volume.md has the options and their bounds.",
        "",
        "| bucket | mode | Redis calls per decision | local decisions | p50 check | p99 check | admitted (apps / Redis) | limit |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    names = dict((capacity, name) for name, capacity in SCENARIOS)
    for m in modes:
        lines.append(f"| {names[m.capacity]} | {m.label} | {m.calls / m.checks:.3f} | {m.local:,} | {m.p50:.0f} µs | "
                     f"{m.p99:.0f} µs | {m.admitted:,} / {m.in_redis:,} | {m.limit:,} |")
    over = [m.label for m in modes if m.admitted > m.limit or m.in_redis != m.admitted]
    lines += ["", "Admitted never above the limit, and the apps' count equal to Redis': "
              + ("yes, in every mode." if not over else f"**no** ({', '.join(over)})."), ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checks", type=int, default=8000)
    args = parser.parse_args()
    server = Server(True).start()
    try:
        print("\n".join(table(measure(server, args.checks))))
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
