"""python/README.md's quick start runs as written and prints what its comments say, on the module
and on a stock server (the library, loaded by the limiter)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import Servers
from servers import REPO


def quick_start() -> str:
    text = (REPO / "python/README.md").read_text()
    found = re.search(r"<!-- core-quick-start -->\n```python\n(.*?)```", text, re.S)
    assert found, "the README's core quick start is marked <!-- core-quick-start -->"
    return found.group(1)


@pytest.mark.parametrize("module,engine", [(True, "module"), (False, "functions")], ids=["module", "library"])
def test_the_quick_start_prints_what_it_says(servers: Servers, module: bool, engine: str) -> None:
    server = servers.redis(module=module)
    ran = subprocess.run([sys.executable, "-c", quick_start()], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "REDIS_URL": server.url})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [engine, "10 allowed", "False 0 1", "False 1"]
    # What the comments promise.
    code = quick_start()
    assert "# 10 allowed" in code and "# False 0 1" in code and "# False 1:" in code


def high_volume() -> str:
    text = (REPO / "python/README.md").read_text()
    found = re.search(r"<!-- high-volume -->\n```python\n(.*?)```", text, re.S)
    assert found, "the README's high-volume example is marked <!-- high-volume -->"
    return found.group(1)


@pytest.mark.parametrize("module", [True, False], ids=["module", "library"])
def test_the_high_volume_example_prints_what_it_says(servers: Servers, module: bool) -> None:
    server = servers.redis(module=module)
    ran = subprocess.run([sys.executable, "-c", high_volume()], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "REDIS_URL": server.url})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["100 allowed, 98 local", "900", "13 tokens given back"]
    code = high_volume()  # what the comments promise
    assert "# 100 allowed, 98 local" in code and "# 900:" in code and "# 13 tokens given back" in code
