#!/usr/bin/env bash
# The Python package (python/): a virtualenv in target/py-venv with the package installed editable with
# its test and `limits` extras, then
#   scripts/python.sh test                 pytest python/tests against real servers (started by the tests),
#                                          then limits' own storage tests against this package's storage
#   scripts/python.sh test ARGS...         pytest with only these arguments (e.g. python/tests/test_web_asgi.py -k x)
#   scripts/python.sh check                mypy --strict on the package; python -m build and twine check; the
#                                          sdist and wheel unpacked: the contract, library and scripts in each
#   scripts/python.sh floor                the limiters' and the limits storage's tests on the oldest
#                                          versions the package declares: Python 3.10 where there is one,
#                                          redis-py 5.0.0, limits 4.1 (a second virtualenv, target/py-floor-venv)
#   scripts/python.sh bench                the uvicorn benchmark (python/bench; writes docs/bench-python.md)
#   scripts/python.sh bench-tokens         token budgets under load: RL.HOLD / RL.SETTLE beside LiteLLM's own
#                                          TPM limiter (python/bench/bench_tokens.py; writes docs/bench-tokens.md),
#                                          in target/py-litellm-venv (`litellm[proxy]` from PyPI, made once)
#   scripts/python.sh venv                 only makes the virtualenv
# The tests find the module at target/release/libredis_ratelimit.so (RL_MODULE overrides) and the Rust
# demo server at target/release/examples/server (RL_RUST_SERVER overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=$root/target/py-venv
py=$venv/bin/python

# The package's copies of the repository's contract, Lua library and EVALSHA scripts (not checked in), made
# or refreshed before the editable install and the tests read them: python/build_backend.py, the build
# backend every build of the package runs too.
sync_package_data() {
  python3 python/build_backend.py
}

# make_venv [DIR PINS BASE]: DIR (default target/py-venv) made by the BASE interpreter (default python3),
# the package installed editable with its test and limits extras and PINS.
make_venv() {
  local venv=${1:-$venv} py=${1:-$venv}/bin/python pins=${2:-} base=${3:-python3}
  # tests/test_tls.py makes its certificate with openssl.
  command -v openssl >/dev/null 2>&1 || scripts/ensure-deps.sh openssl
  if [ -x "$py" ] && [ "$("$py" -c 'import sys; print(sys.version_info[:2])')" != \
                       "$("$base" -c 'import sys; print(sys.version_info[:2])')" ]; then
    rm -rf "$venv"  # made by another Python
  fi
  if [ ! -x "$py" ]; then
    "$base" -m venv --help >/dev/null 2>&1 || scripts/ensure-deps.sh python3-venv
    "$base" -m venv "$venv"
  fi
  # Reinstalled when pyproject.toml or the pins changed since the last install (the stamp holds the pins).
  local stamp=$venv/.installed
  if [ ! -f "$stamp" ] || [ python/pyproject.toml -nt "$stamp" ] || [ "$(cat "$stamp")" != "$pins" ]; then
    "$py" -m pip install -q --upgrade pip
    # shellcheck disable=SC2086  # the pins are words
    "$py" -m pip install -q -e "python[test,limits]" $pins
    printf '%s' "$pins" >"$stamp"
  fi
}

cmd=${1:-test}
[ $# -gt 0 ] && shift
# The oldest versions pyproject.toml declares (redis>=5, limits>=4.1), on Python 3.10 where one is here
# (on PATH, or pyenv's); Debian 12 has none: then on python3, and said.
floor_venv=$root/target/py-floor-venv
floor_pins="redis==5.0.0 limits==4.1"
python310() {
  local candidate
  for candidate in python3.10 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10*/bin/python3; do
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 10)' >/dev/null 2>&1; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}
sync_package_data
if [ "$cmd" = floor ]; then
  if ! floor_python=$(python310); then
    floor_python=python3
    echo "python.sh floor: no Python 3.10 here: the floor runs on $(python3 --version)" >&2
  fi
  make_venv "$floor_venv" "$floor_pins" "$floor_python"
  echo "python.sh floor: $("$floor_venv/bin/python" --version), $floor_pins" >&2
else
  make_venv
fi
# The suites wait on servers, sockets and clocks far more than they compute (the main suite: 41 s of CPU
# in 256 s), so they run in parallel workers (pytest-xdist), more than the cores; RL_PYTEST_WORKERS=0 runs
# them in one process. Every test starts its own servers on free ports.
workers=(-n "${RL_PYTEST_WORKERS:-4}")
case "$cmd" in
  venv) ;;
  test)
    if [ $# -gt 0 ]; then
      exec "$py" -m pytest "$@"
    fi
    "$py" -m pytest "${workers[@]}" python/tests
    # limits' own storage tests, against this package's storage (module and library, sync and async):
    # its sdist from PyPI once (cached under target/), the exclusions and their reasons in
    # python/tests/limits_suite/plugin.py.
    (cd python && "$py" tests/limits_suite/run.py "${workers[@]}")
    ;;
  check)
    (cd python && "$py" -m mypy --strict src/redis_ratelimit)
    dist=$(mktemp -d)
    trap 'rm -rf "$dist"' EXIT
    # The sdist from python/ (its build copies the contract, the library and the scripts in), the wheel
    # from the sdist alone, as pip builds it from PyPI.
    if ! "$py" -m build --outdir "$dist" python >"$dist/build.log" 2>&1; then
      cat "$dist/build.log" >&2
      exit 1
    fi
    rm "$dist/build.log"
    "$py" -m twine check --strict "$dist"/*
    # Both carry the contract, the library and every script of lua/scripts/ (no other), byte for byte.
    mkdir "$dist/wheel" "$dist/sdist"
    "$py" -m zipfile -e "$dist"/*.whl "$dist/wheel"
    tar -xzf "$dist"/*.tar.gz -C "$dist/sdist"
    for package in "$dist/wheel/redis_ratelimit" "$dist"/sdist/*/src/redis_ratelimit; do
      cmp contract/contract.json "$package/contract.json"
      cmp lua/ratelimit.lua "$package/lua/ratelimit.lua"
      diff -r lua/scripts "$package/lua/scripts"
    done
    echo "python.sh check: $(cd "$dist" && echo *.whl *.tar.gz) carry the contract, the library and" \
      "$(find lua/scripts -name '*.lua' | wc -l) scripts as lua/ and contract/ have them" >&2
    ;;
  floor)
    cd python
    exec "$floor_venv/bin/python" -m pytest -p no:cacheprovider "${workers[@]}" tests/test_limiter.py tests/test_engine.py \
      tests/test_engine_choice.py tests/test_failure.py tests/test_breaker.py tests/test_deadline.py \
      tests/test_fallback.py tests/test_acquire.py tests/test_wait.py tests/test_topologies.py \
      tests/test_resilience_cluster.py tests/test_seed.py tests/test_limits_storage.py \
      tests/test_limits_async.py tests/test_redis_internals.py tests/test_restart.py "$@"
    ;;
  bench)
    scripts/ensure-deps.sh wrk
    exec "$py" python/bench/bench_web.py "$@"
    ;;
  bench-tokens)
    # LiteLLM's proxy extras in a virtualenv of their own (the package's test extra has litellm without
    # them); the install's time is noted on the page.
    lvenv=${RL_LITELLM_VENV:-$root/target/py-litellm-venv}
    if [ ! -x "$lvenv/bin/python" ] || ! "$lvenv/bin/python" -c 'import litellm.proxy.utils' >/dev/null 2>&1; then
      python3 -m venv "$lvenv"
      start=$(date +%s)
      "$lvenv/bin/python" -m pip install -q 'litellm[proxy]' redis
      echo "$(( $(date +%s) - start )) s on $(date +%F)" >"$lvenv/.install-time"
    fi
    RL_LITELLM_INSTALL=$(cat "$lvenv/.install-time" 2>/dev/null || echo "made before this run") \
      exec "$lvenv/bin/python" python/bench/bench_tokens.py "$@"
    ;;
  *)
    echo "usage: scripts/python.sh [venv|test|check|floor|bench|bench-tokens] [args]" >&2
    exit 2
    ;;
esac
