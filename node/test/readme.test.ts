// The README's examples, run as written (against a real module server), from the built package.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { ROOT, Server } from "./servers.ts";

/** The output lines of the README's js block under `heading`, run on a module server. */
async function run(heading: string): Promise<string[]> {
  const readme = readFileSync(join(ROOT, "node", "README.md"), "utf8");
  const block = new RegExp(`## ${heading}\\n\\n[\\s\\S]*?\`\`\`js\\n([\\s\\S]*?)\`\`\``).exec(readme)![1]!;
  const file = join(ROOT, "node", `.readme-${heading.replace(/\W/g, "")}.mjs`);
  const server = await Server.start({ module: true });
  try {
    execFileSync("node", [join(ROOT, "node", "scripts", "embed.mjs")]);
    writeFileSync(file, block);
    const out = execFileSync("node", ["--import", "tsx", file], {
      env: { ...process.env, REDIS_URL: `redis://127.0.0.1:${server.port}`, NODE_OPTIONS: "--conditions=development" },
      cwd: join(ROOT, "node"),
    }).toString();
    return out.trim().split("\n");
  } finally {
    rmSync(file, { force: true });
    await server.close();
  }
}

test("README quick start", async () => {
  const lines = await run("Quick start");
  assert.equal(lines.length, 11);
  for (const l of lines.slice(0, 10)) assert.match(l, / allowed /);
  assert.match(lines[10]!, /^11 denied, retry in 1 s 0$/);
});

test("README high volume", async () => {
  const [local, back] = await run("High volume");
  // Checks that waited for a batch taken ahead still in flight are not local: how many did depends on
  // timing; the tokens given back do not.
  const n = Number(/^(\d+) of 100 decided here$/.exec(local!)?.[1]);
  assert.ok(n >= 75 && n <= 98, local);
  assert.equal(back, "13 tokens given back");
});

test("README token budgets", async () => {
  assert.deepEqual(await run("Token budgets"), ["98788 tokens left this minute"]);
});
