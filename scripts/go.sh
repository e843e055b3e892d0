#!/usr/bin/env bash
# The Go package (go/): `scripts/go.sh test` runs gofmt, go vet and go test -race against real
# redis-server processes (the module from target/release/libredis_ratelimit.so: build it first);
# `scripts/go.sh lab` runs the seed's lab on REDIS_ADDR. Says why and exits 0 when Go is missing.
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
  *) echo "usage: scripts/go.sh [test|lab]"; exit 2 ;;
esac
