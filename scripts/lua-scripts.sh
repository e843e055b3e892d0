#!/bin/sh
# The EVALSHA form of lua/ratelimit.lua, for Redis 6.2 and ACLs without FUNCTION: one script per function
# (rl_token.lua, ...), generated files checked in at lua/scripts/ (client/src/evalsha.rs writes them;
# `RL_BLESS=1 cargo test -p redis-ratelimit-client contract` writes them again, and a test fails when one
# is stale). With a directory given, copies them there; prints where they are.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-"$root/lua/scripts"}
if [ "$out" != "$root/lua/scripts" ]; then
  mkdir -p "$out"
  cp "$root"/lua/scripts/*.lua "$out/"
fi
echo "$out"
