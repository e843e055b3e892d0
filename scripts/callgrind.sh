#!/usr/bin/env bash
# Instructions per call (the module's and the server's, under callgrind) for the limiters' main paths:
# repeatable for the same binaries whatever else the machine does, so before/after comparisons of the
# command layer do not drown in throughput noise.
#
#   scripts/callgrind.sh [module.so] [redis-server]     (defaults: this build, the PATH's server)
#
# For each path: a fresh server under callgrind, a warm-up (twice as many calls as keys, so that random keys
# mostly exist), counters zeroed, N calls through
# redis-benchmark (1 client, pipeline 16), counters dumped; prints total instructions / N.
set -euo pipefail
cd "$(dirname "$0")/.."
module=$(realpath "${1:-target/release/libredis_ratelimit.so}")
export RL_REDIS_SERVER=${2:-${RL_REDIS_SERVER:-redis-server}}
calls=${RL_CALLGRIND_CALLS:-20000}
command -v valgrind >/dev/null || scripts/ensure-deps.sh valgrind
# shellcheck source=scripts/module-server.sh
. scripts/module-server.sh

# measure NAME RANDOM_KEYS [CONFIG-NAME VALUE] COMMAND...   (a ratelimit.* config set first when given)
measure() {
  local name=$1 range=$2 total dump own
  shift 2
  start_server "$module" valgrind --tool=callgrind --callgrind-out-file="$work/cg.out"
  if [[ $1 == ratelimit.* ]]; then
    redis-cli -p "$port" config set "$1" "$2" >/dev/null
    shift 2
  fi
  redis-benchmark -p "$port" -n $((2 * range > 2000 ? 2 * range : 2000)) -c 1 -P 16 -r "$range" "$@" >/dev/null
  callgrind_control -z "$server_pid" >/dev/null 2>&1
  redis-benchmark -p "$port" -n "$calls" -c 1 -P 16 -r "$range" "$@" >/dev/null
  callgrind_control -d "$server_pid" >/dev/null 2>&1
  dump=$(ls -S "$work"/cg.out.* | head -1)
  total=$(awk '/^(summary|totals):/ {print $2}' "$dump" | sort -n | tail -1)
  # The module's entry point, inclusive of the server API calls it makes (key lookups, replies, writes).
  own=$(callgrind_annotate --inclusive=yes "$dump" 2>/dev/null | awk '/dispatch/ {gsub(",", "", $1); print $1; exit}' || true)
  stop_server
  rm -f "$work"/cg.out*
  printf '%-48s %8d instructions/call in all, %6d in the command\n' "$name" $((total / calls)) $((${own:-0} / calls))
}

off=(ratelimit.class-stats no)
# The token bucket's paths, each with the key class statistics on (the default) and off: a hot key
# (mostly denied), a hot key always allowed, random keys whose expiry moves with most calls (a 2 s
# refill), random keys whose expiry stays (a refill of 11 days: capacity 1000000 at 1/s), random keys
# denied (a cost above the capacity: no write; the most denied keys' summary churns).
for stats in on off; do
  cfg=()
  [ "$stats" = on ] || cfg=("${off[@]}")
  measure "RL.TOKEN hot key, denied, stats $stats" 1 "${cfg[@]}" RL.TOKEN hot 10 5 1
  measure "RL.TOKEN hot key, allowed, stats $stats" 1 "${cfg[@]}" RL.TOKEN hot 1000000000 1000000 1
  measure "RL.TOKEN random (100k), churn, stats $stats" 100000 "${cfg[@]}" RL.TOKEN 'tok:__rand_int__' 10 5 1
  measure "RL.TOKEN random (100k), no churn, stats $stats" 100000 "${cfg[@]}" RL.TOKEN 'tok:__rand_int__' 1000000 1 1
  measure "RL.TOKEN random (100k), denied, stats $stats" 100000 "${cfg[@]}" RL.TOKEN 'den:__rand_int__' 1 1 2
done
measure "RL.THROTTLE random keys (100k)" 100000 RL.THROTTLE 'thr:__rand_int__' 9 5 1
measure "GCRA (this module) random keys (100k)" 100000 GCRA 'gcra:__rand_int__' 9 5 1
measure "RL.ACQUIRE random keys (10k)" 10000 RL.ACQUIRE 'lease:__rand_int__' 10 60 job
measure "RL.SLIDE random keys (1k)" 1000 RL.SLIDE 'slide:__rand_int__' 10 60 req
measure "RL.SLIDECOUNT random keys (100k)" 100000 RL.SLIDECOUNT 'count:__rand_int__' 100 60 1
