// express-rate-limit's own test suite (test/library, from its repository) against this package's
// ExpressRateLimitStore: every import of its MemoryStore is mapped to erl-shim.js, so each test that
// uses the default store or `new MemoryStore()` runs on RL.FIXED in a real module server. Nothing of
// theirs is in this repository: the suite is copied at run time from a snapshot of their repository
// (RL_ERL_REPO, a git directory; skipped with the reason when absent) into a temporary directory
// with its test tools installed there from npm. `scripts/node.sh peer-suites` runs it.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, writeFileSync, rmSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createServer } from "node:net";
import { EXCLUDED, EXCLUDED_FILES } from "./erl-excluded.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const NODE = resolve(HERE, "..");
const ROOT = resolve(NODE, "..");
const REPO = process.env.RL_ERL_REPO ?? "/work/.mirror/express-rate-limit+express-rate-limit/repo";
if (!existsSync(REPO)) {
  console.log(`SKIP express-rate-limit's suite: no snapshot of its repository at ${REPO} (set RL_ERL_REPO to a clone's git directory)`);
  process.exit(0);
}
const dir = mkdtempSync(join(tmpdir(), "rl-erl-suite-"));
let server;
process.on("exit", () => {
  try { server?.kill("SIGKILL"); } catch {}
  if (!process.env.RL_KEEP) rmSync(dir, { recursive: true, force: true });
});
const git = (...args) => execFileSync("git", ["--git-dir", existsSync(join(REPO, "HEAD")) ? REPO : join(REPO, ".git"), ...args]);
const commit = git("rev-parse", "HEAD").toString().trim();
execFileSync("tar", ["-x", "-C", dir], { input: git("archive", "HEAD", "source", "test/library", "package.json", "jest.config.json") });
const theirs = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
const dev = theirs.devDependencies;
const tools = ["jest", "ts-jest", "@jest/globals", "@types/jest", "supertest", "@types/supertest", "express", "@types/express", "ratelimit-header-parser", "typescript", "@types/node"];
const deps = [...Object.entries(theirs.dependencies).map(([n, v]) => `${n}@${v}`), ...tools.map((t) => `${t}@${dev[t]}`)];
writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "erl-suite", private: true, type: "module" }));
console.log(`express-rate-limit ${theirs.version} (${commit.slice(0, 12)}): installing its test tools (${tools.length})`);
execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", ...deps], { cwd: dir, stdio: "inherit" });
writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions: { target: "ES2022", module: "ESNext", moduleResolution: "Bundler", strict: false, esModuleInterop: true, skipLibCheck: true, isolatedModules: true, types: ["node", "jest"] } }));
const config = JSON.parse(readFileSync(join(dir, "jest.config.json"), "utf8"));
config.collectCoverage = false;
config.transform = { "^.+\\.tsx?$": ["ts-jest", { useESM: true, diagnostics: false, tsconfig: join(dir, "tsconfig.json") }] };
config.moduleNameMapper = { "^(\\.{1,2}/(.*/)?)?memory-store(\\.js)?$": join(HERE, "erl-shim.js"), ...config.moduleNameMapper };
// The store is in Redis, which jest's fake clock does not move: the timers Node's and ioredis' I/O
// need stay real (tests that advance the fake clock to pass a window are excluded, see erl-excluded.mjs).
config.fakeTimers = { doNotFake: ["nextTick", "setImmediate", "clearImmediate", "queueMicrotask", "setTimeout", "clearTimeout", "setInterval", "clearInterval"] };
delete config.preset;
config.extensionsToTreatAsEsm = [".ts"];
writeFileSync(join(dir, "jest.config.json"), JSON.stringify(config));

const port = await new Promise((ok) => { const s = createServer(); s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => ok(p)); }); });
server = spawn(process.env.REDIS_SERVER ?? "/usr/bin/redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--loadmodule", join(ROOT, "target/release/libredis_ratelimit.so")], { stdio: "ignore" });
await new Promise((r) => setTimeout(r, 300));
const skip = EXCLUDED.map((e) => e.name.replace(/[.*+?^${}()|[\]\\`]/g, "\\$&")).join("|");
const args = ["--experimental-vm-modules", join(dir, "node_modules/jest/bin/jest.js"), "--config", join(dir, "jest.config.json"), "--rootDir", dir, "--forceExit", "--testPathIgnorePatterns", ...EXCLUDED_FILES.map((f) => f.name), ...(skip ? ["--testNamePattern", `^(?!.*(${skip})).*$`] : []), ...process.argv.slice(2)];
const env = { ...process.env, RL_ERL_PORT: String(port), RL_NODE_DIST: join(NODE, "dist/cjs/index.js"), RL_IOREDIS: join(NODE, "node_modules/ioredis") };
const jest = spawn(process.execPath, args, { cwd: dir, env, stdio: "inherit" });
const code = await new Promise((ok) => jest.once("exit", ok));
console.log(`excluded (node/peer/erl-excluded.mjs):\n${[...EXCLUDED, ...EXCLUDED_FILES].map((e) => `  ${e.name}: ${e.why}`).join("\n")}`);
process.exit(code ?? 1);
