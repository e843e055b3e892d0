"""The package's build backend: setuptools', after copying the repository's contract, Lua library and
EVALSHA scripts into the package (src/redis_ratelimit/), where they ship as package data. Copies, not
checked in: the sources are ../contract/contract.json, ../lua/ratelimit.lua and ../lua/scripts/.

Every build copies them when it runs inside the repository (an sdist, a wheel, an editable install); an
sdist carries them, so a wheel built from it needs no repository. `python3 build_backend.py` copies them
and nothing else (scripts/python.sh does, before the tests): this module needs only the standard library
until a build asks for setuptools.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

PYTHON = Path(__file__).resolve().parent
REPO = PYTHON.parent
PACKAGE = PYTHON / "src" / "redis_ratelimit"
#: Each copy in the package, and its source in the repository.
COPIES = {
    "contract.json": REPO / "contract" / "contract.json",
    "lua/ratelimit.lua": REPO / "lua" / "ratelimit.lua",
    "lua/scripts": REPO / "lua" / "scripts",
}


def sync() -> None:
    """Makes the package's copies equal to the repository's sources (a file is written only when it
    differs, a script the repository no longer has is removed). Outside the repository (an sdist) the
    copies must be there already."""
    if not all(source.exists() for source in COPIES.values()):
        missing = [name for name in COPIES if not (PACKAGE / name).exists()]
        if missing:
            raise SystemExit(f"redis_ratelimit: {', '.join(missing)} missing from {PACKAGE} and no repository "
                             f"at {REPO} to copy them from: build from the repository's python/ or its sdist")
        return
    for name, source in COPIES.items():
        if source.is_dir():
            wanted = {f.name for f in source.glob("*.lua")}
            for stale in (PACKAGE / name).glob("*"):
                if stale.name not in wanted:
                    stale.unlink()
            for f in wanted:
                _copy(source / f, PACKAGE / name / f)
        else:
            _copy(source, PACKAGE / name)


def _copy(source: Path, copy: Path) -> None:
    text = source.read_bytes()
    if not copy.is_file() or copy.read_bytes() != text:
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(text)


def _setuptools() -> ModuleType:
    from setuptools import build_meta

    return build_meta


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    sync()
    return str(_setuptools().build_sdist(sdist_directory, config_settings))


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    sync()
    return str(_setuptools().build_wheel(wheel_directory, config_settings, metadata_directory))


def build_editable(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    sync()
    return str(_setuptools().build_editable(wheel_directory, config_settings, metadata_directory))


def __getattr__(name: str) -> Any:
    """The other hooks (get_requires_for_build_wheel, prepare_metadata_for_build_wheel, ...): setuptools'."""
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(_setuptools(), name)


if __name__ == "__main__":
    sync()
