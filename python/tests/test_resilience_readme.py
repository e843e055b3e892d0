"""python/README.md's sections on failure policies, permits and waiting run as written (each Python
block, with REDIS_URL pointing at a module-enabled test server)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from servers import Server

README = Path(__file__).resolve().parents[1] / "README.md"
SECTIONS = ("## When Redis cannot decide", "## Concurrency limits: permits", "## Waiting for capacity")


def _blocks(heading: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.find(heading)
    if start < 0:
        pytest.skip(f"README.md has no section {heading!r} yet")
    end = text.find("\n## ", start + len(heading))
    section = text[start:] if end < 0 else text[start:end]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.mark.parametrize("heading", SECTIONS)
def test_the_readme_blocks_run_as_written(heading: str, module_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _blocks(heading)
    assert blocks, f"no Python block under {heading!r}"
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{module_server.port}/")
    for block in blocks:
        exec(compile(block, f"README.md ({heading})", "exec"), {"__name__": "readme"})
    assert os.environ["REDIS_URL"].endswith(f":{module_server.port}/")
