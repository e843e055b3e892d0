"""The package carries its contract, its Lua library and the library's EVALSHA scripts: copies of the
repository's files (contract/contract.json, lua/ratelimit.lua, lua/scripts/), not checked in but made
by every build (python/build_backend.py), equal to them here and in the built sdist and wheel. A copy of
the package without one fails when imported, with a message naming the file and how to make it,
instead of turning every call on a stock server into an outage."""

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


def sources() -> dict[str, bytes]:
    """What the package ships of the repository's, by its path in the package: the contract, the
    library and every script of lua/scripts/."""
    shipped = {"contract.json": REPO / "contract" / "contract.json", "lua/ratelimit.lua": REPO / "lua" / "ratelimit.lua"}
    shipped |= {f"lua/scripts/{f.name}": f for f in (REPO / "lua" / "scripts").glob("*.lua")}
    return {name: path.read_bytes() for name, path in shipped.items()}


def test_the_package_s_copies_are_the_repository_s_sources() -> None:
    """The copies the tests import (made by scripts/python.sh): the contract, the library, every script
    and no other."""
    copies = {p.relative_to(PACKAGE).as_posix(): p.read_bytes() for p in
              [PACKAGE / "contract.json", PACKAGE / "lua" / "ratelimit.lua", *(PACKAGE / "lua" / "scripts").glob("*")]}
    assert copies.keys() == sources().keys(), "stale: run `python3 python/build_backend.py`"
    for name, text in sources().items():
        assert copies[name] == text, f"{name} stale: run `python3 python/build_backend.py`"


def test_a_package_in_a_source_tree_without_its_contract_says_how_to_make_it(tmp_path: Path) -> None:
    """A clean clone has no copies until a build, or scripts/python.sh, makes them."""
    python = tmp_path / "python"
    shutil.copytree(PACKAGE, python / "src" / "redis_ratelimit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PYTHON / "build_backend.py", python)
    (python / "src" / "redis_ratelimit" / "contract.json").unlink()
    run = subprocess.run([sys.executable, "-c", "import redis_ratelimit"], capture_output=True, text=True,
                         env={"PYTHONPATH": str(python / "src")})
    assert run.returncode != 0
    assert "ImportError: redis_ratelimit is installed without contract.json" in run.stderr, run.stderr
    assert f"python3 {python / 'build_backend.py'}" in run.stderr, run.stderr


def test_a_build_outside_the_repository_without_the_copies_refuses_naming_them(tmp_path: Path) -> None:
    """A copy of python/ alone from a clean clone (a Dockerfile's `COPY python/`) has nothing to ship."""
    source = tmp_path / "src"
    shutil.copytree(PYTHON, source, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "build", "dist", ".pytest_cache", ".mypy_cache", "lua", "contract.json"))
    run = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--outdir",
                          str(tmp_path / "dist"), str(source)], capture_output=True, text=True)
    assert run.returncode != 0
    assert "contract.json, lua/ratelimit.lua, lua/scripts missing" in run.stdout + run.stderr, run.stdout + run.stderr


def test_the_built_sdist_and_wheel_carry_the_repository_s_files(tmp_path: Path) -> None:
    """`python -m build` of python/: the sdist from the repository, the wheel from the sdist alone. Each
    carries the contract, the library and every script as the repository has them (files, not links)."""
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(tmp_path), str(PYTHON)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = {n.removeprefix("redis_ratelimit/"): z.read(n) for n in z.namelist()
                   if n.endswith((".lua", ".json")) and n.startswith("redis_ratelimit/")}
        assert "redis_ratelimit/py.typed" in z.namelist()
    assert shipped == sources(), "the wheel"
    (sdist,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as t:
        members = [m for m in t.getmembers() if "/src/redis_ratelimit/" in m.name and m.name.endswith((".lua", ".json"))]
        assert all(m.isfile() for m in members)
        shipped = {m.name.split("/src/redis_ratelimit/")[1]: t.extractfile(m).read() for m in members}  # type: ignore[union-attr]
    assert shipped == sources(), "the sdist"


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
