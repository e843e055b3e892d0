// The README's quick start, run as written (against a real module server), from the built package.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { ROOT, Server } from "./servers.ts";

test("README quick start", async () => {
  const readme = readFileSync(join(ROOT, "node", "README.md"), "utf8");
  const block = /## Quick start\n\n```js\n([\s\S]*?)```/.exec(readme)![1]!;
  const file = join(ROOT, "node", ".quickstart.mjs");
  const server = await Server.start({ module: true });
  try {
    execFileSync("node", [join(ROOT, "node", "scripts", "embed.mjs")]);
    writeFileSync(file, block);
    const out = execFileSync("node", ["--import", "tsx", file], {
      env: { ...process.env, REDIS_URL: `redis://127.0.0.1:${server.port}`, NODE_OPTIONS: "--conditions=development" },
      cwd: join(ROOT, "node"),
    }).toString();
    const lines = out.trim().split("\n");
    assert.equal(lines.length, 11);
    for (const l of lines.slice(0, 10)) assert.match(l, / allowed /);
    assert.match(lines[10]!, /^11 denied, retry in 1 s 0$/);
  } finally {
    rmSync(file, { force: true });
    await server.close();
  }
});
