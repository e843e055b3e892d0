#!/bin/sh
# The EVALSHA form of lua/ratelimit.lua, for Redis 6.2 and ACLs without FUNCTION: one script per function
# (rl_token.lua, ...), generated files checked in at lua/scripts/ (made by client/src/evalsha.rs;
# `cargo run -p contract-gen` writes them again, and `--check` fails when one is stale). With a directory given, copies them there; prints where they are.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-"$root/lua/scripts"}
if [ "$out" != "$root/lua/scripts" ]; then
  mkdir -p "$out"
  cp "$root"/lua/scripts/*.lua "$out/"
fi
echo "$out"
