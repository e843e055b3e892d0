// Stands in for rate-limiter-flexible's RateLimiterRedis while its own tests of it run
// (flexible-suite.mjs writes lib/RateLimiterRedis.js requiring this file): each `new
// RateLimiterRedis({ storeClient, points, duration, blockDuration, keyPrefix })` is this package's
// RateLimiterModule on a Limiter over the client the test passes (ioredis or node-redis, sent to the
// suite's module server). Options RateLimiterModule does not offer are ignored here (the tests that
// rely on them are excluded, flexible-excluded.mjs).
"use strict";
const { Limiter, RateLimiterModule } = require(process.env.RL_NODE_DIST);

const limiters = new WeakMap();
const limiterOn = (client) => {
  let l = limiters.get(client);
  if (!l) limiters.set(client, (l = new Limiter(client, { failure: "closed", deadlineMs: 1000 })));
  return l;
};

class RateLimiterRedis extends RateLimiterModule {
  constructor(opts = {}) {
    const { storeClient, points, duration, blockDuration, keyPrefix } = opts;
    super({ limiter: limiterOn(storeClient), points, duration, blockDuration, keyPrefix });
  }
  // RL_PEER_OFF_BY_ONE=1: a deliberately wrong limiter, one point too many per consume.
  consume(key, points = 1) {
    return super.consume(key, process.env.RL_PEER_OFF_BY_ONE === "1" ? points + 1 : points);
  }
}
module.exports = RateLimiterRedis;
module.exports.default = RateLimiterRedis;
