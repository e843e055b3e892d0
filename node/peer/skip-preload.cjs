// Preloaded (NODE_OPTIONS --require) while a peer's node:test suite runs: each test named in
// RL_PEER_EXCLUDED (a JSON list of { file, name, why }, from frl-excluded.mjs) for the file this
// process runs is registered skipped, its reason printed, instead of run. Its other tests run as
// they are.
"use strict";
const nt = require("node:test");
const here = process.argv[1] ?? "";
const excluded = JSON.parse(process.env.RL_PEER_EXCLUDED ?? "[]").filter((e) => here.endsWith(e.file));
if (excluded.length) {
  const test = nt.test;
  nt.test = function (name, ...rest) {
    const e = excluded.find((x) => x.name === name);
    if (!e) return test.call(this, name, ...rest);
    const fn = rest.pop();
    return test.call(this, name, { ...(rest[0] ?? {}), skip: `excluded: ${e.why}` }, fn);
  };
}
