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

test("express-rate-limit instances with the default store count in keys of their own, same options or not (no ERR_ERL_DOUBLE_COUNT)", async () => {
  const limiter = limiterOn(module);
  const reported: string[] = [];
  const [error, warn] = [console.error, console.warn];
  console.error = console.warn = (...a: unknown[]) => void reported.push(a.map(String).join(" "));
  // A window no other test uses: these stores' default prefixes are the first of their options here.
  const windowMs = 61_001;
  const first = new ExpressRateLimitStore({ limiter });
  const second = new ExpressRateLimitStore({ limiter });
  const twin = new ExpressRateLimitStore({ limiter });
  const app = express();
  app.use(erl({ windowMs, limit: 3, standardHeaders: "draft-7", legacyHeaders: false, validate: true, store: first }));
  app.use(erl({ windowMs, limit: 5, standardHeaders: "draft-7", legacyHeaders: false, validate: true, store: second }));
  // The same options as the first's: apart all the same (the second of them in this process).
  app.use(erl({ windowMs, limit: 3, standardHeaders: "draft-7", legacyHeaders: false, validate: true, store: twin }));
  app.get("/", (_req, res) => void res.send("ok"));
  const s = app.listen(0, "127.0.0.1");
  await new Promise((r) => s.once("listening", r));
  const url = `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
  try {
    assert.equal(new Set([first.prefix, second.prefix, twin.prefix]).size, 3, `${first.prefix} ${second.prefix} ${twin.prefix}`);
    assert.match(first.prefix, /^rl:erl:[0-9a-f]{8}:$/);
    assert.equal(twin.prefix, `${first.prefix.slice(0, -1)}-2:`);
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await fetch(url)).status);
    assert.deepEqual(statuses, [200, 200, 200, 429], "each request counted once by the first");
    assert.equal((await first.get("127.0.0.1"))?.totalHits, 3);
    assert.equal((await second.get("127.0.0.1"))?.totalHits, 3);
    assert.equal((await twin.get("127.0.0.1"))?.totalHits, 3);
    const keys = [first, second, twin].map((st) => `${st.prefix}127.0.0.1:fixed_window`);
    assert.equal(await limiter.call(["EXISTS", ...keys]), 3);
  } finally {
    console.error = error;
    console.warn = warn;
    await new Promise((r) => s.close(r));
  }
  assert.deepEqual(reported.filter((r) => r.includes("ERR_ERL")), [], reported.join("\n"));
});

/** The stores module as a process of another deploy loads it: a module instance of its own (its
 * default prefixes not yet given to any store). */
let deploys = 0;
async function freshStores(): Promise<typeof import("../src/stores.ts")> {
  const url: string = `../src/stores.ts?deploy=${++deploys}`;
  return import(url);
}

test("a default prefix comes from the store's options, not from the order stores are made (a deploy that reorders them keeps each store's keys)", async () => {
  const limiter = new Limiter({ name: "x", cluster: false, send: async () => null }, { failure: "open" });
  const erlStore = (m: typeof import("../src/stores.ts"), options: object) => {
    const st = new m.ExpressRateLimitStore({ limiter });
    st.init(options);
    return st.prefix;
  };
  const login = { windowMs: 60_000, limit: 5 }, api = { windowMs: 60_000, limit: 100 }, search = { windowMs: 1000, limit: 5 };
  const before = await freshStores();
  const one = [login, api, search].map((o) => erlStore(before, o));
  const after = await freshStores();
  const other = [search, login, api].map((o) => erlStore(after, o));
  assert.deepEqual([other[1], other[2], other[0]], one, "each store's prefix in the reordered deploy");
  assert.equal(new Set(one).size, 3);
  // express-rate-limit's `identifier`, given as a string, is the store's identity: its numbers may change.
  const [named, renumbered] = [await freshStores(), await freshStores()];
  assert.equal(erlStore(named, { ...api, identifier: "api" }), erlStore(renumbered, { windowMs: 30_000, limit: 250, identifier: "api" }));
  assert.notEqual(erlStore(named, { ...api, identifier: "search" }), erlStore(renumbered, { ...api, identifier: "api" }));
  // A given prefix is the store's, whatever its options.
  const given = new before.ExpressRateLimitStore({ limiter, prefix: "mine:" });
  given.init(api);
  assert.equal(given.prefix, "mine:");

  // @fastify/rate-limit: a store per registration, from its max and timeWindow; each route's child
  // keeps its registration's prefix.
  const frl = (m: typeof import("../src/stores.ts"), options: object) => new (m.fastifyRateLimitStore(limiter))(options);
  const [f1, f2] = [await freshStores(), await freshStores()];
  const a = { max: 10, timeWindow: 60_000 }, b = { max: 100, timeWindow: 60_000 };
  const firstDeploy = [frl(f1, a), frl(f1, b)];
  const secondDeploy = [frl(f2, b), frl(f2, a)];
  assert.deepEqual(secondDeploy.map((st) => st.prefix).reverse(), firstDeploy.map((st) => st.prefix));
  assert.notEqual(firstDeploy[0].prefix, firstDeploy[1].prefix);
  assert.match(firstDeploy[0].prefix, /^rl:frl:[0-9a-f]{8}:$/);
  const child = firstDeploy[0].child({ max: 3, routeInfo: { method: "GET", url: "/x" } });
  assert.deepEqual([child.prefix, child.route], [firstDeploy[0].prefix, "GET/x:"]);
  assert.notEqual(frl(f1, a).prefix, firstDeploy[0].prefix, "a second registration of the same options counts apart");
});

test("@fastify/rate-limit registered twice (encapsulated) with the same default store class and options: each counts its own", async () => {
  const Store = fastifyRateLimitStore(limiterOn(module));
  const app = Fastify();
  for (const path of ["/a", "/b"]) {
    await app.register(async (scope) => {
      await scope.register(fastifyRateLimit, { max: 2, timeWindow: 60_001, store: Store });
      scope.get(path, async () => "ok");
    });
  }
  await app.listen({ port: 0, host: "127.0.0.1" });
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  try {
    const a = [];
    for (let i = 0; i < 3; i++) a.push((await fetch(`${url}/a`)).status);
    assert.deepEqual(a, [200, 200, 429]);
    assert.equal((await fetch(`${url}/b`)).status, 200, "/b's registration did not count /a's requests");
  } finally {
    await app.close();
  }
});
