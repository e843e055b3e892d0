// What the peer suites share (erl-suite.mjs, frl-suite.mjs, flexible-suite.mjs): a snapshot of a peer's
// repository (a git directory named by an environment variable; the suite is skipped with the reason
// when it is absent), a temporary directory its files are copied into at run time and its test tools
// installed in from npm, a module-enabled redis-server on a free loopback port (started as the tests
// start theirs: test/redis-start.mjs), both removed and stopped when the process exits (even on
// failure), and the list of what is excluded.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { onFreePort, spawnReady } from "../test/redis-start.mjs";

export const HERE = dirname(fileURLToPath(import.meta.url));
export const NODE = resolve(HERE, "..");
export const ROOT = resolve(NODE, "..");

const servers = [];
let work;
process.on("exit", () => {
  for (const s of servers) try { s.kill("SIGKILL"); } catch {}
  if (work && !process.env.RL_KEEP) rmSync(work, { recursive: true, force: true });
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(130));

/** The snapshot in `process.env[envVar]` (default `fallback`), or exits 0 saying why it is skipped.
 * Returns `git(...args)` on it and the commit. */
export function snapshot(peer, envVar, fallback) {
  const repo = process.env[envVar] ?? fallback;
  if (!existsSync(repo)) {
    console.log(`SKIP ${peer}'s suite: no snapshot of its repository at ${repo} (set ${envVar} to a clone's git directory)`);
    process.exit(0);
  }
  const gitDir = existsSync(join(repo, "HEAD")) ? repo : join(repo, ".git");
  const git = (...args) => execFileSync("git", ["--git-dir", gitDir, ...args], { maxBuffer: 1 << 28 });
  return { git, commit: git("rev-parse", "HEAD").toString().trim() };
}

/** A temporary directory holding `paths` of the snapshot at HEAD (removed at exit unless RL_KEEP). */
export function workDir(name, snap, paths) {
  work = mkdtempSync(join(tmpdir(), `rl-${name}-suite-`));
  execFileSync("tar", ["-x", "-C", work], { input: snap.git("archive", "HEAD", ...paths), maxBuffer: 1 << 28 });
  return work;
}

/** Writes `text` at `rel` in `dir`: one of the peer's modules, replaced by a stand-in. */
export function standIn(dir, rel, text) {
  mkdirSync(dirname(join(dir, rel)), { recursive: true });
  writeFileSync(join(dir, rel), text);
}

/** `ioredis` for the peer's tests: this package's ioredis, each client sent to the test server
 * (peer/ioredis-shim.cjs) whatever host and port the test names. */
export function ioredisStandIn(dir) {
  standIn(dir, "node_modules/ioredis/package.json", JSON.stringify({ name: "ioredis", main: "index.js" }));
  standIn(dir, "node_modules/ioredis/index.js", `module.exports = require(${JSON.stringify(join(HERE, "ioredis-shim.cjs"))});\n`);
}

export function npmInstall(dir, deps) {
  execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", ...deps], { cwd: dir, stdio: "inherit" });
}

/** Starts redis-server (REDIS_SERVER) with the module on a free loopback port, by testkit's rule (the
 * tests' own start, test/redis-start.mjs): ready when INFO shows the process_id of the server spawned
 * here (never another process that took the port) and loading:0, and started again on another port
 * when the port was taken before it bound it. Resolves with the port; its directory and log are
 * `<dir>/.redis` (`server-<port>.log`). `port`: the first attempt's (default: a free one). Killed at exit. */
export async function startRedis(dir, { port } = {}) {
  const module = join(ROOT, "target/release/libredis_ratelimit.so");
  const own = join(dir, ".redis");
  mkdirSync(own, { recursive: true });
  return onFreePort(async (p) => {
    const args = ["--port", String(p), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", own, "--loadmodule", module];
    await spawnReady(process.env.REDIS_SERVER ?? "/usr/bin/redis-server", args, p, join(own, `server-${p}.log`), { spawned: (s) => servers.push(s) });
    return p;
  }, { port });
}

/** The environment the stand-ins read: the test server's port, this package's build and ioredis. */
export const standInEnv = (port) => ({ ...process.env, RL_PEER_PORT: String(port), RL_NODE_DIST: join(NODE, "dist/cjs/index.js"), RL_IOREDIS: join(NODE, "node_modules/ioredis") });

/** A regular expression matching any of `names` literally. */
export const anyOf = (names) => names.map((n) => n.replace(/[.*+?^${}()|[\]\\`]/g, "\\$&")).join("|");

/** Runs a command to its end: its exit code. */
export async function run(cmd, args, options) {
  const child = spawn(cmd, args, { stdio: "inherit", ...options });
  return await new Promise((ok) => child.once("exit", (code) => ok(code ?? 1)));
}

export function listExcluded(file, entries) {
  console.log(`excluded (node/peer/${file}):\n${entries.map((e) => `  ${e.name}: ${e.why}`).join("\n")}`);
}
