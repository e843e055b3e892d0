#!/bin/sh
# Writes the EVALSHA form of lua/ratelimit.lua: one script per function (rl_token.lua, ...) in the
# directory given (default lua/scripts), for Redis 6.2 and ACLs without FUNCTION. The functions and the
# rule that turns the library's one source into their scripts are contract/contract.json's ("library":
# the prologue, the source without its first lines and its registration, the epilogue naming the
# function), the rule every client applies; nothing of the algorithms is written here.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-"$root/lua/scripts"}
mkdir -p "$out"
python3 - "$root" "$out" <<'PY'
import json, sys
root, out = sys.argv[1], sys.argv[2]
library = json.load(open(f"{root}/contract/contract.json"))["library"]
rule = library["evalsha"]
source = open(f"{root}/{library['source']}", encoding="utf-8").read().split("\n")
body = []
for line in source[rule["drop_first_lines"]:]:
    if line.startswith(rule["stop_at_line_starting"]):
        break
    body.append(line)
for function in library["functions"]:
    script = rule["prologue"] + "\n".join(body) + rule["epilogue"].replace("{function}", function["name"])
    with open(f"{out}/{function['name']}.lua", "w", encoding="utf-8") as f:
        f.write(script)
PY
echo "$out"
