// The `fallback` failure policy against a real server that stops: while Redis cannot decide, each
// instance limits with its share (limit / instances) in process, every kind, all or nothing; degraded
// decisions with real counts; leases held, renewed and released locally; Redis decides again when it is back.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Server } from "./servers.ts";
import { FACTORIES } from "./clients.ts";
import {
  Limiter, TokenBucket, FixedWindow, SlidingCounter, SlidingLog, Concurrency, LocalLimiter, UsageError,
  UnreachableError, DeadlineError, BreakerOpenError, type Decision,
} from "../src/index.ts";

const DEADLINE = 100;

test("fallback needs instances; instances belongs to fallback", () => {
  assert.throws(() => new Limiter({ send: async () => null, name: "x", cluster: false }, { failure: "fallback" }), UsageError);
  assert.throws(() => new Limiter({ send: async () => null, name: "x", cluster: false }, { failure: "fallback", instances: 0 }), UsageError);
  assert.throws(() => new Limiter({ send: async () => null, name: "x", cluster: false }, { failure: "open", instances: 2 }), UsageError);
  assert.throws(() => new LocalLimiter(1.5), UsageError);
});

test("every rate kind is one token bucket of its limit per period at the share (a token bucket is itself)", () => {
  const t0 = 1_700_000_000_000_000_000n;
  const sec = 1_000_000_000n;
  for (const p of [new FixedWindow({ limit: 10, windowMs: 1000 }), new SlidingCounter({ limit: 10, windowMs: 1000 }), new SlidingLog({ limit: 10, windowMs: 1000 })]) {
    const local = new LocalLimiter(3);
    const check = (at: bigint) => local.decide([["k", p, 1]], at);
    const burst = [0, 1, 2, 3, 4].map(() => check(t0));
    assert.deepEqual(burst.map((d) => d.allowed), [true, true, true, false, false], `${p}: the share of 10 on one of 3`);
    assert.deepEqual([burst[4]!.limit, burst[4]!.retryAfterMs], [3, 300], `${p}: one back every 300 ms`);
    // In the second after the burst, 3 more: the share plus limit / instances in the period.
    const later = [1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n, 10n].map((k) => check(t0 + (k * sec) / 10n).allowed);
    assert.deepEqual(later, [false, false, true, false, false, true, false, false, true, false], String(p));
  }
});

test("a stopped server: a fixed window and a sliding log are one bucket each at the share, refilled over the window", async () => {
  const server = await Server.start({ module: true });
  const made = await FACTORIES.find((f) => f.name === "ioredis 5")!.make(server.port);
  try {
    const rl = new Limiter(made.client, { failure: "fallback", instances: 2, deadlineMs: DEADLINE });
    await server.stop();
    // 4 per 2 s on one of 2 instances: 2 at once, then one a second.
    for (const p of [new FixedWindow({ limit: 4, windowMs: 2000 }), new SlidingLog({ limit: 4, windowMs: 2000 })]) {
      const key = `rl:{f}:${p.kind.name}`;
      const t0 = performance.now();
      const burst: Decision[] = [];
      for (let i = 0; i < 5; i++) burst.push(await rl.check(key, p));
      const took = performance.now() - t0;
      const allowed = burst.filter((d) => d.allowed).length;
      assert.ok(allowed >= 2 && allowed <= 2 + Math.floor(took / 1000), `${p}: ${allowed} in ${took} ms, want the share, plus one a second`);
      assert.ok(burst.every((d) => d.degraded && d.limit === 2));
      const denied = burst.find((d) => !d.allowed)!;
      assert.ok(denied.retryAfterMs! > 0 && denied.retryAfterMs! <= 1000, `${p}: ${denied.retryAfterMs} ms`);
      await new Promise((r) => setTimeout(r, denied.retryAfterMs! + 2)); // a timer may fire up to a ms early
      assert.equal((await rl.check(key, p)).allowed, true, `${p}: one back after retryAfterMs`);
    }
  } finally {
    await made.close();
    await server.close();
  }
});

for (const f of FACTORIES.filter((f) => f.name === "ioredis 5" || f.name === "node-redis 5")) {
  test(`${f.name}: a stopped server, fallback at 1 of 2 instances: the share of every kind, then Redis again`, async () => {
    const server = await Server.start({ module: true });
    const made = await f.make(server.port);
    try {
      const rl = new Limiter(made.client, { failure: "fallback", instances: 2, deadlineMs: DEADLINE, breaker: { failures: 3, cooldownMs: 200 } });
      const bucket = new TokenBucket({ capacity: 10, perSecond: 1 });
      const window = new FixedWindow({ limit: 6, windowMs: 60_000 });
      const counter = new SlidingCounter({ limit: 8, windowMs: 60_000 });
      const log = new SlidingLog({ limit: 4, windowMs: 60_000 });
      const conc = new Concurrency({ limit: 4, leaseMs: 10_000 });
      assert.equal((await rl.check("rl:{f}:b", bucket)).degraded, false, "Redis decides first");
      const degraded: Decision[] = [];
      rl.on("degraded", ({ decision }) => degraded.push(decision));
      await server.stop();

      const t0 = performance.now();
      const b = [];
      for (let i = 0; i < 6; i++) b.push(await rl.check("rl:{f}:b", bucket));
      assert.deepEqual(b.map((d) => d.allowed), [true, true, true, true, true, false], "5 of capacity 10");
      assert.ok(b.every((d) => d.degraded && d.limit === 5));
      assert.ok(b[0]!.error instanceof UnreachableError || b[0]!.error instanceof DeadlineError, String(b[0]!.error));
      assert.ok(b[5]!.error instanceof BreakerOpenError, String(b[5]!.error));
      assert.deepEqual(b.slice(0, 5).map((d) => d.remaining), [4, 3, 2, 1, 0]);
      const spent = performance.now() - t0;
      assert.ok(b[5]!.retryAfterMs! >= 2000 - spent - 5 && b[5]!.retryAfterMs! <= 2000, `one token at half the rate: ${b[5]!.retryAfterMs} after ${spent} ms`);

      const count = async (key: string, p: FixedWindow | SlidingCounter | SlidingLog, n: number) => {
        let allowed = 0;
        for (let i = 0; i < n; i++) allowed += Number((await rl.check(key, p)).allowed);
        return allowed;
      };
      assert.equal(await count("rl:{f}:w", window, 5), 3, "fixed window: 3 of 6");
      assert.equal(await count("rl:{f}:c", counter, 6), 4, "sliding counter: 4 of 8");
      assert.equal(await count("rl:{f}:l", log, 4), 2, "sliding log (as a counter): 2 of 4");

      // All or nothing: the window is spent, so the bucket is not taken from.
      const both = await rl.checkAll([["rl:{f}:b2", bucket, 1], ["rl:{f}:w", window, 1]]);
      assert.equal(both.allowed, false);
      assert.equal(both.limiting, 1);
      assert.equal((await rl.check("rl:{f}:b2", bucket, 0)).remaining, 5, "the denial took nothing");

      // take, refund.
      const t = await rl.take("rl:{f}:t", bucket, 3);
      assert.deepEqual([t.taken, t.decision.remaining, t.decision.degraded], [3, 2, true]);
      const t2 = await rl.take("rl:{f}:t", bucket, 100);
      assert.equal(t2.taken, 2, `${JSON.stringify(t2)} ${t2.decision.error}`);
      assert.equal(await rl.refund("rl:{f}:t", bucket, 2), false, "Redis did not take it");
      assert.equal((await rl.take("rl:{f}:t", bucket, 100)).taken, 2, "given back in process");

      // Leases: 2 of 4, released and renewed locally.
      const p1 = await rl.acquire("rl:{f}:k", conc);
      const p2 = await rl.acquire("rl:{f}:k", conc);
      const p3 = await rl.acquire("rl:{f}:k", conc);
      assert.deepEqual([p1.allowed, p2.allowed, p3.allowed], [true, true, false]);
      assert.ok(p3.decision.retryAfterMs! > 9000);
      assert.equal(await p1.renew(), true);
      await p1.release();
      assert.equal((await rl.acquire("rl:{f}:k", conc)).allowed, true, "p1's slot is free");
      await p2.release();
      const worst = performance.now() - t0;

      assert.ok(degraded.length >= 30 && degraded.every((d) => d.degraded));
      await server.run();
      let d: Decision | undefined;
      for (let i = 0; i < 100; i++) {
        d = await rl.check("rl:{f}:b", bucket);
        if (!d.degraded) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(d!.degraded, false, `still degraded: ${d!.error}`);
      assert.equal(d!.limit, 10, "Redis decides with the whole limit");
      console.log(`${f.name} fallback: ${degraded.length} degraded decisions in ${worst.toFixed(0)} ms, local keys ${rl.local!.size}`);
    } finally {
      await made.close();
      await server.close();
    }
  });
}
