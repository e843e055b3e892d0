#!/usr/bin/env bash
# make test-gcra-harness: Redis core's own tests of its GCRA command (tests/unit/gcra.tcl at c3db5254b),
# run by Redis' test harness against a server that loads this module, whose GCRA reimplements core's.
# The harness is a Redis tree built at a clone's HEAD, where GCRA is compiled out, so the command is the
# module's (scripts/peers.sh harness, or RL_PEER_HARNESS=<that tree>). Without it (CI machines have no
# Redis clone) this exits 0 with "skipped: ...". Extra arguments go to ./runtest (e.g. --verbose).
# Fails when any test that is not left out below fails, or when the unit did not run all its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
module=$root/target/release/libredis_ratelimit.so # absolute: the test servers chdir() to their dir

# Exactly the tests that only the built-in can pass, each with the reason.
skip=(
  # needs TYPE gcra, the built-in's data type (our keys are strings; a module type is named in 9 chars)
  "GCRASETVALUE - basic functionality"
  # asserts TYPE gcra after DEBUG RELOAD (our keys are strings; the DUMP comparison alone would pass)
  "GCRA - RDB save and reload preserves value"
  # asserts TYPE gcra on the RESTOREd key (our keys are strings)
  "GCRA - DUMP and RESTORE roundtrip"
  # asserts TYPE gcra after BGREWRITEAOF and DEBUG RELOAD (our keys are strings)
  "GCRA - AOF rewrite preserves value"
  # expects cmdstat_gcrasetvalue on the replica: GCRASETVALUE is core's internal replication command,
  # which the module does not have (it replicates effects with SET ... PXAT)
  "GCRA - Replication works"
)

if [ -n "${RL_PEER_HARNESS:-}" ]; then
  harness=$RL_PEER_HARNESS
  [ -x "$harness/runtest" ] && [ -x "$harness/src/redis-server" ] ||
    { echo "RL_PEER_HARNESS=$harness has no runtest and src/redis-server" >&2; exit 1; }
else
  err=$(mktemp "${TMPDIR:-/tmp}/gcra-harness.XXXXXX")
  if ! harness=$(scripts/peers.sh harness 2>"$err"); then
    reason=$(tail -n 1 "$err")
    rm -f "$err"
    echo "skipped: Redis' test harness is not available here (${reason:-scripts/peers.sh harness failed})."
    echo "  It needs a Redis clone holding c3db5254b: RL_PEER_REDIS_GIT=<its git dir> scripts/peers.sh harness"
    exit 0
  fi
  rm -f "$err"
fi

unit=$harness/tests/unit/gcra.tcl
# A tree with GCRA built in would answer with core's command (the module leaves the name alone): a false pass.
if grep -q 'MAKE_CMD("gcra"' "$harness/src/commands.def"; then
  echo "$harness has core's GCRA built in: the tests would not reach the module" >&2
  exit 1
fi
# HEAD's gcra.tcl wraps every block in `if 0 {...}`, which runs nothing and "passes".
if grep -qE '^[[:space:]]*if 0' "$unit"; then
  echo "$unit is HEAD's disabled copy: restore it with git show c3db5254b:tests/unit/gcra.tcl" >&2
  exit 1
fi
expected=$(grep -cE '^[[:space:]]*test \{' "$unit")

[ -f "$module" ] || { echo "no module at $module: run make build" >&2; exit 1; }
# runtest wants a versioned tclsh (8.5 or newer); Debian's `tcl` package provides one.
command -v tclsh8.6 >/dev/null 2>&1 || command -v tclsh8.5 >/dev/null 2>&1 ||
  command -v tclsh8.7 >/dev/null 2>&1 || command -v tclsh9.0 >/dev/null 2>&1 || scripts/ensure-deps.sh tcl

args=(--single unit/gcra --clients 1 --config loadmodule "$module")
for name in "${skip[@]}"; do args+=(--skiptest "$name"); done

log=$(mktemp "${TMPDIR:-/tmp}/gcra-harness.XXXXXX")
trap 'rm -f "$log"' EXIT
echo "=== core's tests/unit/gcra.tcl on $("$harness/src/redis-server" --version | head -n 1)"
echo "=== with --config loadmodule $module, ${#skip[@]} tests left out (they need the built-in)"
status=0
(cd "$harness" && ./runtest "${args[@]}" "$@") 2>&1 | tee "$log" || status=$?

plain=$(sed 's/\x1b\[[0-9;]*m//g' "$log")
count() { grep -c "^\[$1\]: " <<<"$plain" || true; }
passed=$(count ok) failed=$(count err) skipped=$(count skip)
echo "=== core's gcra.tcl: $passed passed, $failed failed, $skipped skipped (of $expected tests in the unit)"
if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ]; then
  echo "=== FAILED (harness exit status $status)" >&2
  exit 1
fi
if [ "$skipped" -ne "${#skip[@]}" ] || [ $((passed + skipped)) -ne "$expected" ]; then
  echo "=== FAILED: expected $((expected - ${#skip[@]})) passed and ${#skip[@]} skipped" >&2
  exit 1
fi
