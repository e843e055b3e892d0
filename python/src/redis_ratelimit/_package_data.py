"""The package's data: the contract (``contract.json``), the Lua library (``lua/ratelimit.lua``) and its
EVALSHA scripts (``lua/scripts/``), copies of the repository's files made when the package is built
(python/build_backend.py). A package without them fails when imported, saying how to make them, never
an outage of every call on a stock server."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Iterable

__all__ = ["read", "require"]


def read(path: str) -> str:
    """The text of the package's file `path` (``lua/ratelimit.lua``, ...)."""
    try:
        return resources.files("redis_ratelimit").joinpath(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ImportError(_missing([path])) from e


def require(paths: Iterable[str]) -> None:
    """Fails (ImportError) unless every one of `paths` is a file of the package."""
    missing = [p for p in paths if not resources.files("redis_ratelimit").joinpath(p).is_file()]
    if missing:
        raise ImportError(_missing(missing))


def _missing(paths: list[str]) -> str:
    backend = Path(__file__).resolve().parents[2] / "build_backend.py"
    if backend.is_file():
        # A source tree (python/ of the repository): the copies are made, not checked in.
        how = (f"in a source tree they are copied from the repository's lua/ and contract/ by "
               f"`python3 {backend}` (every build and scripts/python.sh run it)")
    else:
        how = "reinstall the package (its wheel and sdist carry the contract, the library and its scripts)"
    return f"redis_ratelimit is installed without {', '.join(paths)}: {how}"
