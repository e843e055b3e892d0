"""The package carries its Lua library and its contract: a copy of the package without the library fails
when imported, with a message naming the file, instead of turning every call on a stock server into an
outage."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import redis_ratelimit

PACKAGE = Path(redis_ratelimit.__file__).resolve().parent


def test_a_package_without_its_library_refuses_to_import_naming_it(tmp_path: Path) -> None:
    copy = tmp_path / "redis_ratelimit"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "lua" / "ratelimit.lua").unlink()
    run = subprocess.run([sys.executable, "-c", "import redis_ratelimit"], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(tmp_path)})
    assert run.returncode != 0
    assert "lua/ratelimit.lua" in run.stderr and "reinstall" in run.stderr, run.stderr


def test_the_installed_package_has_its_library_its_scripts_and_contract() -> None:
    assert (PACKAGE / "lua" / "ratelimit.lua").is_file() and (PACKAGE / "contract.json").is_file()
    assert (PACKAGE / "lua" / "scripts" / "rl_token.lua").is_file()


def test_a_package_without_its_scripts_refuses_to_import_naming_them(tmp_path: Path) -> None:
    copy = tmp_path / "redis_ratelimit"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "lua" / "scripts" / "rl_slide.lua").unlink()
    run = subprocess.run([sys.executable, "-c", "import redis_ratelimit"], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(tmp_path)})
    assert run.returncode != 0
    assert "lua/scripts/rl_slide.lua" in run.stderr and "reinstall" in run.stderr, run.stderr
