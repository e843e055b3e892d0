#!/usr/bin/env bash
# scripts/cargo-tests.sh PACKAGE [TEST...] [-- ARGS]: PACKAGE's unit tests and integration tests (or only
# the integration tests named; PACKAGE --workspace: every package's), run from the binaries
# `cargo test --release --workspace` builds (built here when they are not), each in its package's
# directory as cargo runs it; ARGS go to every binary. (Doc tests: `cargo test --release --workspace --doc`.)
# What runs the suites again with another server or engine (make test-matrix, the Lua engine in .ci/run,
# the module's container) uses this instead of `cargo test -p PACKAGE`: `-p` resolves a narrower feature
# set than the workspace's, and so builds the client, serde, hyper and tower a second time (three minutes
# on two cores) for the same tests. Every binary runs; the exit status is 1 when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/cargo-tests.sh PACKAGE [TEST...] [-- ARGS]" >&2; exit 2; }
package=$1
shift
tests=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do tests+=("$1"); shift; done
[ "${1:-}" = -- ] && shift

# One line per binary: the package's directory, the package, the target's name, the executable.
list=$(cargo test --release --workspace --no-run --message-format=json | python3 -c '
import json, os, sys
package, wanted = sys.argv[1], set(sys.argv[2:])
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    # path+file:///dir#name@version, or path+file:///dir/name#version when the directory is the name
    source, _, tail = m["package_id"].partition("#")
    name = tail.split("@")[0] if "@" in tail else source.rstrip("/").rsplit("/", 1)[-1]
    kind = m["target"]["kind"]
    if package not in (name, "--workspace") or (wanted and (kind != ["test"] or m["target"]["name"] not in wanted)):
        continue
    print(os.path.dirname(m["manifest_path"]), name, m["target"]["name"], m["executable"], sep="\t")
' "$package" "${tests[@]}") || { echo "cargo-tests.sh: the workspace's tests did not build" >&2; exit 1; }
[ -n "$list" ] || { echo "cargo-tests.sh: no test binary of $package ${tests[*]}" >&2; exit 1; }

# The binaries run RL_TEST_JOBS at a time (default 3: they wait on servers, failovers and clocks far more
# than they compute, as `cargo test` runs one binary's tests in threads); each one's output is printed
# whole when it ends.
jobs=${RL_TEST_JOBS:-3}
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$out"' EXIT
names=() printed=() failed=()
flush() {
  local i
  for i in "${!names[@]}"; do
    [ -f "$out/$i.rc" ] && [ -z "${printed[$i]:-}" ] || continue
    printed[$i]=1
    cat "$out/$i.log"
    [ "$(cat "$out/$i.rc")" = 0 ] || failed+=("${names[$i]}")
  done
}
i=0
while IFS=$'\t' read -r dir crate name exe; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; flush; done
  names[$i]="$crate: $name"
  (
    (
      echo "     Running $crate: $name ($exe)"
      cd "$dir" && CARGO_MANIFEST_DIR=$dir CARGO_PKG_NAME=$crate "$exe" "$@"
    ) </dev/null >"$out/$i.log" 2>&1
    echo $? >"$out/$i.rc"
  ) &
  i=$((i + 1))
done <<<"$list"
wait
flush
if [ ${#failed[@]} -gt 0 ]; then
  echo "cargo-tests.sh: failed: ${failed[*]}" >&2
  exit 1
fi
