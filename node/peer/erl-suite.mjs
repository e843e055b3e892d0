// express-rate-limit's own test suite (test/library, from its repository) against this package's
// ExpressRateLimitStore: every import of its MemoryStore is mapped to erl-shim.js, so each test that
// uses the default store or `new MemoryStore()` runs on RL.FIXED in a real module server. Nothing of
// theirs is in this repository: the suite is copied at run time from a snapshot of their repository
// (RL_ERL_REPO, a git directory; skipped with the reason when absent) into a temporary directory
// with its test tools installed there from npm. `scripts/node.sh peer-suites` runs it.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { EXCLUDED, EXCLUDED_FILES } from "./erl-excluded.mjs";
import { HERE, snapshot, workDir, npmInstall, startRedis, standInEnv, anyOf, run, listExcluded } from "./peer-run.mjs";

const snap = snapshot("express-rate-limit", "RL_ERL_REPO", "/work/.mirror/express-rate-limit+express-rate-limit/repo");
const commit = snap.commit;
const dir = workDir("erl", snap, ["source", "test/library", "package.json", "jest.config.json"]);
const theirs = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
const dev = theirs.devDependencies;
const tools = ["jest", "ts-jest", "@jest/globals", "@types/jest", "supertest", "@types/supertest", "express", "@types/express", "ratelimit-header-parser", "typescript", "@types/node"];
const deps = [...Object.entries(theirs.dependencies).map(([n, v]) => `${n}@${v}`), ...tools.map((t) => `${t}@${dev[t]}`)];
writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "erl-suite", private: true, type: "module" }));
console.log(`express-rate-limit ${theirs.version} (${commit.slice(0, 12)}): installing its test tools (${tools.length})`);
npmInstall(dir, deps);
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

const port = await startRedis(dir);
const skip = anyOf(EXCLUDED.map((e) => e.name));
const args = ["--experimental-vm-modules", join(dir, "node_modules/jest/bin/jest.js"), "--config", join(dir, "jest.config.json"), "--rootDir", dir, "--forceExit", "--testPathIgnorePatterns", ...EXCLUDED_FILES.map((f) => f.name), ...(skip ? ["--testNamePattern", `^(?!.*(${skip})).*$`] : []), ...process.argv.slice(2)];
const code = await run(process.execPath, args, { cwd: dir, env: standInEnv(port) });
listExcluded("erl-excluded.mjs", [...EXCLUDED, ...EXCLUDED_FILES]);
process.exit(code);
