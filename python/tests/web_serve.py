"""Serving ASGI apps for the web tests on real sockets: uvicorn in a thread of its own (its own event
loop) on a free loopback port, stopped when the test ends; and the Rust demo service
(`client/examples/server.rs`) as a process."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import uvicorn

from redis_ratelimit.web import set_principal
from servers import HOST, free_port, rust_server_path


class PrincipalFromHeader:
    """An authentication middleware, as an application has one: the principal from `x-user`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        for name, value in scope.get("headers", []):
            if name == b"x-user":
                set_principal(scope, value.decode())
        await self.app(scope, receive, send)


class Served:
    """An ASGI app served by uvicorn on `url` until `stop()`."""

    def __init__(self, app: Any, ws: str = "websockets-sansio") -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        config = uvicorn.Config(app, host=HOST, port=self.port, log_level="warning", lifespan="off", ws=ws,
                                # uvicorn would rewrite the peer from X-Forwarded-For itself: the
                                # middleware's own trusted proxies are under test.
                                proxy_headers=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)

    def start(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on port {self.port}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class RustService:
    """The Rust demo service on a free port, on the Redis at `redis_url`."""

    def __init__(self, redis_url: str, trusted_proxies: str = "127.0.0.0/8", failure: str = "open") -> None:
        self.binary = rust_server_path()
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.env = dict(os.environ, REDIS_URL=redis_url, LISTEN=f"{HOST}:{self.port}",
                        TRUSTED_PROXIES=trusted_proxies, FAILURE_POLICY=failure)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RustService:
        self.process = subprocess.Popen([str(self.binary)], env=self.env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE)
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                self.stop()
                raise RuntimeError(f"the Rust service did not start: {err[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


def rust_binary() -> Path:
    return rust_server_path()


def serving(app: Any) -> Iterator[Served]:
    served = Served(app).start()
    try:
        yield served
    finally:
        served.stop()
