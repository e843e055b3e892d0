"""Runs `limits`' own storage tests against this package's `limits` storage.

    python tests/limits_suite/run.py [pytest args...]        (from python/, in the package's venv)

Fetches the sdist of the installed `limits` version once (`pip download --no-binary :all: --no-deps`)
into <repo>/target/limits-sdist/, unpacks it, and runs pytest there with plugin.py, which points every
storage-parametrized test class at this storage (module and stock servers) and skips the excluded
tests with their reason. Exits with pytest's status.

Tests that `limits` marks `@pytest.mark.flaky` are retried once, as `limits`' own CI retries them (the
`flaky` plugin, in the test extras). Their timing can straddle a window's edge: the sliding counter's
stats test, run in the last two seconds of a minute, sees its first hits in the previous window, where
`limits`' floored estimate and this storage's exact one part (python/README.md, "Sliding window
counter: the estimate is exact").
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CACHE = REPO / "target" / "limits-sdist"

INI = """[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
markers =
    memory: -
    redis: -
    redis_sentinel: -
    redis_cluster: -
    memcached: -
    mongodb: -
    valkey: -
    valkey_cluster: -
    unit: -
    integration: -
"""


def sdist() -> Path:
    import limits

    version = limits.__version__
    root = CACHE / f"limits-{version}"
    if (root / "tests" / "test_strategy.py").is_file():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    archive = CACHE / f"limits-{version}.tar.gz"
    if not archive.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                        f"limits=={version}", "-d", str(CACHE)], check=True)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+
            tar.extractall(CACHE, filter="data")
        else:
            tar.extractall(CACHE)  # noqa: S202 - PyPI's sdist of the installed limits
    return root


def main(argv: list[str]) -> int:
    if importlib.util.find_spec("flaky") is None:  # the plugin that retries limits' flaky-marked tests
        sys.exit("limits suite: the `flaky` pytest plugin is missing: pip install -e 'python[test]'")
    root = sdist()
    ini = CACHE / "pytest-rl.ini"
    ini.write_text(INI)
    args = [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(root), "--noconftest",
            "-p", "plugin", "-p", "no:cacheprovider", "-rs",
            "tests/test_storage.py", "tests/test_strategy.py", "tests/aio/test_storage.py",
            "tests/aio/test_strategy.py", *argv]
    env = dict(__import__("os").environ)
    env["PYTHONPATH"] = str(HERE) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run(args, cwd=root, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
