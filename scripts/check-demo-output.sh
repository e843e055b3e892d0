#!/usr/bin/env bash
# Holds the demo output that README.md shows (the block between `<!-- demo-output` and
# `<!-- /demo-output -->`) to what the demo prints: runs the demo binary that `make demo` built
# (target/release/examples/demo), masks in both what varies from run to run or machine to machine, and
# fails on any other difference, showing the diff. Run after `make demo` (.ci/run does).
#
# Masked, nothing else: the server's version and port (first line), the times the admin endpoint
# reports (denied_for_ms, reset_after_ms, retry_after_ms: they depend on how long the requests before
# took), how long an outage decision took (`in N ms`) and how long the 100 requests behind the open
# breaker took (`answered in N ms in all`). And the order of the `GET /admin/metrics` lines, which is the
# order the Prometheus exporter lists its series in and changes from run to run: they are compared sorted.
set -euo pipefail
cd "$(dirname "$0")/.."
page=${1:-README.md}
target=${CARGO_TARGET_DIR:-$PWD/target}
demo=$target/release/examples/demo
[ -x "$demo" ] || { echo "missing $demo: run make demo" >&2; exit 1; }
export RL_MODULE=${RL_MODULE:-$target/release/libredis_ratelimit.so}

mask() {
  python3 <(cat <<'PY'
import re, sys
rules = [  # (which line, what in it, replaced by)
    (r"^redis-server ", r"^redis-server \S+ on 127\.0\.0\.1:\d+ ", "redis-server <version> on 127.0.0.1:<port> "),
    (r"^GET /admin/ratelimit/", r'"(denied_for_ms|reset_after_ms|retry_after_ms)":\d+', r'"\1":<ms>'),
    (r"^redis (stopped|hung) ", r" in \d+ ms ", " in <ms> ms "),
    (r"^breaker open after ", r" answered in [\d.]+ ms in all", " answered in <ms> ms in all"),
]
out, metrics = [], []
for line in sys.stdin.read().splitlines() + [None]:
    if line is not None and line.startswith("GET /admin/metrics -> "):
        metrics.append(line)
        continue
    out += sorted(metrics)
    metrics = []
    if line is None:
        break
    for which, what, by in rules:
        if re.search(which, line):
            line = re.sub(what, by, line)
    out.append(line)
print("\n".join(out))
PY
  )
}

shown=$(awk '/^<!-- demo-output/{on=1; next} /^<!-- \/demo-output -->/{on=0} on && !/^```/' "$page")
[ -n "$shown" ] || { echo "$page has no <!-- demo-output --> block" >&2; exit 1; }
printed=$("$demo")

if diff -u --label "$page (shown, masked)" --label "the demo (printed, masked)" \
  <(mask <<<"$shown") <(mask <<<"$printed"); then
  echo "the demo output shown in $page is what the demo prints"
else
  echo "the demo output shown in $page differs from what the demo prints (above); paste the demo's output:" >&2
  echo "$printed" >&2
  exit 1
fi
