#!/usr/bin/env bash
# Instructions per call of the whole server (callgrind) for the Lua library's functions, through FCALL and
# through their EVALSHA scripts, beside the scripts they replace (bench/scripts/): repeatable whatever else
# the machine does, so a change to the library is measured before and after without throughput noise.
#
#   scripts/callgrind-lua.sh [filter]     (a case runs when its name contains the filter; default: all)
#
# Each case: a fresh stock server under callgrind with the library loaded (lua/ratelimit.lua) and the
# scripts cached, a warm-up over the keys, counters zeroed, N calls through redis-benchmark (1 client,
# pipeline 16, random keys over 1000), counters dumped; prints total instructions / N.
set -euo pipefail
cd "$(dirname "$0")/.."
filter=${1:-}
calls=${RL_CALLGRIND_CALLS:-10000}
command -v valgrind >/dev/null || scripts/ensure-deps.sh valgrind
# shellcheck source=scripts/module-server.sh
. scripts/module-server.sh
scripts/lua-scripts.sh "$work/scripts" >/dev/null

measure() {
  local name=$1 total dump
  shift
  [[ -z $filter || $name == *"$filter"* ]] || return 0
  start_server - valgrind --tool=callgrind --callgrind-out-file="$work/cg.out"
  redis-cli -p "$port" -x FUNCTION LOAD REPLACE <lua/ratelimit.lua >/dev/null
  local args=() a
  for a in "$@"; do
    case $a in
      @*) a=$(redis-cli -p "$port" -x SCRIPT LOAD <"${a#@}") ;;
    esac
    args+=("$a")
  done
  redis-benchmark -p "$port" -n 2000 -c 1 -P 16 -r 1000 "${args[@]}" >/dev/null
  callgrind_control -z "$server_pid" >/dev/null 2>&1
  redis-benchmark -p "$port" -n "$calls" -c 1 -P 16 -r 1000 "${args[@]}" >/dev/null
  callgrind_control -d "$server_pid" >/dev/null 2>&1
  dump=$(ls -S "$work"/cg.out.* | head -1)
  total=$(awk '/^(summary|totals):/ {print $2}' "$dump" | sort -n | tail -1)
  stop_server
  rm -f "$work"/cg.out*
  printf '%-44s %8d instructions/call\n' "$name" $((total / calls))
}

k='k:__rand_int__'
s=$work/scripts
measure "FCALL rl_token" FCALL rl_token 1 "$k" 10 5 1
measure "EVALSHA rl_token" EVALSHA "@$s/rl_token.lua" 1 "$k" 10 5 1
measure "token-bucket script (HMGET/HSET)" EVALSHA @bench/scripts/token_bucket.lua 1 "$k" 10 5 1
measure "GCRA script" EVALSHA @bench/scripts/gcra.lua 1 "$k" 10 5 1 1
measure "FCALL rl_fixed" FCALL rl_fixed 1 "$k" 100 60 1
measure "EVALSHA rl_fixed" EVALSHA "@$s/rl_fixed.lua" 1 "$k" 100 60 1
measure "INCR+PEXPIRE script" EVALSHA @bench/scripts/fixed_window.lua 1 "$k" 100 60000 1
measure "FCALL rl_slidecount" FCALL rl_slidecount 1 "$k" 100 60 1
measure "FCALL rl_slide, limit 100" FCALL rl_slide 1 "$k" 100 60 __rand_int__
measure "sorted-set log script, limit 100" EVALSHA @bench/scripts/sliding_log.lua 1 "$k" 100 60 __rand_int__
measure "FCALL rl_acquire" FCALL rl_acquire 1 "$k" 10 60 __rand_int__
measure "FCALL rl_all (token + fixed)" FCALL rl_all 2 "a:{__rand_int__}" "b:{__rand_int__}" TOKEN 10 5 1 FIXED 100 60 1
