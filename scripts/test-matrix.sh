#!/usr/bin/env bash
# make test-matrix: the module's integration suite (and the client's lease and HTTP tests) on every server of the matrix that can be had here, with one
# module binary. Servers that cannot be had are skipped with the reason; a failure on any server fails.
set -uo pipefail
cd "$(dirname "$0")/.."

servers=(${RL_MATRIX:-redis-7.0 valkey-8.0 redis-8.0 valkey-9.1})
passed=() failed=() skipped=()
for name in "${servers[@]}"; do
  if ! bin=$(scripts/servers.sh "$name"); then
    skipped+=("$name")
    continue
  fi
  echo "=== $name: $("$bin" --version | head -n 1)"
  # The module's whole suite, and the client's permits (leases, RL.ALL) and HTTP layer (concurrency
  # routes among them) on the same server.
  # (scripts/cargo-tests.sh: the binaries make test built, not a second build of them.)
  if RL_REDIS_SERVER="$bin" scripts/cargo-tests.sh redis-ratelimit &&
    RL_REDIS_SERVER="$bin" scripts/cargo-tests.sh redis-ratelimit-client leases http; then
    passed+=("$name")
  else
    failed+=("$name")
  fi
done
echo "=== server matrix: passed: ${passed[*]:-none}; failed: ${failed[*]:-none}; skipped: ${skipped[*]:-none}"
[ ${#failed[@]} -eq 0 ] && [ ${#passed[@]} -gt 0 ]
