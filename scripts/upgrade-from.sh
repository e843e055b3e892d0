#!/usr/bin/env bash
# Builds the module of an older release from this repository's git history, for the in-place upgrade
# test (tests/upgrade.rs, RL_UPGRADE_FROM), and prints the path of its .so.
#
#   scripts/upgrade-from.sh [0.1]
#
# Cached in target/upgrade-from/<release>/. Exits 2 with a message on stderr when the history does not
# hold that release (a shallow clone).
set -euo pipefail
cd "$(dirname "$0")/.."
release=${1:-0.1}
case "$release" in
0.1) commit=dc6d6b8 ;; # the last commit of release 0.1
*)
  echo "unknown release $release (known: 0.1)" >&2
  exit 2
  ;;
esac
out="$PWD/target/upgrade-from/$release"
so="$out/target/release/libredis_ratelimit.so"
if [ ! -f "$so" ]; then
  git cat-file -e "$commit^{commit}" 2>/dev/null ||
    { echo "release $release ($commit) is not in this clone's history (a shallow clone?)" >&2; exit 2; }
  rm -rf "$out/src" && mkdir -p "$out/src"
  git archive "$commit" | tar -x -C "$out/src"
  echo "building release $release of the module from $commit (once per checkout)..." >&2
  (cd "$out/src" && CARGO_TARGET_DIR="$out/target" cargo build --release --lib -p redis-ratelimit >"$out/build.log" 2>&1) ||
    { echo "the build of release $release failed (see $out/build.log)" >&2; exit 2; }
fi
echo "$so"
