// The Express (5 and 4) middleware and the Fastify plugin over real sockets on a real module server:
// headers and 429 bodies as the contract's http vectors write them, a global limit in the same call,
// skips, shadow limits, deny/allow lists, callers by header and through trusted proxies, an outage.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import express5 from "express";
import express4 from "express4";
import Fastify from "fastify";
import { Redis } from "ioredis";
import { Server, freePort } from "./servers.ts";
import { Limiter, TokenBucket, FixedWindow, rateLimit, rateLimitPlugin, type RateLimitOptions } from "../src/index.ts";

let server: Server;
let redis: Redis;
let limiter: Limiter;
before(async () => {
  server = await Server.start({ module: true });
  redis = new Redis(server.port);
  limiter = new Limiter(redis, { failure: "open" });
});
after(async () => {
  redis?.disconnect();
  await server?.close();
});

type App = { url: string; close(): Promise<void> };

const FRAMEWORKS: { name: string; serve(o: RateLimitOptions): Promise<App> }[] = [
  ...[["Express 5", express5], ["Express 4", express4]].map(([name, express]: any) => ({
    name,
    async serve(o: RateLimitOptions): Promise<App> {
      const app = express();
      app.use(rateLimit(o));
      app.use((_req: any, res: any) => res.send("ok"));
      const s = app.listen(0, "127.0.0.1");
      await new Promise((r) => s.once("listening", r));
      return { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, close: () => new Promise((r) => s.close(() => r(undefined))) };
    },
  })),
  {
    name: "Fastify",
    async serve(o: RateLimitOptions): Promise<App> {
      const app = Fastify();
      await app.register(rateLimitPlugin, o);
      app.get("/*", async () => "ok");
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

    test("X-Forwarded-For believed from trusted proxies only", async () => {
      const prefix = `rl${++run}`;
      const policy = new FixedWindow({ limit: 1, windowMs: 60_000 });
      const trusting = await fw.serve({ limiter, prefix, routes: [{ name: "api", prefix: "/", policy }], trustedProxies: ["127.0.0.0/8"] });
      try {
        assert.equal((await fetch(trusting.url, { headers: { "x-forwarded-for": "203.0.113.1" } })).status, 200);
        assert.equal((await fetch(trusting.url, { headers: { "x-forwarded-for": "203.0.113.2" } })).status, 200);
        assert.equal((await fetch(trusting.url, { headers: { "x-forwarded-for": "203.0.113.1" } })).status, 429);
        assert.equal(await redis.exists(`${prefix}:{ip:203.0.113.2}:api`), 1);
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
