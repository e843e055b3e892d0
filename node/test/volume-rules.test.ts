// docs/high-volume.md, "2b. Wait", through the real Limiter on a real server (the module): a check
// lacking units waits for its key's batch call in flight; a decision after a wait is not local; all of
// a check's waits together take at most the limiter's deadline. A batch call is stalled
// deterministically by the limiter's adapter (a real ioredis connection): a command given a delay is
// held before it is written to the socket, as a proxy holding one request would (a held command never
// reaches Redis).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { LONG_DEADLINE_MS, Server } from "./servers.ts";
import { ioredisAdapter, Limiter, TokenBucket, type Adapter, type Decision } from "../src/index.ts";

let server: Server;
const clients: Redis[] = [];
before(async () => {
  server = await Server.start({ module: true });
});
after(async () => {
  for (const c of clients) c.disconnect();
  await server?.close();
});

let n = 0;
const key = (what: string) => `rl:{vr${++n}}:${what}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A limiter on its own connection whose adapter holds the next commands as `delays` says, one entry
 * per command sent: a number of ms (then it is written), "never" (never written; rejected when the
 * test ends), or none left: written at once. */
async function stalling(deadlineMs: number): Promise<{ rl: Limiter; delays: (number | "never")[]; stop: () => void }> {
  const client = new Redis(server.port, "127.0.0.1");
  client.on("error", () => {});
  clients.push(client);
  const real = ioredisAdapter(client);
  const delays: (number | "never")[] = [];
  const never: Array<(e: unknown) => void> = [];
  const adapter: Adapter = {
    name: "stalling",
    cluster: false,
    send: (args, route) => {
      const d = delays.shift();
      if (d === undefined) return real.send(args, route);
      if (d === "never") return new Promise((_, reject) => never.push(reject));
      return sleep(d).then(() => real.send(args, route));
    },
  };
  const rl = new Limiter(adapter, { failure: "closed", engine: "module", breaker: false, logger: false, deadlineMs });
  await rl.verify();
  const stop = () => {
    for (const r of never) r(new Error("test over"));
  };
  return { rl, delays, stop };
}

/** Settles to the decision, or to "pending" while `p` is still in flight. */
const state = (p: Promise<Decision>): Promise<Decision | "pending"> => Promise.race([p, new Promise<"pending">((r) => setImmediate(() => r("pending")))]);

test("a check that waited for its key's batch call in flight is not local; a later check spending held units is", async () => {
  const { rl, delays } = await stalling(LONG_DEADLINE_MS);
  const k = key("waited");
  const p = new TokenBucket({ capacity: 100, perSecond: 0.0001, batch: 8, leaseMs: 60_000 });
  // A first check: a new key asks its cost alone (size 1), the key's state starts.
  assert.equal((await rl.check(k, p)).local, false);
  // The second asks a batch (cost + 1 extra), its call held 300 ms: a batch call in flight.
  delays.push(300);
  const a = rl.check(k, p);
  await sleep(50);
  // This one lacks units and waits for that call, then spends the unit it brought.
  const b = rl.check(k, p);
  assert.equal(await state(b), "pending", "the check waits for the batch call in flight");
  const [da, db] = await Promise.all([a, b]);
  assert.equal(da.allowed, true);
  assert.equal(da.local, false);
  assert.equal(db.allowed, true);
  assert.equal(db.local, false, "a decision after a wait shared a round trip: not local");
  assert.equal(rl.counters["local"], 0, "a waited decision is not counted local");
  // The waited check took the next batch ahead; once it is in, a check spends held units: local.
  for (let i = 0; i < 500 && rl.held(k, p) === 0; i++) await sleep(10);
  assert.ok(rl.held(k, p) > 0, "the batch taken ahead brought units");
  const dc = await rl.check(k, p);
  assert.equal(dc.allowed, true);
  assert.equal(dc.local, true, "a check spending held units is local");
  assert.equal(rl.counters["local"], 1);
  await rl.close();
});

test("all of a check's waits take at most the deadline: it gets its own call's decision while the batch call is still in flight", { timeout: 30_000 }, async () => {
  const deadline = 300;
  const { rl, delays, stop } = await stalling(deadline);
  const k = key("bounded");
  const p = new TokenBucket({ capacity: 10, perSecond: 0.0001, batch: 8, leaseMs: 60_000 });
  try {
    // The key's state starts (9 left); another instance then drains it to 1 left.
    assert.equal((await rl.check(k, p)).remaining, 9);
    const otherClient = new Redis(server.port, "127.0.0.1");
    clients.push(otherClient);
    const other = new Limiter(otherClient, { failure: "closed", deadlineMs: LONG_DEADLINE_MS });
    assert.equal((await other.check(k, new TokenBucket({ capacity: 10, perSecond: 0.0001 }), 8)).remaining, 1);
    await other.close();
    // A asks a batch (1 + 1 extra): its call held 80% of the deadline, then denied (1 left), so it asks
    // again without the extra, a call that never lands (its deadline ends it): the key's batch call stays
    // in flight for about 1.8 deadlines from A's start.
    delays.push(deadline * 0.8, "never");
    const started = performance.now();
    const a = rl.check(k, p);
    await sleep(20);
    // B lacks units: it waits for A's batch call, at most the deadline in all, then asks alone.
    const bStarted = performance.now();
    const b = rl.check(k, p);
    const guard = new Promise<"guard">((r) => setTimeout(() => r("guard"), 30_000).unref());
    const db = await Promise.race([b, guard]);
    const bTook = performance.now() - bStarted;
    assert.notEqual(db, "guard", "B never decided");
    const d = db as Decision;
    assert.equal(await state(a), "pending", `B decided ${Math.round(bTook)} ms after it started (A ${Math.round(performance.now() - started)} ms ago): only once A's batch call landed`);
    assert.equal(d.allowed, true, String(d.error));
    assert.equal(d.degraded, false);
    assert.equal(d.local, false);
    assert.equal(d.remaining, 0, "B's own call, without extras, took the last unit");
    assert.ok(bTook >= deadline - 5, `B asked alone after ${Math.round(bTook)} ms, before its waits' deadline`);
    // A's call never answers: its deadline ends it (degraded, closed).
    const da = await a;
    assert.equal(da.degraded, true);
  } finally {
    stop();
    await rl.close();
  }
});
