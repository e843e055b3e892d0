#!/usr/bin/env bash
# The Go package (go/): `scripts/go.sh test` runs gofmt, go vet and go test -race against real
# redis-server processes (the module from target/release/libredis_ratelimit.so: build it first);
# `scripts/go.sh lab` runs the seed's lab on REDIS_ADDR; `scripts/go.sh demo` on a throwaway module server,
# then on a stock one (make demo). Says why and exits 0 when Go is missing.
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
    start_server "$module"
    echo "Go (go/examples/lab) on redis-server with the module, 127.0.0.1:$port"
    REDIS_ADDR=127.0.0.1:$port "${TMPDIR:-/tmp}/rl-go-lab"
    stop_server
    # The same without the module: RL_REDIS_SERVER's server with an empty module list.
    port=$(free_port)
    "${RL_REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
    server_pid=$!
    for _ in $(seq 400); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
    echo "Go (go/examples/lab) on redis-server without the module, 127.0.0.1:$port"
    REDIS_ADDR=127.0.0.1:$port "${TMPDIR:-/tmp}/rl-go-lab"
    ;;
  *) echo "usage: scripts/go.sh [test|lab|demo]"; exit 2 ;;
esac
