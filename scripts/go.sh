#!/usr/bin/env bash
# The Go package (go/): `scripts/go.sh test` runs gofmt, go vet, staticcheck and go test -race against
# real redis-server processes (the module from target/release/libredis_ratelimit.so: build it first);
# `scripts/go.sh lab` runs the seed's lab on REDIS_ADDR; `scripts/go.sh demo` on a throwaway module server,
# then on a stock one (make demo); `scripts/go.sh bench` writes docs/bench-go.md (make bench; wrk from
# Debian: scripts/ensure-deps.sh wrk). Says why and exits 0 when Go is missing.
set -euo pipefail
cd "$(dirname "$0")/../go"
if ! command -v go >/dev/null 2>&1; then
  if [ -x /usr/local/go/bin/go ]; then export PATH="/usr/local/go/bin:$PATH"; else
    echo "go.sh: no Go toolchain on this machine: the Go package is not tested"; exit 0; fi
fi
case "${1:-test}" in
  test)
    unformatted=$(gofmt -l .)
    if [ -n "$unformatted" ]; then echo "gofmt: not formatted: $unformatted"; exit 1; fi
    go vet ./...
    # staticcheck, installed from the Go module proxy when missing (skipped, saying why, when it cannot be).
    staticcheck_version=v0.8.2
    sc=$(command -v staticcheck || true)
    gobin=$(go env GOPATH)/bin
    if [ -z "$sc" ] && [ -x "$gobin/staticcheck" ]; then sc=$gobin/staticcheck; fi
    if [ -z "$sc" ]; then
      if go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version" >/dev/null 2>"${TMPDIR:-/tmp}/rl-staticcheck-install.log"; then
        sc=$gobin/staticcheck
      else
        echo "go.sh: staticcheck $staticcheck_version could not be installed (see ${TMPDIR:-/tmp}/rl-staticcheck-install.log): not run"
      fi
    fi
    if [ -n "$sc" ]; then "$sc" ./...; fi
    go test -race -count=1 ./...
    ;;
  lab)
    go run ./examples/lab
    ;;
  demo)
    # The seed's lab on the Go package, on a throwaway module server, then on a stock one (the library).
    module=$(realpath ../target/release/libredis_ratelimit.so)
    go build -o "${TMPDIR:-/tmp}/rl-go-lab" ./examples/lab
    cd ..
    # shellcheck source=scripts/module-server.sh
    . scripts/module-server.sh
    # Each output is held to the seed's lines (go/examples/lab/expected.txt, which go test holds the
    # stock run to as well) and names its engine.
    check_lab() { # $1: the output, $2: the engine line
      local line missing=0
      while IFS= read -r line; do
        grep -qF -- "$line" "$1" || { echo "go.sh demo: the lab did not print: $line" >&2; missing=1; }
      done < <(cat go/examples/lab/expected.txt; echo "$2")
      return $missing
    }
    start_server "$module"
    echo "Go (go/examples/lab) on redis-server with the module, 127.0.0.1:$port"
    REDIS_ADDR=127.0.0.1:$port "${TMPDIR:-/tmp}/rl-go-lab" | tee "$work/lab-module.txt"
    stop_server
    check_lab "$work/lab-module.txt" "engine: the ratelimit module"
    # The same without the module: RL_REDIS_SERVER's server with an empty module list.
    start_server -
    echo "Go (go/examples/lab) on redis-server without the module, 127.0.0.1:$port"
    REDIS_ADDR=127.0.0.1:$port "${TMPDIR:-/tmp}/rl-go-lab" | tee "$work/lab-stock.txt"
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    check_lab "$work/lab-stock.txt" "engine: the Lua library through FCALL"
    echo "go.sh demo: both runs printed the seed's lines"
    ;;
  bench)
    # docs/bench-go.md: the middleware on the module and the library, redis_rate v10 and the seed's
    # script behind the same middleware shape, on one module-enabled server (run it under the lock).
    command -v wrk >/dev/null 2>&1 || { echo "go.sh bench: no wrk here (scripts/ensure-deps.sh wrk installs it)"; exit 1; }
    module=$(realpath ../target/release/libredis_ratelimit.so)
    go build -o "${TMPDIR:-/tmp}/rl-go-bench" ./internal/bench
    cd ..
    # shellcheck source=scripts/module-server.sh
    . scripts/module-server.sh
    start_server "$module"
    "${TMPDIR:-/tmp}/rl-go-bench" -redis "127.0.0.1:$port" -out docs/bench-go.md "${@:2}"
    stop_server
    echo "wrote docs/bench-go.md"
    ;;
  *) echo "usage: scripts/go.sh [test|lab|demo|bench]"; exit 2 ;;
esac
