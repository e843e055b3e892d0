#!/usr/bin/env bash
# Holds README.md's redis-cli example (the block between `<!-- cli-example` and `<!-- /cli-example -->`)
# to a real server: starts a throwaway module-enabled redis-server on a free loopback port, sends the
# block's commands (the lines after the `host:port>` prompt) with redis-cli, and compares each reply
# line with the block's. Every line must be equal, except the two time fields (`4)` retry_after_ms and
# `5)` reset_after_ms), which may differ by the milliseconds that pass between the commands (at most
# 200: one redis-cli process per command, on a loaded machine).
set -euo pipefail
cd "$(dirname "$0")/.."
page=${1:-README.md}
target=${CARGO_TARGET_DIR:-$PWD/target}
module=${RL_MODULE:-$target/release/libredis_ratelimit.so}
[ -f "$module" ] || { echo "missing $module: run make build" >&2; exit 1; }

shown=$(awk '/^<!-- cli-example/{on=1; next} /^<!-- \/cli-example -->/{on=0} on && !/^```/' "$page")
[ -n "$shown" ] || { echo "$page has no <!-- cli-example --> block" >&2; exit 1; }

# shellcheck source=scripts/module-server.sh
. scripts/module-server.sh
start_server "$module"

# The block again, with each command's reply as this server gives it.
printed=$(while IFS= read -r line; do
  if [[ $line =~ ^[0-9.]+:[0-9]+\>\ (.*)$ ]]; then
    echo "$line"
    # shellcheck disable=SC2086 # the command's words, as redis-cli's prompt would split them
    redis-cli --no-raw -p "$port" ${BASH_REMATCH[1]}
  fi
done <<<"$shown")

python3 - "$page" "$shown" "$printed" <<'PY'
import re, sys
page, shown, printed = sys.argv[1], sys.argv[2].splitlines(), sys.argv[3].splitlines()
def same(a, b):
    time = re.fullmatch(r"([45]\) \(integer\) )(-?\d+)", a), re.fullmatch(r"([45]\) \(integer\) )(-?\d+)", b)
    if time[0] and time[1]:
        return time[0].group(1) == time[1].group(1) and abs(int(time[0].group(2)) - int(time[1].group(2))) <= 200
    return a == b
bad = [(i + 1, a, b) for i, (a, b) in enumerate(zip(shown, printed)) if not same(a, b)]
if len(shown) != len(printed):
    bad.append((min(len(shown), len(printed)) + 1, f"{len(shown)} lines", f"{len(printed)} lines"))
for n, a, b in bad:
    print(f"line {n}: {page} shows {a!r}, the server replies {b!r}")
if bad:
    print(f"the redis-cli example of {page} differs from a real server's replies:\n" + "\n".join(printed))
    sys.exit(1)
print(f"the redis-cli example of {page} is what a real server replies")
PY
