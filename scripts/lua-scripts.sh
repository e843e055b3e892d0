#!/bin/sh
# Writes the EVALSHA form of lua/ratelimit.lua: one script per function (rl_token.lua, ...) in the
# directory given (default lua/scripts), for Redis 6.2 and ACLs without FUNCTION. Each script is the
# library's one source without its shebang line and its registration, ending in one call of its function,
# so it takes the same KEYS and ARGV as FCALL does. Nothing of the algorithms is written here.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
source="$root/lua/ratelimit.lua"
out=${1:-"$root/lua/scripts"}
mkdir -p "$out"
names=$(sed -n '/^local NAMES = {/,/^}/p' "$source" | grep -o '"rl_[a-z]*"' | tr -d '"')
for name in $names; do
  {
    # Redis 6.2 replicates a script by effect only when asked (Redis 7 always does).
    echo 'if redis.replicate_commands then redis.replicate_commands() end'
    sed -e '1d' -e '/^-- REGISTER:/,$d' "$source"
    printf 'return call("%s", KEYS, ARGV)\n' "$name"
  } > "$out/$name.lua"
done
echo "$out"
