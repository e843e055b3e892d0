// Decisions without a round trip (docs/high-volume.md) on real servers: the module, and a stock server
// with the library through FCALL. Several limiters (each its own connection, as app instances) share
// keys; what Redis holds is read with RL.INSPECT, the calls it served with INFO commandstats.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { LONG_DEADLINE_MS, moduleAndStock } from "./servers.ts";
import {
  CONTRACT, Concurrency, FixedWindow, Limiter, PolicyError, RateLimitCore, SlidingCounter, SlidingLog, TokenBucket, type Policy,
} from "../src/index.ts";

const servers = moduleAndStock();

let n = 0;
const key = (what: string) => `rl:{hv${++n}}:${what}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** An app instance: a limiter on a connection of its own. */
async function instance(port: number, opts: { localPrecheck?: boolean } = {}): Promise<{ rl: Limiter; client: Redis }> {
  const client = new Redis(port, "127.0.0.1");
  client.on("error", () => {});
  const rl = new Limiter(client, { failure: "closed", deadlineMs: LONG_DEADLINE_MS, ...opts });
  await rl.verify();
  return { rl, client };
}

const SETUPS = [
  { name: "module", server: () => servers.module, command: "rl\\.token" },
  { name: "library (FCALL)", server: () => servers.stock, command: "fcall" },
];

for (const s of SETUPS) {
  describe(`high volume on ${s.name}`, () => {
    const admin = () => new Redis(s.server().port, "127.0.0.1");
    /** What Redis holds for `k` under `p` now (RL.INSPECT with the policy: the units a request meets). */
    const remaining = async (k: string, p: Policy): Promise<number> => {
      const { rl, client } = await instance(s.server().port);
      try {
        return (await rl.peek(k, p)).remaining!;
      } finally {
        client.disconnect();
      }
    };
    /** How many times Redis ran `command` so far (INFO commandstats). */
    const calls = async (command = s.command): Promise<number> => {
      const c = admin();
      try {
        const stats = String(await c.info("commandstats"));
        return Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
      } finally {
        c.disconnect();
      }
    };

    for (const make of [
      (batch: number) => new TokenBucket({ capacity: 200, perSecond: 0.0001, batch, leaseMs: 60_000 }),
      (batch: number) => new FixedWindow({ limit: 200, windowMs: 600_000, batch, leaseMs: 60_000 }),
      (batch: number) => new SlidingCounter({ limit: 200, windowMs: 600_000, batch, leaseMs: 60_000 }),
    ]) {
      const policy = make(8);
      test(`${policy.kind.name}: three instances on one key, 10 callers at once in each: never above the limit, at most 3 x (batch - 1) idle`, async () => {
        const k = key("shared");
        const apps = await Promise.all([1, 2, 3].map(() => instance(s.server().port)));
        try {
          // Each instance: 10 callers at once, 15 checks each, one after the other.
          const admitted = await Promise.all(apps.map(async ({ rl }) => {
            const ds = (await Promise.all(Array.from({ length: 10 }, async () => {
              const mine = [];
              for (let i = 0; i < 15; i++) mine.push(await rl.check(k, policy));
              return mine;
            }))).flat();
            assert.ok(ds.every((d) => !d.degraded), String(ds.find((d) => d.degraded)?.error));
            return ds.filter((d) => d.allowed).length;
          }));
          const total = admitted.reduce((a, b) => a + b, 0);
          const held = apps.map(({ rl }) => rl.held(k, policy));
          assert.ok(total <= 200, `admitted ${total}`);
          for (const h of held) assert.ok(h <= 7, `an instance holds ${h} > batch - 1`);
          // Every unit Redis granted was admitted or is held: none twice, none lost.
          const left = await remaining(k, policy);
          assert.equal(200 - left, total + held.reduce((a, b) => a + b, 0), `admitted ${admitted}, held ${held}, Redis has ${left}`);
          assert.ok(total >= 200 - 3 * 7, `admitted ${total}: only the idle units may be missing`);
          await Promise.all(apps.map(({ rl }) => rl.close()));
          assert.equal(await remaining(k, policy), 200 - total, "closed: every held unit back");
        } finally {
          for (const { client } of apps) client.disconnect();
        }
      });
    }

    test("a limiter closed cleanly gives its units back; one dropped without close loses at most batch - 1", async () => {
      const p = new TokenBucket({ capacity: 100, perSecond: 0.0001, batch: 16, leaseMs: 60_000 });
      for (const clean of [true, false]) {
        const k = key(clean ? "closed" : "dropped");
        const { rl, client } = await instance(s.server().port);
        for (let i = 0; i < 20; i++) assert.equal((await rl.check(k, p)).allowed, true);
        const held = rl.held(k, p);
        assert.ok(held > 0 && held <= 15, `held ${held}`);
        assert.equal(await remaining(k, p), 100 - 20 - held);
        if (clean) {
          assert.equal(await rl.close(), held);
          assert.equal(rl.held(k, p), 0);
          assert.equal(await remaining(k, p), 100 - 20, "the held units are back");
        } else {
          client.disconnect();
          assert.equal(await remaining(k, p), 100 - 20 - held, `lost ${held} <= batch - 1`);
        }
        client.disconnect();
      }
    });

    test("close while checks are in flight: the units their calls bring are given back too", async () => {
      const p = new TokenBucket({ capacity: 1000, perSecond: 0.0001, batch: 16, leaseMs: 60_000 });
      const k = key("closing");
      const { rl, client } = await instance(s.server().port);
      try {
        for (let i = 0; i < 20; i++) await rl.check(k, p); // hot: the next call asks extras
        const checks = Array.from({ length: 50 }, () => rl.check(k, p));
        const closed = rl.close();
        const ds = await Promise.all(checks);
        await closed;
        assert.ok(ds.every((d) => d.allowed && !d.degraded));
        assert.equal(rl.held(k, p), 0);
        assert.equal(await remaining(k, p), 1000 - 20 - 50, "every unit not admitted is back");
      } finally {
        client.disconnect();
      }
    });

    test("adaptive: a hot key's 1,000 checks cost about 1,000 / batch calls; a quiet key one call per check", async () => {
      const hot = new TokenBucket({ capacity: 100_000, perSecond: 1, batch: 16, leaseMs: 60_000 });
      const { rl, client } = await instance(s.server().port);
      try {
        const k = key("hot");
        const before = await calls();
        let local = 0;
        for (let i = 0; i < 1000; i++) {
          const d = await rl.check(k, hot);
          assert.equal(d.allowed, true);
          if (d.local) local++;
        }
        const used = (await calls()) - before;
        // Once hot, each call (a batch taken ahead when a quarter of the batch is left) brings at least
        // 16 - 16 / ahead units.
        const perCall = 16 - 16 / CONTRACT.batching.ahead;
        assert.ok(used <= 1000 / perCall + Math.log2(16) + 3, `${used} calls for 1,000 checks`);
        assert.equal(rl.counters["local"], local);
        // Not local: the checks that called, and those that waited for a batch taken ahead (one at
        // most per such call here, the checks running one after the other).
        assert.ok(local >= 1000 - 2 * used, `${local} local`);
        // A quiet key: each check after the last one's lease ended takes its cost only.
        const quiet = new TokenBucket({ capacity: 100, perSecond: 1, batch: 16, leaseMs: 20 });
        const q = key("quiet");
        const was = await calls();
        for (let i = 0; i < 4; i++) {
          assert.equal((await rl.check(q, quiet)).local, false);
          assert.equal(rl.held(q, quiet), 0, "nothing held");
          await sleep(30);
        }
        assert.equal((await calls()) - was, 4);
      } finally {
        await rl.close();
        client.disconnect();
      }
    });

    test("the pre-check: a denied client hammering costs no round trip until the retry_after Redis gave, then Redis decides", async () => {
      const p = new TokenBucket({ capacity: 1, perSecond: 2 });
      const { rl, client } = await instance(s.server().port, { localPrecheck: true });
      try {
        const k = key("hammer");
        assert.equal((await rl.check(k, p)).allowed, true);
        const denied = await rl.check(k, p);
        assert.equal(denied.allowed, false);
        assert.equal(denied.local, false, "Redis denied it");
        const before = await calls();
        const started = performance.now();
        const ds = await Promise.all(Array.from({ length: 200 }, () => rl.check(k, p)));
        const asked = (await calls()) - before;
        // Only checks made after the retry_after (a loaded machine's slow turn) may have gone to Redis.
        assert.ok(ds.every((d) => !d.allowed));
        assert.ok(asked <= ds.filter((d) => !d.local).length);
        if (performance.now() - started < denied.retryAfterMs!) assert.equal(asked, 0, "every denial was local");
        assert.ok(ds.every((d) => d.retryAfterMs! <= denied.retryAfterMs!), "never longer than Redis said");
        assert.ok(rl.counters["local"]! >= ds.filter((d) => d.local).length);
        // A cheaper request may fit: it goes to Redis.
        const peek = await rl.check(k, p, 0);
        assert.equal(peek.local, false);
        // Past the retry_after, the same request goes to Redis, which allows it.
        await sleep(denied.retryAfterMs! + 5);
        const after = await rl.check(k, p);
        assert.equal(after.local, false);
        assert.equal(after.allowed, true);
      } finally {
        client.disconnect();
      }
    });

    test("the HTTP layer: a route's batched policy and the limiter's pre-check decide locally", async () => {
      const { rl, client } = await instance(s.server().port, { localPrecheck: true });
      try {
        const core = new RateLimitCore({
          limiter: rl,
          prefix: `rl-hv${++n}`,
          routes: [{ name: "api", prefix: "/api", policy: new TokenBucket({ capacity: 40, perSecond: 0.0001, batch: 8, leaseMs: 60_000 }) }],
        });
        const req = { method: "GET", path: "/api/x", peer: "10.0.0.1", headers: [], raw: {} };
        const before = await calls();
        const outcomes = [];
        for (let i = 0; i < 60; i++) outcomes.push(await core.handle(req));
        const served = outcomes.filter((o) => o.kind === "served").length;
        assert.ok(served <= 40 && served >= 40 - 7, `served ${served}`);
        const used = (await calls()) - before;
        assert.ok(used < 30, `${used} calls for 60 requests`);
        assert.ok(rl.counters["local"]! >= 60 - used, `${rl.counters["local"]} local`);
      } finally {
        await rl.close();
        client.disconnect();
      }
    });
  });
}

test("batching is refused where a kind takes no refunds, and outside 1..limit", () => {
  const refused = (field: string, reason: RegExp) => (e: unknown) => e instanceof PolicyError && e.field === field && reason.test(e.reason);
  assert.throws(() => new SlidingLog({ limit: 10, windowMs: 1000, batch: 2 }), refused("batch", /^a sliding_log cannot batch: it takes no refunds$/));
  assert.throws(() => new Concurrency({ limit: 10, leaseMs: 1000, batch: 2 }), refused("batch", /^a concurrency cannot batch/));
  for (const batch of [0, 11, 1.5, -1]) {
    assert.throws(() => new TokenBucket({ capacity: 10, perSecond: 1, batch }), refused("batch", /from 1 to the policy's limit/), String(batch));
  }
  assert.throws(() => new FixedWindow({ limit: 10, windowMs: 1000, batch: 2, leaseMs: 0 }), refused("lease", /at least 1 ms/));
  assert.equal(new SlidingCounter({ limit: 10, windowMs: 1000, batch: 10 }).batching?.batch, 10);
});
