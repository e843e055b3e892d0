"""The README's FastAPI quick start runs as written: its block is written to `app.py`, served by
uvicorn (a process of its own, as a user would start it) on a Redis with the module, and answers as
the README says, down to the 429 body it shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from servers import HOST, Server, free_port

README = Path(__file__).resolve().parents[1] / "README.md"


def section_blocks(lang: str) -> list[str]:
    text = README.read_text()
    section = text.split("## Web (ASGI, FastAPI", 1)[1]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


def command_args() -> list[str]:
    """The arguments after `uvicorn app:app` in the README's serving command (`--no-proxy-headers`)."""
    section = README.read_text().split("### Quick start", 1)[1]
    found = re.search(r"uvicorn app:app([^`]*)`", section)
    assert found, "the README's quick start names its uvicorn command"
    return found.group(1).split()


class QuickStart:
    """The README's web quick start written to `app.py` and served by uvicorn (its own process, as a
    user starts it) with `args`, on the Redis at `redis_url`."""

    def __init__(self, redis_url: str, tmp_path: Path, args: list[str]) -> None:
        (tmp_path / "app.py").write_text(section_blocks("python")[0])
        port = free_port()
        env = dict(os.environ, REDIS_URL=redis_url)
        self.url = f"http://{HOST}:{port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app:app", *args, "--host", HOST, "--port", str(port)],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def health(self) -> httpx.Response:
        deadline = time.monotonic() + 20
        while True:
            try:
                return httpx.get(f"{self.url}/health", timeout=1)
            except httpx.TransportError:
                assert self.process.poll() is None, self.stop()
                assert time.monotonic() < deadline, "the quick start did not start"
                time.sleep(0.05)

    def stop(self) -> str:
        """Stops the server; what it wrote to stderr."""
        self.process.kill()
        self.process.wait(10)
        return self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""


def test_the_fastapi_quick_start_runs_as_written(module_server: Server, tmp_path: Path) -> None:
    served = QuickStart(module_server.url, tmp_path, command_args())
    try:
        url = served.url
        health = served.health()
        assert health.status_code == 200 and "ratelimit-limit" not in health.headers
        with httpx.Client(base_url=url, timeout=10) as client:
            first = client.get("/api/items")
            assert first.status_code == 200
            assert {k: first.headers[k] for k in ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset",
                                                  "ratelimit-policy", "ratelimit")} == {
                "ratelimit-limit": "10",
                "ratelimit-remaining": "9",
                "ratelimit-reset": "1",
                "ratelimit-policy": '"api";q=10;w=2',
                "ratelimit": '"api";r=9;t=1',
            }
            rest = [client.get("/api/items") for _ in range(14)]
            denied = next(r for r in rest if r.status_code == 429)
            # The eleventh at the earliest (5/s refill: on a slow machine a token may come back first).
            assert [r.status_code for r in rest[:9]] == [200] * 9
            assert denied.headers["retry-after"] == "1"
            assert denied.headers["content-type"] == "application/problem+json"
            assert denied.text == section_blocks("json")[0].strip()
            searches = [client.get("/search", params={"q": "x"}) for _ in range(4)]
            assert [r.status_code for r in searches][:3] == [200, 200, 200]
            assert searches[0].json() == {"q": "x"}
            assert searches[0].headers["ratelimit-limit"] == "3"
            assert searches[3].status_code == 429
            assert searches[3].json()["limit"] == "search"
            assert searches[3].headers["content-type"] == "application/problem+json"
        with module_server.client() as r:
            assert sorted(k.decode() for k in r.keys("*")) == [
                "rl:{ip:127.0.0.1}:all:token_bucket", "rl:{ip:127.0.0.1}:api:token_bucket",
                "rl:{ip:127.0.0.1}:search:token_bucket"]
    finally:
        served.stop()


WARNING = "the ASGI server already took the client address"


def spoofed_logins(url: str) -> list[int]:
    """Six requests to /login (5 at once allowed per caller), each claiming another client address."""
    with httpx.Client(base_url=url, timeout=10) as client:
        return [client.get("/login", headers={"X-Forwarded-For": f"203.0.113.{i}"}).status_code for i in range(6)]


def test_a_spoofed_x_forwarded_for_picks_no_key(stock_server: Server, tmp_path: Path) -> None:
    """Served as the README says: the login limit counts the real peer (127.0.0.1, not a trusted
    proxy), whatever X-Forwarded-For claims, and nothing is said about the proxy headers."""
    served = QuickStart(stock_server.url, tmp_path, command_args())
    try:
        served.health()
        assert spoofed_logins(served.url) == [404] * 5 + [429]
        with stock_server.client() as r:
            assert sorted(k.decode() for k in r.keys("*")) == ["rl:{ip:127.0.0.1}:all:token_bucket",
                                                                    "rl:{ip:127.0.0.1}:login:token_bucket"]
    finally:
        stderr = served.stop()
    assert WARNING not in stderr


def test_uvicorns_proxy_headers_with_trusted_proxies_are_warned_of(stock_server: Server, tmp_path: Path) -> None:
    """The quick start served with uvicorn's defaults (proxy headers believed from 127.0.0.1) and its
    trusted_proxies: the spoofed addresses are the keys (what the README's command prevents), and the
    middleware says so, once, on the `redis_ratelimit` logger (Python's last-resort handler: stderr)."""
    args = [a for a in command_args() if a != "--no-proxy-headers"]
    served = QuickStart(stock_server.url, tmp_path, args)
    try:
        served.health()
        assert spoofed_logins(served.url) == [404] * 6, "each spoofed address is a caller of its own"
    finally:
        stderr = served.stop()
    assert stderr.count(WARNING) == 1, stderr
    assert "(203.0.113.0)" in stderr and "--no-proxy-headers" in stderr
