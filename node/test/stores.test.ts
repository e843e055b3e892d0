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
import { Server, LONG_DEADLINE_MS } from "./servers.ts";
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
  return new Limiter(c, { failure: "open", deadlineMs: LONG_DEADLINE_MS });
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
    const Store = fastifyRateLimitStore(limiterOn(server()), `frl:${name}:`);
    await app.register(fastifyRateLimit, { max: 2, timeWindow: 60_000, store: Store });
    app.get("/", async () => "ok");
    await app.listen({ port: 0, host: "127.0.0.1" });
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    try {
      const r = [];
      for (let i = 0; i < 3; i++) r.push(await fetch(url));
      assert.deepEqual(r.map((x) => x.status), [200, 200, 429]);
      assert.equal(r[0]!.headers.get("x-ratelimit-remaining"), "1");
      // read (`{ increment: false }`): the count without taking from it; nothing for a new key.
      const read = (key: string) => new Promise((ok, ko) => new Store().read(key, (e: Error | null, v: unknown) => (e ? ko(e) : ok(v)), 60_000, 2));
      const seen = (await read("127.0.0.1")) as { current: number; ttl: number };
      assert.equal(seen.current, 2);
      assert.ok(seen.ttl > 50_000 && seen.ttl <= 60_000, `ttl ${seen.ttl}`);
      assert.deepEqual(await read("192.0.2.1"), { current: 0, ttl: 0 });
      assert.equal((await read("127.0.0.1") as { current: number }).current, 2);
    } finally {
      await app.close();
    }
  });
}

test("fastifyRateLimitStore refuses continueExceeding and exponentialBackoff (a window that moves)", async () => {
  const Store = fastifyRateLimitStore(new Limiter({ name: "x", cluster: false, send: async () => null }, { failure: "open" }));
  for (const option of ["continueExceeding", "exponentialBackoff"]) {
    assert.throws(() => new Store({ [option]: true }), (e: unknown) => e instanceof UsageError && /not offered/.test(e.message));
    const app = Fastify();
    await assert.rejects(async () => { await app.register(fastifyRateLimit, { max: 2, timeWindow: 1000, [option]: true, store: Store }); }, UsageError);
    await app.close();
  }
  assert.doesNotThrow(() => new Store({ continueExceeding: false, exponentialBackoff: false }).child({ routeInfo: { method: "GET", url: "/" } }));
});

test("a limit that is a function per request is refused with a clear error", () => {
  const store = new ExpressRateLimitStore({ limiter: new Limiter({ name: "x", cluster: false, send: async () => null }, { failure: "open" }) });
  assert.throws(() => store.init({ windowMs: 1000, limit: () => 5 }), (e: unknown) => e instanceof UsageError && /per request/.test(e.message));
});

test("two express-rate-limit instances with the default store count in keys of their own (no ERR_ERL_DOUBLE_COUNT)", async () => {
  const limiter = limiterOn(module);
  const reported: string[] = [];
  const [error, warn] = [console.error, console.warn];
  console.error = console.warn = (...a: unknown[]) => void reported.push(a.map(String).join(" "));
  const first = new ExpressRateLimitStore({ limiter });
  const second = new ExpressRateLimitStore({ limiter });
  assert.notEqual(first.prefix, second.prefix);
  const app = express();
  app.use(erl({ windowMs: 60_000, limit: 3, standardHeaders: "draft-7", legacyHeaders: false, validate: true, store: first }));
  app.use(erl({ windowMs: 60_000, limit: 5, standardHeaders: "draft-7", legacyHeaders: false, validate: true, store: second }));
  app.get("/", (_req, res) => void res.send("ok"));
  const s = app.listen(0, "127.0.0.1");
  await new Promise((r) => s.once("listening", r));
  const url = `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
  try {
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await fetch(url)).status);
    assert.deepEqual(statuses, [200, 200, 200, 429], "each request counted once by the first");
    assert.equal((await first.get("127.0.0.1"))?.totalHits, 3);
    assert.equal((await second.get("127.0.0.1"))?.totalHits, 3);
    assert.equal(await limiter.call(["EXISTS", `${first.prefix}127.0.0.1:fixed_window`, `${second.prefix}127.0.0.1:fixed_window`]), 2);
  } finally {
    console.error = error;
    console.warn = warn;
    await new Promise((r) => s.close(r));
  }
  assert.deepEqual(reported.filter((r) => r.includes("ERR_ERL")), [], reported.join("\n"));
});
