"""Flask-Limiter on this package's `limits` storage: a Flask app whose only change is its storage URI
(`ratelimit://...`), served by werkzeug on a free port and hit through a real HTTP client: 429 after the
limit, the limit's headers from the storage's reads, for each strategy, on the module and on the library."""

from __future__ import annotations

import threading
from typing import Any, Iterator

import httpx
import pytest
from flask import Flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from werkzeug.serving import BaseWSGIServer, make_server

import redis_ratelimit.contrib.limits  # noqa: F401  (registers the schemes)
from clock import clear_of_minute_edge
from servers import HOST, Server, free_port

CASES = [("module", "fixed-window"), ("module", "moving-window"), ("module", "sliding-window-counter"),
         ("lua", "fixed-window"), ("lua", "moving-window"), ("lua", "sliding-window-counter")]


def make_app(storage_uri: str, strategy: str) -> Flask:
    app = Flask(__name__)
    limiter = Limiter(get_remote_address, app=app, storage_uri=storage_uri, strategy=strategy,
                      headers_enabled=True)

    @app.route("/hello")
    @limiter.limit("3 per minute")
    def hello() -> str:
        return "hello"

    @app.route("/free")
    def free() -> str:
        return "free"

    return app


@pytest.fixture
def served() -> Iterator[list[BaseWSGIServer]]:
    running: list[BaseWSGIServer] = []
    yield running
    for server in running:
        server.shutdown()
        server.server_close()


def serve(app: Flask, running: list[BaseWSGIServer]) -> str:
    port = free_port()
    server = make_server(HOST, port, app, threaded=True)
    running.append(server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://{HOST}:{port}"


@pytest.mark.parametrize("engine, strategy", CASES, ids=[f"{e}-{s}" for e, s in CASES])
def test_429_after_the_limit(servers: Any, served: list[BaseWSGIServer], engine: str, strategy: str) -> None:
    redis_server: Server = servers.redis(module=engine == "module")
    url = serve(make_app(f"ratelimit://{HOST}:{redis_server.port}/0?deadline=5", strategy), served)
    with httpx.Client(base_url=url, timeout=10) as http:
        clear_of_minute_edge()  # the sliding counter's windows: all five requests in one
        responses = [http.get("/hello") for _ in range(5)]
        assert [r.status_code for r in responses] == [200, 200, 200, 429, 429]
        assert [r.headers["X-RateLimit-Remaining"] for r in responses[:3]] == ["2", "1", "0"]
        assert all(r.headers["X-RateLimit-Limit"] == "3" for r in responses)
        assert 0 < int(responses[3].headers["Retry-After"]) <= 60
        assert http.get("/free").status_code == 200
    # The counts are in this Redis, under the storage's keys.
    with redis_server.client() as r:
        kind = {"fixed-window": "fixed", "moving-window": "moving", "sliding-window-counter": "sliding"}[strategy]
        assert [k.decode().split(":")[1] for k in r.keys("LIMITS:*")] == [kind]
