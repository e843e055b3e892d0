"""The package carries its Lua library and its contract: a copy of the package without the library fails
when imported, with a message naming the file, instead of turning every call on a stock server into an
outage."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import redis_ratelimit

PACKAGE = Path(redis_ratelimit.__file__).resolve().parent
PYTHON = Path(__file__).resolve().parents[1]
REPO = PYTHON.parent


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


def test_the_license_is_a_file_of_its_own_equal_to_the_repository_s() -> None:
    """Not a symlink to ../LICENSE: a copy of python/ alone (a Dockerfile's `COPY python/`) has it."""
    license = PYTHON / "LICENSE"
    assert license.is_file() and not license.is_symlink()
    assert license.read_bytes() == (REPO / "LICENSE").read_bytes()


def markdown_links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_the_readme_s_links_resolve_on_pypi() -> None:
    """The README is the package's long description: a link relative to the repository goes nowhere."""
    links = markdown_links((PYTHON / "README.md").read_text())
    assert links, "the README links to the repository's docs"
    assert [link for link in links if not link.startswith(("https://", "http://", "#"))] == []


def test_a_wheel_and_an_sdist_built_from_a_copy_of_python_alone_carry_the_license(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(PYTHON, source, symlinks=True, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "build", "dist", ".pytest_cache", ".mypy_cache"))
    out = tmp_path / "dist"
    run = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [wheel] = out.glob("*.whl")
    [sdist] = out.glob("*.tar.gz")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        [license] = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert z.read(license) == (REPO / "LICENSE").read_bytes()
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        description = z.read(metadata).decode()
    assert "License-File: LICENSE" in description
    assert [link for link in markdown_links(description) if not link.startswith(("https://", "http://", "#"))] == []
    with tarfile.open(sdist) as t:
        [member] = [m for m in t.getmembers() if m.name.endswith("/LICENSE")]
        assert member.isfile(), "the sdist's LICENSE is a file, not a link"
