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
    section = text.split("## Web (ASGI, FastAPI)", 1)[1]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


def test_the_fastapi_quick_start_runs_as_written(module_server: Server, tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(section_blocks("python")[0])
    port = free_port()
    env = dict(os.environ, REDIS_URL=module_server.url)
    process = subprocess.Popen([sys.executable, "-m", "uvicorn", "app:app", "--host", HOST, "--port", str(port)],
                               cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://{HOST}:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                health = httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
                assert time.monotonic() < deadline, "the quick start did not start"
                time.sleep(0.05)
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
                "rl:{ip:127.0.0.1}:all", "rl:{ip:127.0.0.1}:api", "rl:{ip:127.0.0.1}:search"]
    finally:
        process.kill()
        process.wait(10)
