// rate-limiter-flexible's own tests of RateLimiterRedis (test/RateLimiterRedis.ioredis.test.js and
// test/RateLimiterRedis.redis.test.js, from its repository) against this package's RateLimiterModule:
// lib/RateLimiterRedis.js is replaced by flexible-shim.cjs, and the clients the tests make (ioredis,
// node-redis) are sent to a real module server this script starts. Its other test files test its own
// classes (the abstract classes through in-memory test doubles, the memory, cluster, database
// limiters, its wrappers on RateLimiterMemory): see node/README.md, Adapters. Nothing of theirs is in
// this repository: lib/ and test/ are copied at run time from a snapshot of their repository
// (RL_FLEXIBLE_REPO, a git directory; skipped with the reason when absent) into a temporary directory
// with mocha, chai, sinon and node-redis installed there from npm. `scripts/node.sh peer-suites` runs
// it; RL_PEER_OFF_BY_ONE=1 runs it on a limiter that takes one point too many.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { EXCLUDED, FILES } from "./flexible-excluded.mjs";
import { HERE, snapshot, workDir, standIn, ioredisStandIn, npmInstall, startRedis, standInEnv, anyOf, run, listExcluded } from "./peer-run.mjs";

const snap = snapshot("rate-limiter-flexible", "RL_FLEXIBLE_REPO", "/work/.mirror/animir+node-rate-limiter-flexible/repo");
const dir = workDir("flexible", snap, ["lib", "test", "package.json"]);
const theirs = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
const tools = ["mocha", "chai", "sinon", "redis"];
writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "flexible-suite", private: true, type: "commonjs" }));
console.log(`rate-limiter-flexible ${theirs.version} (${snap.commit.slice(0, 12)}): installing its test tools (${tools.length})`);
npmInstall(dir, tools.map((t) => `${t}@${theirs.devDependencies[t]}`));
ioredisStandIn(dir);
standIn(dir, "lib/RateLimiterRedis.js", `module.exports = require(${JSON.stringify(join(HERE, "flexible-shim.cjs"))});\n`);

const port = await startRedis(dir);
// node-redis' options in their tests (a Redis on 6379): the suite's server.
standIn(dir, "test/RedisOptions.js", `module.exports = { socket: { host: "127.0.0.1", port: ${port} } };\n`);
const skip = anyOf(EXCLUDED.map((e) => e.name));
const args = [join(dir, "node_modules/mocha/bin/mocha.js"), "--exit", ...(skip ? ["--grep", skip, "--invert"] : []), ...process.argv.slice(2), ...FILES.map((f) => join("test", f))];
const code = await run(process.execPath, args, { cwd: dir, env: standInEnv(port) });
listExcluded("flexible-excluded.mjs", EXCLUDED);
process.exit(code);
