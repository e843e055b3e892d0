// express-rate-limit's own store checks (its `validate` validations, all on: invalid hits, double
// count, store reuse, headers without a reset time) run against ExpressRateLimitStore over a real socket,
// on the module and under the fallback on a stopped server: none may report. (Its repository's own
// test suite is not in the npm package and targets its MemoryStore: not run here.)
import { test } from "node:test";
import assert from "node:assert/strict";
import express from "express";
import { rateLimit } from "express-rate-limit";
import { Redis } from "ioredis";
import type { AddressInfo } from "node:net";
import { Server, LONG_DEADLINE_MS } from "./servers.ts";
import { Limiter, ExpressRateLimitStore } from "../src/index.ts";

test("express-rate-limit's validations report nothing about the store (module, then the fallback)", async () => {
  const server = await Server.start({ module: true });
  // The server is stopped below: a client that gives a command up at its first failed reconnect (not
  // after 20), so the refusals, not the limiter's long deadline, end each call then.
  const redis = new Redis(server.port, "127.0.0.1", { maxRetriesPerRequest: 0 });
  redis.on("error", () => {});
  const reported: string[] = [];
  const [error, warn] = [console.error, console.warn];
  console.error = console.warn = (...a: unknown[]) => void reported.push(a.map(String).join(" "));
  const app = express();
  const limiter = new Limiter(redis, { failure: "fallback", instances: 2, deadlineMs: LONG_DEADLINE_MS });
  app.use(rateLimit({ windowMs: 60_000, limit: 4, standardHeaders: "draft-7", legacyHeaders: false, validate: true, store: new ExpressRateLimitStore({ limiter }) }));
  app.get("/", (_req, res) => void res.send("ok"));
  const http = app.listen(0, "127.0.0.1");
  await new Promise((r) => http.once("listening", r));
  const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/`;
  try {
    const codes: number[] = [];
    for (let i = 0; i < 6; i++) codes.push((await fetch(url)).status);
    assert.deepEqual(codes, [200, 200, 200, 200, 429, 429]);
    await server.stop();
    const down: number[] = [];
    let header = "";
    for (let i = 0; i < 4; i++) {
      const r = await fetch(url);
      down.push(r.status);
      header ||= r.headers.get("ratelimit") ?? "";
    }
    assert.deepEqual(down, [200, 200, 429, 429], "the fallback's share: 2 of 4");
    assert.match(header, /limit=4, remaining=2/, header);
  } finally {
    console.error = error;
    console.warn = warn;
    http.close();
    redis.disconnect();
    await server.close();
  }
  assert.deepEqual(reported.filter((r) => r.includes("ERR_ERL")), [], reported.join("\n"));
});
