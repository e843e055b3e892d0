// Stands in for @fastify/rate-limit's two stores while its own test suite runs (frl-suite.mjs writes
// store/LocalStore.js and store/RedisStore.js requiring this file): each is this package's
// fastifyRateLimitStore. LocalStore, the default store, runs on a module server of the suite's
// (RL_PEER_PORT) with a key prefix of its own; RedisStore on the ioredis client the test passes (sent
// to that server by ioredis-shim.cjs), in its namespace.
"use strict";
const { randomUUID } = require("node:crypto");
const { Limiter, fastifyRateLimitStore } = require(process.env.RL_NODE_DIST);
const Redis = require("./ioredis-shim.cjs");

// RL_PEER_OFF_BY_ONE=1: a deliberately wrong store, one request too many, to show the suite notices.
function storeOn(limiter, prefix, continueExceeding, exponentialBackoff) {
  const Store = fastifyRateLimitStore(limiter, prefix);
  if (process.env.RL_PEER_OFF_BY_ONE === "1") {
    const incr = Store.prototype.incr;
    Store.prototype.incr = function (key, cb, timeWindow, max) {
      incr.call(this, key, (err, res) => cb(err, res && { ...res, current: res.current + 1 }), timeWindow, max);
    };
  }
  return new Store({ continueExceeding, exponentialBackoff });
}

let shared;
let client;
const { after, afterEach, mock } = require("node:test");
// Closed after the test file's last test (an open connection would keep its process alive).
after(() => client?.disconnect());
// A test of theirs that fails before its own clock.reset() would leave the clock fake for the
// next ones (whose real sleeps would then never end).
afterEach(() => mock.timers.reset());
function LocalStore(continueExceeding, exponentialBackoff) {
  shared ??= new Limiter((client = new Redis()), { failure: "closed", deadlineMs: 1000 });
  return storeOn(shared, `frl:${randomUUID()}:`, continueExceeding, exponentialBackoff);
}

function RedisStore(continueExceeding, exponentialBackoff, redis, key = "fastify-rate-limit-") {
  return storeOn(new Limiter(redis, { failure: "closed", deadlineMs: 1000 }), key, continueExceeding, exponentialBackoff);
}

module.exports = { LocalStore, RedisStore };
