"""The README's `limits` example (section "limits, slowapi, Flask-Limiter") runs as written on a Redis
with the module and on one without it, and prints what its comments say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def snippet() -> str:
    found = re.search(r"<!-- limits-quick-start -->\n```python\n(.*?)```", README.read_text(), re.S)
    assert found, "the README's limits example is marked <!-- limits-quick-start -->"
    return found.group(1)


@pytest.mark.parametrize("module, engine", [(True, "module"), (False, "functions")], ids=["module", "library"])
def test_the_limits_example_prints_what_it_says(servers: Any, module: bool, engine: str) -> None:
    server = servers.redis(module=module)
    env = dict(os.environ, REDIS_URL=f"redis://127.0.0.1:{server.port}/0")
    out = subprocess.run([sys.executable, "-c", snippet()], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [engine] + ["[True, True, True, False]"] * 3 + ["3"]
