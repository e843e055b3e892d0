// What the peer suites share (erl-suite.mjs, frl-suite.mjs, flexible-suite.mjs): a snapshot of a peer's
// repository (a git directory named by an environment variable; the suite is skipped with the reason
// when it is absent), a temporary directory its files are copied into at run time and its test tools
// installed in from npm, a module-enabled redis-server on a free loopback port, both removed and
// stopped when the process exits (even on failure), and the list of what is excluded.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createServer, connect } from "node:net";

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

/** Starts redis-server (REDIS_SERVER) with the module on a free loopback port; resolves with the port
 * once it accepts connections. Killed at exit. */
export async function startRedis(dir) {
  const port = await new Promise((ok) => { const s = createServer(); s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => ok(p)); }); });
  const server = spawn(process.env.REDIS_SERVER ?? "/usr/bin/redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--loadmodule", join(ROOT, "target/release/libredis_ratelimit.so")], { stdio: "ignore" });
  servers.push(server);
  for (let i = 0; ; i++) {
    const up = await new Promise((ok) => { const c = connect(port, "127.0.0.1", () => { c.destroy(); ok(true); }); c.on("error", () => ok(false)); });
    if (up) return port;
    if (i > 100 || server.exitCode !== null) throw new Error(`redis-server did not start on port ${port}`);
    await new Promise((r) => setTimeout(r, 50));
  }
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
