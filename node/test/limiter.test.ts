// The limiter on real servers (the module, a stock server with the library through FCALL and through
// EVALSHA), on each client with its default options.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { LONG_DEADLINE_MS, moduleAndStock, type Server } from "./servers.ts";
import { FACTORIES, type Made } from "./clients.ts";
import {
  Limiter, TokenBucket, FixedWindow, SlidingLog, SlidingCounter, Concurrency, ConfigurationError, ConflictError, UsageError, CONTRACT,
  type EngineName,
} from "../src/index.ts";

const servers = moduleAndStock();

const SETUPS: { name: string; server: () => Server; engine: EngineName; expect: string }[] = [
  { name: "module", server: () => servers.module, engine: "auto", expect: "module" },
  { name: "library (auto: FCALL)", server: () => servers.stock, engine: "auto", expect: "fcall" },
  { name: "library (EVALSHA)", server: () => servers.stock, engine: "evalsha", expect: "evalsha" },
];

let n = 0;
const key = (what: string) => `rl:{t${++n}}:${what}`;

for (const f of FACTORIES) {
  for (const s of SETUPS) {
    describe(`${f.name} on ${s.name}`, () => {
      let made: Made;
      let rl: Limiter;
      before(async () => {
        made = await f.make(s.server().port);
        rl = new Limiter(made.client, { failure: "closed", engine: s.engine, deadlineMs: LONG_DEADLINE_MS });
      });
      after(async () => made.close());

      test("verify chooses the engine and says why; `not yet known` before the first decision under auto", async () => {
        if (s.engine === "auto") assert.deepEqual([rl.describe().engine, rl.engine.reports], ["unknown", "not yet known"]);
        const v = await rl.verify();
        assert.equal(v.engine, s.expect, v.why);
      });

      test("a token bucket allows its capacity, then denies with retry-after", async () => {
        const k = key("tb");
        const p = new TokenBucket({ capacity: 3, perSecond: 1 });
        for (let i = 0; i < 3; i++) assert.equal((await rl.check(k, p)).allowed, true);
        const d = await rl.check(k, p);
        assert.equal(d.allowed, false);
        assert.equal(d.degraded, false);
        assert.ok(d.retryAfterMs! > 0 && d.retryAfterMs! <= 1000, String(d.retryAfterMs));
        assert.equal(d.retryAfterSecs(), 1);
        const never = await rl.check(k, p, 4);
        assert.equal(never.neverFits, true);
      });

      test("checkAll: several kinds in one atomic call, the limiting one reported", async () => {
        const a = key("a"), b = key("b"), c = key("c");
        const limits = [
          [a, new FixedWindow({ limit: 5, windowMs: 60_000 }), 1],
          [b, new SlidingLog({ limit: 2, windowMs: 60_000 }), 1],
          [c, new SlidingCounter({ limit: 10, windowMs: 60_000 }), 1],
        ] as const;
        assert.equal((await rl.checkAll(limits)).allowed, true);
        assert.equal((await rl.checkAll(limits)).allowed, true);
        const d = await rl.checkAll(limits);
        assert.equal(d.allowed, false);
        assert.equal(d.limiting, 1);
        const peek = await rl.peek(a, limits[0][1]);
        assert.equal(peek.exists, true);
        assert.equal(peek.remaining, 3, JSON.stringify(peek));
      });

      test("take, refund, reserve and wait", async () => {
        const k = key("take");
        const p = new TokenBucket({ capacity: 10, perSecond: 20 });
        const t = await rl.take(k, p, 25);
        assert.equal(t.taken, 10);
        assert.equal(await rl.refund(k, p, 4), true);
        assert.equal((await rl.take(k, p, 25)).taken, 4);
        const r = await rl.reserve(k, p, 2, 1000);
        assert.equal(r.allowed, true);
        assert.ok(r.retryAfterMs! > 0 && r.retryAfterMs! <= 150, String(r.retryAfterMs));
        const t0 = performance.now();
        const w = await rl.wait([[k, p, 2]], 1000);
        assert.equal(w.allowed, true);
        assert.ok(performance.now() - t0 >= 100);
        const no = await rl.reserve(k, p, 5, 10);
        assert.equal(no.allowed, false);
      });

      test("acquire: a permit with await using, released at the block's end, renewed in the background", async () => {
        const k = key("conc");
        const p = new Concurrency({ limit: 2, leaseMs: 300 });
        {
          await using one = await rl.acquire(k, p);
          await using two = await rl.acquire(k, p);
          assert.equal(one.allowed && two.allowed, true);
          const three = await rl.acquire(k, p);
          assert.equal(three.allowed, false);
          await new Promise((r) => setTimeout(r, 700)); // past two leases: renewed meanwhile
          assert.equal((await rl.acquire(k, p)).allowed, false, "the renewed leases are still held");
        }
        const again = await rl.acquire(k, p, 2);
        assert.equal(again.allowed, true);
        await again.release();
      });

      if (s.engine !== "auto" || s.expect !== "module") {
        test("FUNCTION FLUSH / SCRIPT FLUSH mid-run: loaded again on the node that answered, sent once more", async () => {
          const k = key("flush");
          const p = new TokenBucket({ capacity: 5, perSecond: 1 });
          assert.equal((await rl.check(k, p)).allowed, true);
          await rl.call(["FUNCTION", "FLUSH"]);
          await rl.call(["SCRIPT", "FLUSH"]);
          const d = await rl.check(k, p);
          assert.equal(d.degraded, false, String(d.error));
          assert.equal(d.remaining, 3);
          assert.equal(rl.describe().engine, s.expect);
        });
      }
    });
  }

  test(`${f.name}: the module asked for on a stock server is misconfigured: degraded, logged once, flagged, no outage nor breaker`, async () => {
    const made = await f.make(servers.stock.port);
    try {
      const lines: string[] = [];
      const rl = new Limiter(made.client, { failure: "closed", engine: "module", deadlineMs: LONG_DEADLINE_MS, logger: { error: (l) => lines.push(l) } });
      const outages: unknown[] = [];
      rl.on("outage", (e) => outages.push(e.error));
      for (let i = 0; i < 8; i++) {
        const d = await rl.check(key("cfg"), new TokenBucket({ capacity: 1, perSecond: 1 }));
        assert.equal(d.allowed, false);
        assert.equal(d.degraded, true);
        assert.ok(d.error instanceof ConfigurationError, String(d.error));
      }
      assert.equal(rl.breaker!.isOpen, false, "a misconfiguration is no outage: Redis answered");
      assert.equal(rl.misconfigured, true);
      assert.equal(rl.counters["misconfigured"], 8);
      assert.equal(outages.length, 0);
      assert.equal(lines.length, 1, lines.join("\n"));
      assert.match(lines[0]!, /misconfigured .*unknown command.*load the module/);
      assert.equal(rl.describe().description, "the ratelimit module");
    } finally {
      await made.close();
    }
  });
}

test("a user whose ACL key patterns leave out the limiter's keys: misconfigured, the line says to give it the keys, the engine stays unknown", async () => {
  const { Redis } = await import("ioredis");
  const admin = new Redis(servers.module.port, "127.0.0.1");
  admin.on("error", () => {});
  await admin.call("ACL", "SETUSER", "keyless", "on", ">pw", "+@all", "~other:*");
  const client = new Redis({ port: servers.module.port, host: "127.0.0.1", username: "keyless", password: "pw" });
  client.on("error", () => {});
  try {
    const lines: string[] = [];
    const rl = new Limiter(client, { failure: "closed", deadlineMs: LONG_DEADLINE_MS, logger: { error: (l) => lines.push(l) } });
    const d = await rl.check(key("acl"), new TokenBucket({ capacity: 1, perSecond: 1 }));
    assert.ok(d.degraded && d.error instanceof ConfigurationError, String(d.error));
    assert.match(d.error.message, /^NOPERM/);
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(lines[0]!, /key patterns/);
    assert.equal(rl.describe().engine, "unknown", "the command exists: no other engine is tried");
  } finally {
    client.disconnect();
    await admin.call("ACL", "DELUSER", "keyless");
    admin.disconnect();
  }
});

test("a stock server under auto: the engine settles on FCALL and stays there through Function not found (one load, no return to the module)", async () => {
  const { Redis } = await import("ioredis");
  const client = new Redis(servers.stock.port, "127.0.0.1");
  client.on("error", () => {});
  try {
    const rl = new Limiter(client, { failure: "closed", deadlineMs: LONG_DEADLINE_MS });
    const p = new TokenBucket({ capacity: 1000, perSecond: 1 });
    assert.equal((await rl.check(key("settle"), p)).degraded, false);
    assert.equal(rl.describe().engine, "fcall");
    await rl.call(["FUNCTION", "FLUSH"]);
    await rl.call(["CONFIG", "RESETSTAT"]);
    // 50 calls at once find the library missing: one FUNCTION LOAD, every call decided by FCALL.
    const ds = await Promise.all(Array.from({ length: 50 }, (_, i) => rl.check(key(`settle${i}`), p)));
    assert.ok(ds.every((d) => !d.degraded), String(ds.find((d) => d.degraded)?.error));
    const stats = String(await rl.call(["INFO", "commandstats"]));
    const calls = (name: string) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
    assert.equal(calls("function\\|load"), 1, stats);
    assert.equal(calls("rl.token"), 0, "never back to the module");
    assert.equal(rl.describe().engine, "fcall");
  } finally {
    client.disconnect();
  }
});

describe("refused before sending, and the answers that are not outages", () => {
  let made: Made;
  let rl: Limiter;
  const lines: string[] = [];
  before(async () => {
    made = await FACTORIES[0]!.make(servers.module.port);
    rl = new Limiter(made.client, { failure: "open", deadlineMs: LONG_DEADLINE_MS, logger: { error: (l) => lines.push(l) } });
  });
  after(async () => made.close());
  const p = new TokenBucket({ capacity: 5, perSecond: 1 });

  test("a missing or empty key is a UsageError, not the bucket of key \"\" shared by every anonymous caller", async () => {
    for (const k of [undefined, "", null]) {
      await assert.rejects(rl.check(k as unknown as string, p), (e: unknown) => {
        assert.ok(e instanceof UsageError, String(e));
        assert.deepEqual([e.code, e.message], ["ERR", CONTRACT.errors.render.empty_key]);
        return true;
      });
    }
    assert.equal(String(await rl.call(["EXISTS", ""])), "0", "nothing written under the empty key");
    assert.equal(rl.counters["usage_errors"], 3);
  });

  test("a duplicate key, a cost out of bounds: the module's texts, never degraded", async () => {
    const k = key("dup");
    await assert.rejects(rl.checkAll([[k, p, 1], [k, new FixedWindow({ limit: 3, windowMs: 1000 }), 1]]), { name: "UsageError", message: CONTRACT.errors.duplicate_key });
    await assert.rejects(rl.check(k, p, 2 ** 64), { name: "UsageError", message: "ERR invalid cost: too large" });
    await assert.rejects(rl.check(k, p, 1.5), { name: "UsageError", message: "ERR invalid cost: must be a whole number >= 0" });
    await assert.rejects(rl.check(k, p, -1), { name: "UsageError", code: "ERR" });
    assert.equal(rl.breaker!.isOpen, false);
  });

  test("a key holding another type: a conflict, decided by the failure policy, logged once with the key, counted, no outage", async () => {
    const k = key("taken");
    await rl.call(["SET", k, "not a limiter"]);
    const outages: unknown[] = [];
    rl.on("outage", (e) => outages.push(e));
    const before = lines.length;
    for (let i = 0; i < 6; i++) {
      const d = await rl.check(k, p);
      assert.deepEqual([d.allowed, d.degraded], [true, true]);
      assert.ok(d.error instanceof ConflictError, String(d.error));
    }
    assert.equal(rl.counters["conflicts"], 6);
    assert.equal(outages.length, 0);
    assert.equal(rl.breaker!.isOpen, false, "a conflict is no outage: Redis answered");
    const logged = lines.slice(before);
    assert.equal(logged.length, 1, logged.join("\n"));
    assert.ok(logged[0]!.includes(k) && logged[0]!.includes("To recover"), logged[0]);
  });
});
