// The Express (5 and 4) middleware and the Fastify plugin over real sockets on a real module server:
// headers and 429 bodies as the contract's http vectors write them, a global limit in the same call,
// skips, shadow limits, deny/allow lists, callers by header and through trusted proxies, an outage,
// concurrency limits (a permit held while the response is in flight, released when it is finished or
// when the client hangs up), a cost function's wrong cost reaching the framework as a UsageError.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import express5 from "express";
import express4 from "express4";
import Fastify from "fastify";
import { Redis } from "ioredis";
import { Server, freePort, LONG_DEADLINE_MS } from "./servers.ts";
import { Limiter, TokenBucket, FixedWindow, Concurrency, UsageError, rateLimit, rateLimitPlugin, type RateLimitOptions } from "../src/index.ts";

let server: Server;
let redis: Redis;
let limiter: Limiter;
before(async () => {
  server = await Server.start({ module: true });
  redis = new Redis(server.port);
  limiter = new Limiter(redis, { failure: "open", deadlineMs: LONG_DEADLINE_MS });
});
after(async () => {
  redis?.disconnect();
  await server?.close();
});

type App = { url: string; close(): Promise<void> };

// Requests to /slow/... are answered when the test calls `finish()` (or never, if it does not): a
// request in flight, holding its concurrency permit.
let waiting: (() => void)[] = [];
const held = (url: string): Promise<void> => (url.startsWith("/slow") ? new Promise((r) => waiting.push(r)) : Promise.resolve());
function finish(): void {
  for (const w of waiting.splice(0)) w();
}
async function until(what: string, ok: () => Promise<boolean> | boolean): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (await ok()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.fail(`timed out waiting for ${what}`);
}
const inFlight = async (key: string) => (await limiter.peek(key)).fields["held"] ?? 0;
/** A request whose response the test reads later; `abort()` hangs up. */
function open(url: string): { response: Promise<Response>; abort(): void } {
  const c = new AbortController();
  return { response: fetch(url, { signal: c.signal }), abort: () => c.abort() };
}

// Each app's error handler records what reached the framework (`caught`) and answers 500.
const FRAMEWORKS: { name: string; serve(o: RateLimitOptions, caught?: unknown[]): Promise<App> }[] = [
  ...[["Express 5", express5], ["Express 4", express4]].map(([name, express]: any) => ({
    name,
    async serve(o: RateLimitOptions, caught: unknown[] = []): Promise<App> {
      const app = express();
      app.use(rateLimit(o));
      app.use((req: any, res: any) => void held(req.url).then(() => res.send("ok")));
      app.use((err: unknown, _req: any, res: any, _next: any) => void (caught.push(err), res.status(500).send("error")));
      const s = app.listen(0, "127.0.0.1");
      await new Promise((r) => s.once("listening", r));
      return { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, close: () => new Promise((r) => (s.close(() => r(undefined)), s.closeAllConnections())) };
    },
  })),
  {
    name: "Fastify",
    async serve(o: RateLimitOptions, caught: unknown[] = []): Promise<App> {
      const app = Fastify({ forceCloseConnections: true });
      app.setErrorHandler((err: unknown, _req: any, reply: any) => void (caught.push(err), reply.code(500).send("error")));
      await app.register(rateLimitPlugin, o);
      app.get("/*", async (req: any) => (await held(req.url), "ok"));
      await app.listen({ port: 0, host: "127.0.0.1" });
      return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, close: () => app.close() };
    },
  },
];

let run = 0;
for (const fw of FRAMEWORKS) {
  describe(fw.name, () => {
    test("a route's limit: headers on each response, then the 429 byte for byte", async () => {
      const app = await fw.serve({ limiter, prefix: `rl${++run}`, routes: [{ name: "api", prefix: "/api", policy: new TokenBucket({ capacity: 2, perSecond: 1 }) }] });
      try {
        const r1 = await fetch(`${app.url}/api/x`);
        assert.equal(r1.status, 200);
        assert.equal(await r1.text(), "ok");
        assert.equal(r1.headers.get("ratelimit-limit"), "2");
        assert.equal(r1.headers.get("ratelimit-remaining"), "1");
        assert.equal(r1.headers.get("ratelimit-reset"), "1");
        await fetch(`${app.url}/api`);
        const r3 = await fetch(`${app.url}/api/y`);
        assert.equal(r3.status, 429);
        assert.equal(r3.headers.get("content-type"), "application/problem+json");
        assert.equal(r3.headers.get("retry-after"), "1");
        assert.equal(r3.headers.get("ratelimit-remaining"), "0");
        assert.equal(await r3.text(), '{"detail":"rate limit \'api\' exceeded: retry in 1 s","limit":"api","quota":2,"remaining":0,"retry_after_seconds":1,"status":429,"title":"Too Many Requests","type":"urn:redis-ratelimit:rate-limited"}');
        const other = await fetch(`${app.url}/apix`);
        assert.equal(other.status, 200);
        assert.equal(other.headers.get("ratelimit-limit"), null, "/apix is not under /api");
      } finally {
        await app.close();
      }
    });

    test("global limit in the same call, skip, shadow, callers by header, deny and allow lists, structured fields", async () => {
      const app = await fw.serve({
        limiter, prefix: `rl${++run}`, structured: true, header: "x-api-key",
        routes: [
          { name: "search", prefix: "/search", policy: new FixedWindow({ limit: 2, windowMs: 60_000 }) },
          { name: "beta", prefix: "/beta", policy: new FixedWindow({ limit: 1, windowMs: 60_000 }), shadow: true },
        ],
        global: { policy: new FixedWindow({ limit: 3, windowMs: 60_000 }) },
        skip: ["/health"],
        deny: ["tenant:mallory"], allow: ["tenant:ops"],
      });
      try {
        const h = { "x-api-key": "acme" };
        const a = await fetch(`${app.url}/search`, { headers: h });
        assert.equal(a.headers.get("ratelimit-policy"), '"search";q=2;w=60');
        assert.equal(a.headers.get("ratelimit"), '"search";r=1;t=60');
        await fetch(`${app.url}/beta`, { headers: h }); // shadow: only the global limit is enforced
        const c = await fetch(`${app.url}/beta`, { headers: h });
        assert.equal(c.status, 200);
        const d = await fetch(`${app.url}/search`, { headers: h });
        assert.equal(d.status, 429);
        assert.equal(JSON.parse(await d.text()).limit, "all");
        assert.equal((await fetch(`${app.url}/search`, { headers: { "x-api-key": "other" } })).status, 200);
        assert.equal((await fetch(`${app.url}/health`, { headers: h })).headers.get("ratelimit-limit"), null);
        const m = await fetch(`${app.url}/search`, { headers: { "x-api-key": "mallory" } });
        assert.equal(m.status, 403);
        assert.equal(await m.text(), '{"detail":"requests from this caller are refused","status":403,"title":"Forbidden","type":"urn:redis-ratelimit:denied"}');
        for (let i = 0; i < 5; i++) assert.equal((await fetch(`${app.url}/search`, { headers: { "x-api-key": "ops" } })).status, 200);
      } finally {
        await app.close();
      }
    });

    test("a route's kind changed in a deploy starts afresh on new keys (no conflict); its numbers changed carry on", async () => {
      const prefix = `rl${++run}`;
      const serve = (policy: TokenBucket | FixedWindow) => fw.serve({ limiter, prefix, routes: [{ name: "api", prefix: "/", policy }] });
      const conflicts = limiter.counters["conflicts"];
      const remaining = async (app: App) => {
        const r = await fetch(app.url);
        assert.equal(r.status, 200);
        assert.equal(r.headers.get("x-ratelimit-degraded"), null, "decided by Redis, not the failure policy");
        return Number(r.headers.get("ratelimit-remaining"));
      };
      let app = await serve(new TokenBucket({ capacity: 5, perSecond: 0.01 }));
      try {
        assert.deepEqual([await remaining(app), await remaining(app)], [4, 3]);
      } finally {
        await app.close();
      }
      app = await serve(new FixedWindow({ limit: 10, windowMs: 60_000 }));
      try {
        assert.deepEqual([await remaining(app), await remaining(app)], [9, 8], "a fresh window, not the bucket's state");
      } finally {
        await app.close();
      }
      app = await serve(new TokenBucket({ capacity: 8, perSecond: 0.01 }));
      try {
        assert.equal(await remaining(app), 5, "the bucket carries on with its new numbers (3 left of 5: 6 of 8, less this one)");
      } finally {
        await app.close();
      }
      assert.equal(limiter.counters["conflicts"], conflicts);
    });

    test("X-Forwarded-For believed from trusted proxies only", async () => {
      const prefix = `rl${++run}`;
      const policy = new FixedWindow({ limit: 1, windowMs: 60_000 });
      const trusting = await fw.serve({ limiter, prefix, routes: [{ name: "api", prefix: "/", policy }], trustedProxies: ["127.0.0.0/8"] });
      try {
        assert.equal((await fetch(trusting.url, { headers: { "x-forwarded-for": "203.0.113.1" } })).status, 200);
        assert.equal((await fetch(trusting.url, { headers: { "x-forwarded-for": "203.0.113.2" } })).status, 200);
        assert.equal((await fetch(trusting.url, { headers: { "x-forwarded-for": "203.0.113.1" } })).status, 429);
        assert.equal(await redis.exists(`${prefix}:{ip:203.0.113.2}:api:fixed_window`), 1);
      } finally {
        await trusting.close();
      }
      const prefix2 = `rl${++run}`;
      const plain = await fw.serve({ limiter, prefix: prefix2, routes: [{ name: "api", prefix: "/", policy }] });
      try {
        assert.equal((await fetch(plain.url, { headers: { "x-forwarded-for": "203.0.113.1" } })).status, 200);
        assert.equal((await fetch(plain.url, { headers: { "x-forwarded-for": "203.0.113.2" } })).status, 429, "one peer: 127.0.0.1");
      } finally {
        await plain.close();
      }
    });

    test("concurrency: a permit per request in flight, the 429 byte for byte, released when the response is sent", async () => {
      const prefix = `rl${++run}`;
      const app = await fw.serve({
        limiter, prefix, header: "x-api-key",
        routes: [{ name: "api", prefix: "/", policy: new FixedWindow({ limit: 100, windowMs: 60_000 }) }],
        concurrency: [{ name: "export", prefix: "/slow", policy: new Concurrency({ limit: 2, leaseMs: 5_000 }) }],
      });
      const lease = `${prefix}:{tenant:acme}:export:concurrency`;
      const h = { headers: { "x-api-key": "acme" } };
      try {
        const a = fetch(`${app.url}/slow/a`, h);
        const b = fetch(`${app.url}/slow/b`, h);
        await until("two requests in flight", async () => waiting.length === 2);
        assert.equal(await inFlight(lease), 2);
        const c = await fetch(`${app.url}/slow/c`, h);
        assert.equal(c.status, 429);
        assert.equal(c.headers.get("content-type"), "application/problem+json");
        assert.equal(c.headers.get("retry-after"), "5", "at the latest when the oldest lease ends");
        assert.equal(c.headers.get("ratelimit-limit"), null, "a concurrency denial has no RateLimit-* fields");
        assert.equal(await c.text(), '{"detail":"concurrency limit \'export\' reached: 2 requests in flight at most; retry in 5 s at the latest","in_flight_limit":2,"limit":"export","retry_after_seconds":5,"status":429,"title":"Too Many Requests In Flight","type":"urn:redis-ratelimit:concurrency-limited"}');
        // Another caller has its own slots; a path outside /slow takes none.
        const other = fetch(`${app.url}/slow/d`, { headers: { "x-api-key": "other" } });
        const plain = await fetch(`${app.url}/x`, h);
        assert.equal(plain.status, 200);
        assert.equal(plain.headers.get("ratelimit-limit"), "100");
        await until("the other caller's request in flight", async () => waiting.length === 3);
        finish();
        const [ra, rb, rd] = await Promise.all([a, b, other]);
        assert.deepEqual([ra.status, rb.status, rd.status], [200, 200, 200]);
        await Promise.all([ra.text(), rb.text(), rd.text()]);
        await until("the permits released", async () => (await inFlight(lease)) === 0);
        const again = fetch(`${app.url}/slow/e`, h);
        await until("a new request in flight", async () => waiting.length === 1);
        finish();
        assert.equal((await again).status, 200);
      } finally {
        finish();
        await app.close();
      }
    });

    test("concurrency: a client that hangs up mid-request frees its slot; a lease as the tightest limit still sends the rate limit's fields", async () => {
      const prefix = `rl${++run}`;
      const app = await fw.serve({
        limiter, prefix, header: "x-api-key",
        global: { policy: new TokenBucket({ capacity: 50, perSecond: 1 }) },
        globalConcurrency: { policy: new Concurrency({ limit: 1, leaseMs: 5_000 }) },
      });
      const lease = `${prefix}:{tenant:acme}:all:concurrency`;
      const h = { headers: { "x-api-key": "acme" } };
      try {
        const gone = open(`${app.url}/slow/a`);
        await until("one request in flight", async () => waiting.length === 1);
        assert.equal(await inFlight(lease), 0, "no caller header: an IP caller");
        const first = fetch(`${app.url}/slow/b`, h);
        await until("two requests in flight", async () => waiting.length === 2);
        assert.equal(await inFlight(lease), 1);
        const denied = await fetch(`${app.url}/slow/c`, h);
        assert.equal(denied.status, 429);
        assert.equal(JSON.parse(await denied.text()).limit, "all");
        // The first request's client hangs up before its answer: its slot comes back at once, not at the lease's end.
        const ipLease = (await redis.keys(`${prefix}:{ip:*}:all:concurrency`))[0]!;
        assert.equal(await inFlight(ipLease), 1);
        gone.abort();
        await gone.response.catch(() => undefined);
        await until("the hung-up request's permit released", async () => (await inFlight(ipLease)) === 0);
        finish();
        const r = await first;
        assert.equal(r.status, 200);
        // The lease (0 of 1 left) was the tightest limit: the headers describe the token bucket, peeked.
        assert.equal(r.headers.get("ratelimit-limit"), "50");
        assert.equal(r.headers.get("ratelimit-remaining"), "49", "the denied request took nothing");
        await r.text();
        await until("the permit released", async () => (await inFlight(lease)) === 0);
      } finally {
        finish();
        await app.close();
      }
    });

    test("concurrency: the closed policy's answer names the limit; a rate policy where a concurrency one is due is refused", async () => {
      await assert.rejects(fw.serve({ limiter, concurrency: [{ name: "x", prefix: "/x", policy: new FixedWindow({ limit: 1, windowMs: 1000 }) }] }), /not a concurrency policy/);
      await assert.rejects(fw.serve({ limiter, routes: [{ name: "x", prefix: "/x", policy: new Concurrency({ limit: 1, leaseMs: 1000 }) }] }), /not a rate policy/);
      const dead = new Redis(await freePort());
      dead.on("error", () => {});
      const closed = new Limiter(dead, { failure: "closed" });
      const app = await fw.serve({ limiter: closed, concurrency: [{ name: "export", prefix: "/", policy: new Concurrency({ limit: 2, leaseMs: 1000 }) }] });
      try {
        const r = await fetch(`${app.url}/slow/a`);
        assert.equal(r.status, 429);
        assert.equal(r.headers.get("x-ratelimit-degraded"), "true");
        assert.equal(await r.text(), '{"detail":"concurrency limit \'export\' could not be checked: the rate limiter is unavailable and fails closed; retry in 1 s","limit":"export","retry_after_seconds":1,"status":429,"title":"Rate limiter unavailable","type":"urn:redis-ratelimit:unavailable"}');
        assert.equal(waiting.length, 0);
      } finally {
        await app.close();
        dead.disconnect();
      }
    });

    test("a route's cost of 1.5 or 2^64 reaches the framework as a UsageError (a 500): no degraded decision, no breaker", async () => {
      // Fails open, and one failure would open its breaker: a cost refused as an outage would be served
      // (degraded) and open it.
      const rl = new Limiter(redis, { failure: "open", deadlineMs: LONG_DEADLINE_MS, breaker: { failures: 1, cooldownMs: 60_000 } });
      const degraded: unknown[] = [];
      rl.on("degraded", (e) => degraded.push(e));
      const costs: [unknown, string][] = [
        [1.5, "ERR invalid cost: must be a whole number >= 0"],
        [2 ** 64, "ERR invalid cost: too large"],
        [2n ** 64n, "ERR invalid cost: too large"],
      ];
      for (const [cost, message] of costs) {
        const caught: unknown[] = [];
        const usage = rl.counters["usage_errors"]!;
        const app = await fw.serve({
          limiter: rl, prefix: `rl${++run}`,
          routes: [{ name: "api", prefix: "/", policy: new TokenBucket({ capacity: 5, perSecond: 1 }), cost: () => cost as number }],
          global: { policy: new FixedWindow({ limit: 100, windowMs: 60_000 }) },
        }, caught);
        try {
          const r = await fetch(`${app.url}/x`);
          assert.equal(r.status, 500, `cost ${cost}`);
          assert.equal(await r.text(), "error", "the framework's error handler answered, not the handler nor the limiter");
          assert.equal(r.headers.get("x-ratelimit-degraded"), null);
          assert.equal(caught.length, 1);
          const e = caught[0] as UsageError;
          assert.ok(e instanceof UsageError, String(e));
          assert.deepEqual({ code: e.code, message: e.message }, { code: "ERR", message }, `cost ${cost}`);
          assert.equal(rl.counters["usage_errors"], usage + 1);
        } finally {
          await app.close();
        }
      }
      assert.deepEqual(degraded, [], "never the failure policy's decision");
      assert.equal(rl.breaker!.isOpen, false);
      assert.equal(rl.counters["outage"], 0);
      assert.equal(rl.counters["misconfigured"], 0);
    });

    test("an outage with the closed policy: the unavailable answer, within the deadline", async () => {
      const dead = new Redis(await freePort(), { lazyConnect: false });
      dead.on("error", () => {});
      const closed = new Limiter(dead, { failure: "closed" });
      const app = await fw.serve({ limiter: closed, routes: [{ name: "api", prefix: "/", policy: new TokenBucket({ capacity: 5, perSecond: 1 }) }] });
      try {
        const t0 = performance.now();
        const r = await fetch(app.url);
        assert.ok(performance.now() - t0 < 400);
        assert.equal(r.status, 429);
        assert.equal(r.headers.get("x-ratelimit-degraded"), "true");
        assert.equal(await r.text(), '{"detail":"rate limit \'api\' could not be checked: the rate limiter is unavailable and fails closed; retry in 1 s","limit":"api","retry_after_seconds":1,"status":429,"title":"Rate limiter unavailable","type":"urn:redis-ratelimit:unavailable"}');
      } finally {
        await app.close();
        dead.disconnect();
      }
    });
  });
}

test("a route named as the global limit is refused when built: its key would be the global limit's", () => {
  const policy = new FixedWindow({ limit: 1, windowMs: 1000 });
  assert.throws(() => rateLimit({ limiter, routes: [{ name: "all", prefix: "/", policy }], global: { policy } }), /is the global limit's/);
  assert.throws(() => rateLimit({ limiter, routes: [{ name: "api", prefix: "/", policy }], global: { policy, name: "api" } }), /is the global limit's/);
  assert.doesNotThrow(() => rateLimit({ limiter, routes: [{ name: "all", prefix: "/", policy }], globalConcurrency: { policy: new Concurrency({ limit: 1, leaseMs: 1000 }) } }));
});
