#!/usr/bin/env bash
# envoyproxy/ratelimit beside this service, outside the repository (nothing of its code is committed):
#
#   rls/scripts/peer.sh build   extracts a fetched snapshot of github.com/envoyproxy/ratelimit
#                               (RLS_PEER_MIRROR: its git directory; the search tool's fetch puts it at
#                               /work/.mirror/envoyproxy+ratelimit/repo) into
#                               ~/.cache/redis-ratelimit/rls-peer/src and builds its binary there
#                               (./src/service_cmd, modules through the Go module proxy)
#   rls/scripts/peer.sh test    build, then the side-by-side test (rls/tests/peer.rs, --ignored) and
#                               the configuration test over its files (rls/tests/peer_configs.rs)
#   rls/scripts/peer.sh bench   build, then the load generator against both (docs/bench-rls.md)
#
# Without a snapshot it says so and exits 0: the comparison is skipped, not failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
action=${1:-test}
cache=${RLS_PEER_CACHE:-$HOME/.cache/redis-ratelimit/rls-peer}
mirror=${RLS_PEER_MIRROR:-/work/.mirror/envoyproxy+ratelimit/repo}
export RLS_PEER_SRC=$cache/src RLS_PEER_BIN=$cache/ratelimit

build() {
  if [ ! -d "$mirror" ] && [ ! -f "$RLS_PEER_SRC/go.mod" ]; then
    echo "skipped: no snapshot of envoyproxy/ratelimit at $mirror (set RLS_PEER_MIRROR)" >&2
    exit 0
  fi
  command -v go >/dev/null || { echo "skipped: Go is not installed" >&2; exit 0; }
  if [ -d "$mirror" ]; then
    commit=$(git --git-dir="$mirror" rev-parse HEAD)
    if [ "$(cat "$cache/commit" 2>/dev/null)" != "$commit" ]; then
      rm -rf "$RLS_PEER_SRC" "$RLS_PEER_BIN"
      mkdir -p "$RLS_PEER_SRC"
      git --git-dir="$mirror" archive HEAD | tar -x -C "$RLS_PEER_SRC"
      echo "$commit" >"$cache/commit"
    fi
  fi
  if [ ! -x "$RLS_PEER_BIN" ]; then
    (cd "$RLS_PEER_SRC" && GOFLAGS=-buildvcs=false go build -o "$RLS_PEER_BIN" ./src/service_cmd)
  fi
  echo "envoyproxy/ratelimit $(cat "$cache/commit" 2>/dev/null || echo '(source only)'): $RLS_PEER_BIN" >&2
}

case $action in
  build) build ;;
  test)
    build
    cargo test --release -p redis-ratelimit-rls --test peer_configs -- --nocapture
    cargo test --release -p redis-ratelimit-rls --test peer -- --ignored --nocapture
    ;;
  bench)
    build
    cargo test --release -p redis-ratelimit-rls --test bench -- --ignored --nocapture
    ;;
  *) echo "usage: rls/scripts/peer.sh build|test|bench" >&2; exit 2 ;;
esac
