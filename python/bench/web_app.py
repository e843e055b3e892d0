"""The bench's app: a trivial FastAPI endpoint, `GET /api/items`, limited as `BENCH_ROW` says, on the
Redis at `REDIS_URL`. Every limit is far above what the bench can send, so every request is allowed
and each row measures the cost of a decision, not of denials.

Rows: `none` (no limiter), `middleware` (RateLimitMiddleware, one route limit: one RL.TOKEN per
request, on the module or the Lua library as the server has), `slowapi` (slowapi with `limits`' own
redis storage, `BENCH_STORAGE`), `slowapi-ours` (slowapi with this package's `limits` storage).
"""

from __future__ import annotations

import os
from typing import Any

import redis.asyncio as aioredis
from fastapi import FastAPI, Request

ROW = os.environ.get("BENCH_ROW", "none")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
# slowapi's limit: fixed window, as slowapi's default strategy; ours: a token bucket of the same order.
SLOWAPI_LIMIT = "100000000/minute"

api = FastAPI()
#: What uvicorn serves (`web_app:app`): the FastAPI app, or it behind the middleware.
app: Any = api

if ROW in ("none", "middleware"):

    @api.get("/api/items")
    async def items() -> list[str]:
        return ["a"]

    if ROW == "middleware":
        from redis_ratelimit import AsyncLimiter, FailurePolicy, TokenBucket
        from redis_ratelimit.web import RateLimitConfig, RateLimitMiddleware, Route

        limiter = AsyncLimiter(aioredis.from_url(REDIS_URL), FailurePolicy.open())
        config = RateLimitConfig(limiter, routes=[Route("api", "/api", TokenBucket(100_000_000, 1_000_000.0))])
        app = RateLimitMiddleware(api, config)

elif ROW in ("slowapi", "slowapi-ours"):
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    if ROW == "slowapi-ours":
        import redis_ratelimit.contrib.limits  # noqa: F401  (registers ratelimit://)

        storage = REDIS_URL.replace("redis://", "ratelimit://", 1)
    else:
        storage = REDIS_URL
    slow = Limiter(key_func=get_remote_address, storage_uri=storage, strategy="fixed-window")
    api.state.limiter = slow
    api.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]

    @api.get("/api/items")
    @slow.limit(SLOWAPI_LIMIT)
    async def limited_items(request: Request) -> list[str]:
        return ["a"]

else:
    raise SystemExit(f"BENCH_ROW: none, middleware, slowapi or slowapi-ours, not {ROW!r}")
