"""slowapi on this package's `limits` storage: a FastAPI app whose only change is its storage URI
(`ratelimit://...`), served by uvicorn on a free port and hit through a real HTTP client: 429 after the
limit, for each strategy, on the module and on the library."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

import redis_ratelimit.contrib.limits  # noqa: F401  (registers the schemes)
from clock import clear_of_minute_edge
from servers import HOST, Server
from web_serve import Served

CASES = [("module", "fixed-window"), ("module", "moving-window"), ("module", "sliding-window-counter"),
         ("lua", "fixed-window"), ("lua", "moving-window"), ("lua", "sliding-window-counter")]


def make_app(storage_uri: str, strategy: str) -> FastAPI:
    limiter = Limiter(key_func=get_remote_address, storage_uri=storage_uri, strategy=strategy)
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]

    @app.get("/hello")
    @limiter.limit("3/minute")
    async def hello(request: Request) -> dict[str, str]:
        return {"hello": "world"}

    @app.get("/free")
    async def free() -> dict[str, str]:
        return {"free": "yes"}

    return app


@pytest.mark.parametrize("engine, strategy", CASES, ids=[f"{e}-{s}" for e, s in CASES])
def test_429_after_the_limit(servers: Any, engine: str, strategy: str) -> None:
    redis_server: Server = servers.redis(module=engine == "module")
    served = Served(make_app(f"ratelimit://{HOST}:{redis_server.port}/0?deadline=5", strategy)).start()
    try:
        with httpx.Client(base_url=served.url, timeout=10) as http:
            clear_of_minute_edge()  # the sliding counter's windows: all five requests in one
            codes = [http.get("/hello").status_code for _ in range(5)]
            assert codes == [200, 200, 200, 429, 429]
            assert http.get("/free").status_code == 200
    finally:
        served.stop()
    with redis_server.client() as r:
        kind = {"fixed-window": "fixed", "moving-window": "moving", "sliding-window-counter": "sliding"}[strategy]
        assert [k.decode().split(":")[1] for k in r.keys("LIMITS:*")] == [kind]
