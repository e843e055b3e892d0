#!/usr/bin/env bash
# make examples: the Python (redis-py), Node.js (ioredis) and Go (go-redis) examples in examples/, each
# run against a throwaway module-enabled redis-server on a free loopback port, with their client
# libraries installed locally (a virtualenv, node_modules) under ${RL_EXAMPLES_CACHE:-~/.cache/...}.
# A language whose toolchain cannot be had is skipped with the reason; a failure fails. Then checks
# that the snippets of docs/client.md ("Any other language") are the examples' marked regions, so they
# cannot drift.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cache=${RL_EXAMPLES_CACHE:-$HOME/.cache/redis-ratelimit/examples}
mkdir -p "$cache"
module=$root/target/release/libredis_ratelimit.so
[ -f "$module" ] || { echo "missing $module: run make build" >&2; exit 1; }

# shellcheck source=scripts/module-server.sh
. scripts/module-server.sh
start_server "$module"
closed=$(free_port)   # nothing listens there: "Redis unreachable"

passed=() failed=() skipped=()
run() { # name expected-line command...
  local name=$1 expect=$2; shift 2
  echo "=== $name"
  local out
  if out=$("$@" 2>&1) && grep -qF "$expect" <<<"$out"; then
    echo "$out"
    passed+=("$name")
  else
    echo "$out"
    echo "--- $name failed (expected a line with: $expect)"
    failed+=("$name")
  fi
}

# Python: redis-py in a virtualenv.
if python3 -m venv --help >/dev/null 2>&1 || scripts/ensure-deps.sh python3-venv; then
  venv=$cache/venv
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  if "$venv/bin/pip" install -q -r examples/python/requirements.txt; then
    run python "python token: 10 allowed, 2 denied" "$venv/bin/python" examples/python/ratelimit_example.py "redis://127.0.0.1:$port/" "$closed"
  else
    failed+=("python (pip install redis)")
  fi
else
  skipped+=("python: no python3-venv")
fi

# Node.js: ioredis in node_modules.
if command -v npm >/dev/null 2>&1 || scripts/ensure-deps.sh nodejs npm; then
  nodedir=$cache/node
  mkdir -p "$nodedir"
  cp examples/node/package.json "$nodedir/"
  if (cd "$nodedir" && npm install --silent --no-audit --no-fund >/dev/null); then
    run node "node token: 10 allowed, 2 denied" env NODE_PATH="$nodedir/node_modules" node examples/node/ratelimit_example.js "redis://127.0.0.1:$port/" "$closed"
  else
    failed+=("node (npm install ioredis)")
  fi
else
  skipped+=("node: no Node.js / npm")
fi

# Go: go-redis as Debian packages it (the Go module proxy is not reachable from this project's machines).
if scripts/ensure-deps.sh go golang-gopkg-redis.v5-dev; then
  gocache=$cache/go-build
  run go "go token: 10 allowed, 2 denied" env GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$gocache" GOFLAGS= \
    go run examples/go/main.go "127.0.0.1:$port" "$closed"
else
  skipped+=("go: no Go toolchain or go-redis package (apt-get install golang-go golang-gopkg-redis.v5-dev)")
fi

# docs/client.md's snippets are the regions between [readme:<lang>] markers, verbatim.
echo "=== docs/client.md snippets"
drift=0
for f in examples/python/ratelimit_example.py examples/node/ratelimit_example.js examples/go/main.go; do
  snippet=$(awk '/\[readme:/{on=1; next} /\[\/readme:/{on=0} on' "$f")
  if ! python3 - "$snippet" <<'PY'
import sys
snippet = sys.argv[1]
page = open("docs/client.md").read()
sys.exit(0 if snippet.strip() and snippet in page else 1)
PY
  then
    echo "docs/client.md does not contain the marked region of $f verbatim"
    drift=1
  fi
done
[ $drift -eq 0 ] && echo "docs/client.md snippets match the examples" || failed+=("docs/client.md snippets")

echo "=== examples: passed: ${passed[*]:-none}; failed: ${failed[*]:-none}; skipped: ${skipped[*]:-none}"
[ ${#failed[@]} -eq 0 ] && [ ${#passed[@]} -gt 0 ]
