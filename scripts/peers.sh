#!/usr/bin/env bash
# Builds the peers that the differential tests and `make bench` compare against, from their public
# repositories' git directories (this machine cannot reach GitHub itself: point the variables at local
# clones or mirrors). Results are cached in ${RL_PEER_CACHE:-~/.cache/redis-ratelimit/peers}.
#
#   RL_PEER_CELL_GIT=<git dir of brandur/redis-cell>  scripts/peers.sh cell
#       redis-cell's module at its v0.5.0 tag          -> peers/redis-cell/libredis_cell.so
#   RL_PEER_REDIS_GIT=<git dir of a Redis clone holding c3db5254b, e.g. minchopaskal/redis>
#       scripts/peers.sh gcra     redis-server at c3db5254b, the last commit with GCRA enabled
#                                 -> peers/redis-gcra/redis-server
#       scripts/peers.sh harness  that clone's HEAD (no GCRA) with its test harness, and gcra.tcl taken
#                                 from c3db5254b  -> peers/redis-harness/ (runtest, src/redis-server, ...)
#   scripts/peers.sh env          prints the RL_BENCH_* variables for what is built
#
# Exits 2 with a message on stderr when a peer cannot be built here.
set -euo pipefail

what=${1:?usage: scripts/peers.sh cell|gcra|harness|env}
cache=${RL_PEER_CACHE:-$HOME/.cache/redis-ratelimit/peers}
mkdir -p "$cache"
GCRA_COMMIT=c3db5254b

unavailable() {
  echo "peer $what is not available: $*" >&2
  exit 2
}

checkout() { # $1: git dir, $2: revision, $3: destination
  rm -rf "$3" && mkdir -p "$3"
  git --git-dir="$1" archive "$2" | tar -x -C "$3"
}

case "$what" in
cell)
  out="$cache/redis-cell/libredis_cell.so"
  if [ ! -f "$out" ]; then
    git_dir=${RL_PEER_CELL_GIT:?set RL_PEER_CELL_GIT to a git dir of brandur/redis-cell}
    src="$cache/src/redis-cell"
    checkout "$git_dir" v0.5.0 "$src"
    echo "building redis-cell v0.5.0 (once per machine)..." >&2
    (cd "$src" && cargo build --release >"$cache/redis-cell-build.log" 2>&1) ||
      unavailable "the build failed (see $cache/redis-cell-build.log)"
    mkdir -p "$cache/redis-cell"
    install "$src/target/release/libredis_cell.so" "$out"
  fi
  echo "$out"
  ;;
gcra)
  out="$cache/redis-gcra/redis-server"
  if [ ! -f "$out" ]; then
    git_dir=${RL_PEER_REDIS_GIT:?set RL_PEER_REDIS_GIT to a git dir of a Redis clone holding $GCRA_COMMIT}
    src="$cache/src/redis-gcra"
    checkout "$git_dir" "$GCRA_COMMIT" "$src"
    echo "building redis-server at $GCRA_COMMIT (a few minutes, once per machine)..." >&2
    make -C "$src" BUILD_TLS=no -j"$(nproc)" >"$cache/redis-gcra-build.log" 2>&1 ||
      unavailable "the build failed (see $cache/redis-gcra-build.log)"
    mkdir -p "$cache/redis-gcra"
    install "$src/src/redis-server" "$src/src/redis-cli" "$cache/redis-gcra/"
  fi
  echo "$out"
  ;;
harness)
  out="$cache/redis-harness"
  if [ ! -f "$out/ready" ]; then
    git_dir=${RL_PEER_REDIS_GIT:?set RL_PEER_REDIS_GIT to a git dir of a Redis clone holding $GCRA_COMMIT}
    checkout "$git_dir" HEAD "$out"
    git --git-dir="$git_dir" show "$GCRA_COMMIT:tests/unit/gcra.tcl" >"$out/tests/unit/gcra.tcl"
    echo "building the Redis test harness's server at the clone's HEAD (a few minutes, once per machine)..." >&2
    make -C "$out" BUILD_TLS=no -j"$(nproc)" >"$cache/redis-harness-build.log" 2>&1 ||
      unavailable "the build failed (see $cache/redis-harness-build.log)"
    touch "$out/ready"
  fi
  echo "$out"
  ;;
env)
  [ -f "$cache/redis-gcra/redis-server" ] && echo "export RL_BENCH_GCRA_SERVER=$cache/redis-gcra/redis-server"
  [ -f "$cache/redis-cell/libredis_cell.so" ] && echo "export RL_BENCH_CELL_MODULE=$cache/redis-cell/libredis_cell.so"
  [ -f "$cache/redis-harness/ready" ] && echo "export RL_PEER_HARNESS=$cache/redis-harness"
  true
  ;;
*)
  echo "usage: scripts/peers.sh cell|gcra|harness|env" >&2
  exit 2
  ;;
esac
