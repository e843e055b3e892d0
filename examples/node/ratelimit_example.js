// RL.* from Node.js with ioredis: token bucket decisions, a sliding log, a route + global limit in one
// atomic call, the five reply fields by name mapped to HTTP headers, and an explicit fail-open /
// fail-closed choice when Redis is unreachable. `make examples` runs it against a throwaway server:
//
//     node ratelimit_example.js redis://127.0.0.1:6379/ <a closed port>
"use strict";
const assert = require("node:assert");
const Redis = require("ioredis");

// [readme:node]
const FIELDS = ["allowed", "limit", "remaining", "retryAfterMs", "resetAfterMs"];

// RL.TOKEN key capacity rate cost [key capacity rate cost ...] as an object of the named fields.
async function token(redis, ...args) {
  const reply = await redis.call("RL.TOKEN", ...args);
  const decision = Object.fromEntries(FIELDS.map((name, i) => [name, reply[i]]));
  decision.allowed = decision.allowed === 1;
  if (reply.length > 5) decision.limiting = reply[5]; // the key group a multi-key reply describes
  return decision;
}

// The README's mapping: seconds rounded up; Retry-After at least 1; none when it can never fit.
function httpHeaders(d) {
  const headers = {
    "RateLimit-Limit": String(d.limit),
    "RateLimit-Remaining": String(d.remaining),
    "RateLimit-Reset": String(Math.ceil(d.resetAfterMs / 1000)),
  };
  if (!d.allowed && d.retryAfterMs >= 0) headers["Retry-After"] = String(Math.max(1, Math.ceil(d.retryAfterMs / 1000)));
  return headers;
}

// A decision that survives an unreachable Redis by an explicit choice, never silently.
async function check(redis, key, failOpen) {
  try {
    return { allowed: (await token(redis, key, 10, 5, 1)).allowed, degraded: false };
  } catch (err) {
    return { allowed: failOpen, degraded: true }; // count it, alert on it, send X-RateLimit-Degraded
  }
}
// [/readme:node]

async function main(url, closedPort) {
  const redis = new Redis(url);
  await redis.del("js:user:ada", "js:slide", "js:{c1}:search", "js:{c1}:all", "js:cell:user123");

  const decisions = [];
  for (let i = 0; i < 12; i++) decisions.push(await token(redis, "js:user:ada", 10, 5, 1));
  const allowed = decisions.filter((d) => d.allowed).length;
  const firstDenial = decisions.find((d) => !d.allowed);
  assert.strictEqual(allowed, 10);
  assert.ok(firstDenial.retryAfterMs > 0 && firstDenial.retryAfterMs <= 200);
  console.log(`node token: ${allowed} allowed, ${12 - allowed} denied; first denial headers ${JSON.stringify(httpHeaders(firstDenial))}`);

  const slide = [];
  for (let i = 0; i < 4; i++) slide.push((await redis.call("RL.SLIDE", "js:slide", 3, 60, `req-${i}`))[0]);
  assert.deepStrictEqual(slide, [1, 1, 1, 0]);
  console.log(`node slide: ${slide.filter((a) => a === 1).length} of 4 allowed in a 3 per 60 s window`);

  const both = [];
  for (let i = 0; i < 4; i++) both.push(await token(redis, "js:{c1}:search", 10, 0.001, 1, "js:{c1}:all", 3, 0.001, 1));
  assert.deepStrictEqual(both.map((d) => d.allowed), [true, true, true, false]);
  assert.strictEqual(both[3].limiting, 2);
  console.log("node multi-key: route + global, 3 allowed, then the global limit (group 2) denies");

  const never = await token(redis, "js:user:bob", 10, 5, 11);
  assert.strictEqual(never.retryAfterMs, -1);
  assert.ok(!("Retry-After" in httpHeaders(never)));
  console.log("node cost above capacity: retryAfterMs -1, no Retry-After");

  // CL.THROTTLE as redis-cell's users call it: a burst of 15, 30 per 60 s, quantity 1.
  const first = await redis.call("CL.THROTTLE", "js:cell:user123", 15, 30, 60, 1);
  const [limited, limit, remaining, retryAfter, resetAfter] = first;
  assert.deepStrictEqual([limited, limit, remaining, retryAfter, resetAfter], [0, 16, 15, -1, 2]);
  const rest = [];
  for (let i = 0; i < 16; i++) rest.push(await redis.call("CL.THROTTLE", "js:cell:user123", 15, 30, 60, 1));
  assert.deepStrictEqual(rest.map(([limited]) => limited), [...Array(15).fill(0), 1]);
  const [, , remainingAfter, retryAfterAfter] = rest[15];
  assert.ok(remainingAfter === 0 && retryAfterAfter > 0);
  console.log(`node CL.THROTTLE: first [${first.join(", ")}]; 16 allowed, the 17th limited, retry_after ${retryAfterAfter} s`);
  redis.disconnect();

  const dead = new Redis({ host: "127.0.0.1", port: Number(closedPort), connectTimeout: 100, maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true });
  dead.on("error", () => {});
  for (const failOpen of [true, false]) {
    const { allowed, degraded } = await check(dead, "js:user:ada", failOpen);
    assert.strictEqual(allowed, failOpen);
    assert.ok(degraded);
    console.log(`node redis down, failOpen=${failOpen} -> allowed=${allowed} degraded=${degraded}`);
  }
  dead.disconnect();
}

main(process.argv[2], process.argv[3]).catch((err) => {
  console.error(err);
  process.exit(1);
});
