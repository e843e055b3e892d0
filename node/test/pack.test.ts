// Ready to publish: the `npm pack` tarball installed in a fresh app outside the repository (with ioredis
// from the registry, or npm's cache), running the README's quick start as written against a real
// module server, from ESM and from CommonJS. Needs the build (`npm run build`, as ../scripts/node.sh does).
// Packed from a copy of the package in a temporary directory (its own dist, node_modules linked): `npm
// pack` rebuilds dist (prepack), which must not rewrite node/dist while another test (readme.test.ts)
// imports it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync, rmSync, mkdtempSync, existsSync, cpSync, mkdirSync, symlinkSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT, Server } from "./servers.ts";

const NODE = join(ROOT, "node");

/** A copy of what `npm pack` builds and ships, under `dir`/node (no repository above it: the build
 * uses the package's copies of the contract and the library as they are), node_modules linked. */
function packageCopy(dir: string): string {
  const copy = join(dir, "node");
  mkdirSync(copy);
  for (const f of ["package.json", "README.md", "contract.json", "tsconfig.json", "tsconfig.cjs.json", "lua", "scripts", "src"]) {
    cpSync(join(NODE, f), join(copy, f), { recursive: true });
  }
  symlinkSync(join(NODE, "node_modules"), join(copy, "node_modules"), "dir");
  return copy;
}

test("the packed tarball in a fresh app outside the repository runs the quick start", { skip: !existsSync(join(NODE, "dist", "esm", "index.js")) && "not built" }, async () => {
  const app = mkdtempSync(join(tmpdir(), "rl-fresh-app-"));
  const source = mkdtempSync(join(tmpdir(), "rl-pack-"));
  const server = await Server.start({ module: true });
  try {
    const copy = packageCopy(source);
    const packed = JSON.parse(execFileSync("npm", ["pack", "--json", "--pack-destination", app], { cwd: copy }).toString())[0];
    const files: string[] = packed.files.map((f: { path: string }) => f.path);
    for (const f of ["contract.json", "lua/ratelimit.lua", "lua/scripts/rl_token.lua", "dist/esm/index.js", "dist/cjs/index.js", "dist/esm/index.d.ts", "README.md"]) {
      assert.ok(files.includes(f), `${f} ships`);
    }
    assert.ok(!files.some((f) => f.startsWith("test/") || f.startsWith("src/") || f.includes("node_modules")), "no sources, tests or node_modules");
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "fresh-app", private: true, type: "module" }));
    const npm = (args: string[]) => execFileSync("npm", [...args, "--no-audit", "--no-fund", "--loglevel=error", "--prefer-offline"], { cwd: app, stdio: ["ignore", "pipe", "inherit"] });
    npm(["install", join(app, packed.filename), "ioredis@5"]);
    const readme = readFileSync(join(NODE, "README.md"), "utf8");
    writeFileSync(join(app, "quickstart.mjs"), /## Quick start\n\n```js\n([\s\S]*?)```/.exec(readme)![1]!);
    const env = { ...process.env, REDIS_URL: `redis://127.0.0.1:${server.port}`, NODE_OPTIONS: "" };
    const lines = execFileSync("node", ["quickstart.mjs"], { cwd: app, env }).toString().trim().split("\n");
    assert.equal(lines.length, 11, lines.join("\n"));
    for (const l of lines.slice(0, 10)) assert.match(l, / allowed /);
    assert.match(lines[10]!, /^11 denied, retry in 1 s 0$/);
    writeFileSync(join(app, "cjs.cjs"), `const { Limiter, TokenBucket, LocalLimiter, RateLimiterModule } = require("redis-ratelimit");
const { Redis } = require("ioredis");
const redis = new Redis(process.env.REDIS_URL);
const limiter = new Limiter(redis, { failure: "fallback", instances: 2 });
limiter.verify().then(async (e) => {
  const d = await limiter.check("rl:{cjs}:a", new TokenBucket({ capacity: 2, perSecond: 1 }));
  console.log(e.engine, d.allowed, d.remaining, typeof LocalLimiter, typeof RateLimiterModule);
  redis.disconnect();
});
`);
    assert.equal(execFileSync("node", ["cjs.cjs"], { cwd: app, env }).toString().trim(), "module true 1 function function");
    console.log(`fresh app: ${packed.filename}, ${files.length} files, ${packed.size} bytes packed`);
  } finally {
    rmSync(app, { recursive: true, force: true });
    rmSync(source, { recursive: true, force: true });
    await server.close();
  }
});
