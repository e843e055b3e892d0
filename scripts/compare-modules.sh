#!/usr/bin/env bash
# Throughput of two builds of the module side by side: for each path, runs alternate between the two
# (interleaved, so drift on a shared machine touches both alike) and the median of each is printed,
# with the server's own time per call from INFO commandstats. For before/after comparisons of a change.
#
#   scripts/compare-modules.sh OLD.so NEW.so        (RL_COMPARE_RUNS=5, RL_COMPARE_REQUESTS=300000)
set -euo pipefail
cd "$(dirname "$0")/.."
old=$(realpath "${1:?usage: scripts/compare-modules.sh OLD.so NEW.so}")
new=$(realpath "${2:?usage: scripts/compare-modules.sh OLD.so NEW.so}")
runs=${RL_COMPARE_RUNS:-5}
requests=${RL_COMPARE_REQUESTS:-300000}
# shellcheck source=scripts/module-server.sh
. scripts/module-server.sh

# one MODULE RANGE COMMAND...: prints "req/s us_per_call"
one() {
  local module=$1 range=$2
  shift 2
  start_server "$module"
  local rps name usec
  rps=$(redis-benchmark -p "$port" -n "$requests" -c 50 -P 16 -r "$range" --csv "$@" | tail -1 | cut -d, -f2 | tr -d '"')
  name=$(echo "$1" | tr 'A-Z' 'a-z')
  usec=$(redis-cli -p "$port" info commandstats | tr -d '\r' | awk -F'[,=]' -v c="cmdstat_$name:calls" '$1 == c {print $6}')
  stop_server
  echo "$rps $usec"
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# path NAME RANGE COMMAND...
path() {
  local name=$1 range=$2
  shift 2
  : >"$work/old" && : >"$work/new"
  for _ in $(seq "$runs"); do
    one "$old" "$range" "$@" >>"$work/old"
    one "$new" "$range" "$@" >>"$work/new"
  done
  local o n ou nu
  o=$(cut -d' ' -f1 "$work/old" | median) n=$(cut -d' ' -f1 "$work/new" | median)
  ou=$(cut -d' ' -f2 "$work/old" | median) nu=$(cut -d' ' -f2 "$work/new" | median)
  printf '%-34s old %9.0f req/s %5.2f us/call   new %9.0f req/s %5.2f us/call   new/old %.3f\n' \
    "$name" "$o" "$ou" "$n" "$nu" "$(awk -v a="$n" -v b="$o" 'BEGIN {print a / b}')"
}

path "RL.TOKEN hot key" 1 RL.TOKEN hot 10 5 1
path "RL.TOKEN random keys (100k)" 100000 RL.TOKEN 'tok:__rand_int__' 10 5 1
path "RL.SLIDE random keys (1k)" 1000 RL.SLIDE 'slide:__rand_int__' 10 60 req
path "RL.SLIDECOUNT random keys (100k)" 100000 RL.SLIDECOUNT 'count:__rand_int__' 100 60 1
