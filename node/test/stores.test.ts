// The stores under the real express-rate-limit and @fastify/rate-limit, on a real module server and
// a stock one (the library).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import express from "express";
import { rateLimit as erl } from "express-rate-limit";
import Fastify from "fastify";
import fastifyRateLimit from "@fastify/rate-limit";
import { Redis } from "ioredis";
import { Server } from "./servers.ts";
import { Limiter, ExpressRateLimitStore, fastifyRateLimitStore, UsageError } from "../src/index.ts";

let module: Server, stock: Server;
const clients: Redis[] = [];
before(async () => {
  [module, stock] = await Promise.all([Server.start({ module: true }), Server.start()]);
});
after(async () => {
  for (const c of clients) c.disconnect();
  await Promise.all([module?.close(), stock?.close()]);
});
function limiterOn(s: Server): Limiter {
  const c = new Redis(s.port);
  clients.push(c);
  return new Limiter(c, { failure: "open" });
}

for (const [name, server] of [["module", () => module], ["library", () => stock]] as const) {
  test(`express-rate-limit with ExpressRateLimitStore (${name}): limit, headers, decrement (skipFailedRequests), resetKey, get`, async () => {
    const store = new ExpressRateLimitStore({ limiter: limiterOn(server()), prefix: `erl:${name}:` });
    const app = express();
    app.use(erl({ windowMs: 60_000, limit: 3, standardHeaders: "draft-7", legacyHeaders: false, store, skipFailedRequests: true }));
    app.get("/fail", (_req, res) => void res.status(500).send("no"));
    app.get("/", (_req, res) => void res.send("ok"));
    const s = app.listen(0, "127.0.0.1");
    await new Promise((r) => s.once("listening", r));
    const url = `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
    try {
      assert.equal((await fetch(`${url}/fail`)).status, 500); // counted, then given back
      await new Promise((r) => setTimeout(r, 50));
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await fetch(url)).status);
      assert.deepEqual(statuses, [200, 200, 200, 429]);
      const key = "127.0.0.1";
      const got = await store.get(key);
      assert.equal(got?.totalHits, 3);
      await store.resetKey(key);
      assert.equal((await fetch(url)).status, 200);
      const r = await fetch(url);
      assert.match(r.headers.get("ratelimit") ?? "", /limit=3, remaining=1/);
    } finally {
      await new Promise((r) => s.close(r));
    }
  });

  test(`@fastify/rate-limit with fastifyRateLimitStore (${name})`, async () => {
    const app = Fastify();
    await app.register(fastifyRateLimit, { max: 2, timeWindow: 60_000, store: fastifyRateLimitStore(limiterOn(server()), `frl:${name}:`) });
    app.get("/", async () => "ok");
    await app.listen({ port: 0, host: "127.0.0.1" });
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    try {
      const r = [];
      for (let i = 0; i < 3; i++) r.push(await fetch(url));
      assert.deepEqual(r.map((x) => x.status), [200, 200, 429]);
      assert.equal(r[0]!.headers.get("x-ratelimit-remaining"), "1");
    } finally {
      await app.close();
    }
  });
}

test("a limit that is a function per request is refused with a clear error", () => {
  const store = new ExpressRateLimitStore({ limiter: new Limiter({ name: "x", cluster: false, send: async () => null }, { failure: "open" }) });
  assert.throws(() => store.init({ windowMs: 1000, limit: () => 5 }), (e: unknown) => e instanceof UsageError && /per request/.test(e.message));
});
