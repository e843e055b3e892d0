// Stands in for express-rate-limit's MemoryStore while its own test suite runs (node/peer/erl-suite.mjs
// maps every import of memory-store to this file): each `new MemoryStore()` is this package's
// ExpressRateLimitStore on a real module server (RL_PEER_PORT), with a key prefix of its own.
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";
const require = createRequire(import.meta.url);
const { Limiter, ExpressRateLimitStore } = require(process.env.RL_NODE_DIST);
const { Redis } = require(process.env.RL_IOREDIS);

let redis;
let limiter;
export class MemoryStore extends ExpressRateLimitStore {
  constructor() {
    redis ??= new Redis(Number(process.env.RL_PEER_PORT), "127.0.0.1");
    limiter ??= new Limiter(redis, { failure: "closed", deadlineMs: 1000 });
    // A prefix of its own (jest may load this module afresh for each test file in one process).
    super({ limiter, prefix: `erl:${randomUUID()}:` });
  }
  // express-rate-limit's middleware always passes its options with a limit (5 by default); the
  // memory store's own tests call init({ windowMs }) alone, which MemoryStore can take (it keeps no
  // limit): a limit far above their counts is given then.
  init(options) {
    super.init({ ...options, limit: options.limit ?? options.max ?? 1_000_000 });
  }
  // RL_PEER_OFF_BY_ONE=1: a deliberately wrong store, one hit too many, to show the suite notices.
  async increment(key) {
    const r = await super.increment(key);
    return process.env.RL_PEER_OFF_BY_ONE === "1" ? { ...r, totalHits: r.totalHits + 1 } : r;
  }
  async resetAll() {
    const keys = await redis.keys(`${this.prefix}*`);
    if (keys.length) await redis.del(...keys);
  }
  shutdown() {}
}
export default MemoryStore;
