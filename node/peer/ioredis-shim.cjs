// `ioredis` while a peer's own tests run (peer-run.mjs writes it into their node_modules): this
// package's ioredis, with every client sent to the suite's redis-server (RL_PEER_PORT on 127.0.0.1)
// whatever host and port the test names (their tests assume a Redis on 6379).
"use strict";
const Real = require(process.env.RL_IOREDIS);
const Base = Real.Redis ?? Real.default ?? Real;
const port = Number(process.env.RL_PEER_PORT);

class Redis extends Base {
  constructor(...args) {
    const options = args.find((a) => a && typeof a === "object") ?? {};
    super({ ...options, host: "127.0.0.1", port });
  }
}
// `default` and the others are getters inherited from ioredis' class: defined, not assigned.
for (const [name, value] of [["default", Redis], ["Redis", Redis], ["Cluster", Real.Cluster]]) Object.defineProperty(Redis, name, { value });
module.exports = Redis;
