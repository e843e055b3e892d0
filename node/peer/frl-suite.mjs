// @fastify/rate-limit's own test suite (test/, from its repository) against this package's
// fastifyRateLimitStore: its two stores, store/LocalStore.js (the default) and store/RedisStore.js
// (`redis:` given), are replaced by frl-shim.cjs, so every test runs its plugin on RL.FIXED in a real
// module server this script starts; `ioredis` sends the clients its Redis tests make to that server.
// Nothing of theirs is in this repository: index.js and test/ are copied at run time from a snapshot
// of their repository (RL_FASTIFY_RL_REPO, a git directory; skipped with the reason when absent) into
// a temporary directory with fastify and the plugin's dependencies installed there from npm.
// The tests excluded are skipped with their reasons (frl-excluded.mjs). `scripts/node.sh peer-suites`
// runs it; RL_PEER_OFF_BY_ONE=1 runs it on a store one request off.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { EXCLUDED } from "./frl-excluded.mjs";
import { HERE, snapshot, workDir, standIn, ioredisStandIn, npmInstall, startRedis, standInEnv, run, listExcluded } from "./peer-run.mjs";

const snap = snapshot("@fastify/rate-limit", "RL_FASTIFY_RL_REPO", "/work/.mirror/fastify+fastify-rate-limit/repo");
const dir = workDir("frl", snap, ["index.js", "test", "package.json"]);
const theirs = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
const deps = [...Object.entries(theirs.dependencies).map(([n, v]) => `${n}@${v}`), `fastify@${theirs.devDependencies.fastify}`];
writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "frl-suite", private: true, type: "commonjs" }));
console.log(`@fastify/rate-limit ${theirs.version} (${snap.commit.slice(0, 12)}): installing fastify and its dependencies (${deps.length})`);
npmInstall(dir, deps);
ioredisStandIn(dir);
const shim = JSON.stringify(join(HERE, "frl-shim.cjs"));
standIn(dir, "store/LocalStore.js", `module.exports = require(${shim}).LocalStore;\n`);
standIn(dir, "store/RedisStore.js", `module.exports = require(${shim}).RedisStore;\n`);

const port = await startRedis(dir);
// Each excluded test is registered skipped with its reason (skip-preload.cjs), by file and name.
const files = snap.git("ls-tree", "-r", "--name-only", "HEAD", "test").toString().split("\n").filter((f) => f.endsWith(".test.js"));
const env = { ...standInEnv(port), RL_PEER_EXCLUDED: JSON.stringify(EXCLUDED), NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} --require ${join(HERE, "skip-preload.cjs")}` };
const code = await run(process.execPath, ["--test", "--test-timeout=120000", ...process.argv.slice(2), ...files], { cwd: dir, env });
listExcluded("frl-excluded.mjs", EXCLUDED.map((e) => ({ name: `${e.file}: ${e.name}`, why: e.why })));
process.exit(code);
