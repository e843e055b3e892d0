#!/usr/bin/env bash
# Hand-written lines per part of the repository at a revision (default: the work tree's HEAD), for the
# house's accounts (docs/architecture.md): every tracked text file, generated ones left out (those whose
# first or second line says GENERATED, and contract/), grouped by where they live.
#   scripts/lines.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD}
git ls-tree -r --name-only "$rev" | python3 -c '
import subprocess, sys, collections
rev = sys.argv[1]
parts = [
    ("core (algorithms, contract of each kind)", ("core/",)),
    ("module (src/)", ("src/",)),
    ("module tests (tests/)", ("tests/",)),
    ("contract generator", ("contract-gen/", "client/src/contract/")),
    ("Rust client", ("client/src/",)),
    ("Rust client tests", ("client/tests/", "client/examples/")),
    ("rate limit service (rls/)", ("rls/",)),
    ("Lua library (lua/src/)", ("lua/src/",)),
    ("Python package", ("python/src/",)),
    ("Python tests", ("python/tests/",)),
    ("Go tests", ()),
    ("Go package", ("go/",)),
    ("Node.js package", ("node/src/", "node/scripts/")),
    ("Node.js tests", ("node/test/",)),
    ("docs and READMEs", ("docs/", "README.md")),
    ("scripts, CI, bench, testkit", ("scripts/", ".ci/", "bench/", "testkit/", "Makefile")),
]
code = (".rs", ".py", ".go", ".ts", ".mts", ".mjs", ".lua", ".sh", ".md", "Makefile", "run")
totals = collections.Counter()
files = collections.Counter()
generated = collections.Counter()
for path in sys.stdin.read().split("\n"):
    if path.endswith((".lua", ".json")) and (path.startswith(("contract/", "lua/", "python/", "node/", "go/", "client/lua/"))):
        text = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True).stdout.decode("utf-8", "replace")
        if any("GENERATED" in line for line in text.split("\n", 2)[:2]):
            generated[path.split("/")[0]] += text.count("\n")
            continue
    if not path or path.startswith("contract/") or not path.endswith(code):
        continue
    if path.endswith(".md") and not (path.startswith("docs/") or path.endswith("README.md")):
        continue
    part = next((name for name, prefixes in parts if prefixes and path.startswith(prefixes)), None)
    if part == "Go package" and path.endswith("_test.go"):
        part = "Go tests"
    if part is None:
        continue
    text = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True).stdout.decode("utf-8", "replace")
    head = text.split("\n", 2)[:2]
    if any("GENERATED" in line for line in head) or "/node_modules/" in path or path.startswith("node/dist/"):
        continue
    totals[part] += text.count("\n")
    files[part] += 1
for name, _ in parts:
    if files[name]:
        print(f"{totals[name]:>7} lines {files[name]:>4} files  {name}")
print(f"{sum(totals.values()):>7} lines {sum(files.values()):>4} files  in all (hand-written)")
print(f"{sum(generated.values()):>7} lines generated and committed: " + ", ".join(f"{k}/ {v}" for k, v in sorted(generated.items())))
' "$rev"
