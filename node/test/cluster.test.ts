// A 3-primary cluster with the module: each command goes to its key's node (no MOVED redirect, shown
// by every node's INFO errorstats), on the module and on the library through FCALL (loaded on the node
// that answered "Function not found": every primary in turn).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { ClusterServers, REDIS, LONG_DEADLINE_MS } from "./servers.ts";
import { FACTORIES } from "./clients.ts";
import { Limiter, TokenBucket, FixedWindow, Concurrency, UsageError, CONTRACT, slotOf, type EngineName } from "../src/index.ts";

let cluster: ClusterServers;
/** A stock cluster: no module, the library not loaded. */
let stock: ClusterServers;
before(async () => {
  cluster = await ClusterServers.start(3, { module: true });
  stock = await ClusterServers.start(3, { module: false });
});
after(async () => {
  await cluster?.close();
  await stock?.close();
});

const cli = REDIS.replace(/redis-server$/, "redis-cli");
const loads = (port: number) => Number(/cmdstat_function\|load:calls=(\d+)/.exec(redisCli(port, "INFO", "commandstats"))?.[1] ?? 0);
const redisCli = (port: number, ...args: string[]) => execFileSync(cli, ["-p", String(port), ...args]).toString();

/** Each node cold: no library, no cached script, its command counts from zero. */
function cold(nodes: readonly { port: number }[]): void {
  for (const s of nodes) {
    redisCli(s.port, "FUNCTION", "FLUSH");
    redisCli(s.port, "SCRIPT", "FLUSH");
    redisCli(s.port, "CONFIG", "RESETSTAT");
  }
}

function moved(): number {
  let total = 0;
  for (const s of cluster.nodes) {
    const m = /errorstat_MOVED:count=(\d+)/.exec(redisCli(s.port, "INFO", "errorstats"));
    total += m ? Number(m[1]) : 0;
  }
  return total;
}

for (const f of FACTORIES) {
  for (const engine of ["module", "functions", "scripts"] as EngineName[]) {
    test(`${f.name} cluster, ${engine}: every call on its key's node, no MOVED`, async () => {
      cold(cluster.nodes);
      const made = await f.cluster(cluster.nodes[0]!.port);
      try {
        const rl = new Limiter(made.client, { failure: "closed", engine, deadlineMs: LONG_DEADLINE_MS });
        const tb = new TokenBucket({ capacity: 2, perSecond: 0.001 });
        const fw = new FixedWindow({ limit: 5, windowMs: 60_000 });
        const conc = new Concurrency({ limit: 1, leaseMs: 10_000 });
        for (let i = 0; i < 60; i++) {
          const k = `rl:{${f.name}-${engine}-${i}}`;
          const a = await rl.check(`${k}:tb`, tb);
          assert.equal(a.degraded, false, String(a.error));
          const b = await rl.checkAll([[`${k}:tb`, tb, 1], [`${k}:fw`, fw, 1]]);
          assert.equal(b.allowed, true);
          assert.equal((await rl.check(`${k}:tb`, tb)).allowed, false);
          const permit = await rl.acquire(`${k}:c`, conc, 1, { renew: false });
          assert.equal(permit.allowed, true);
          await permit.release();
          assert.equal((await rl.peek(`${k}:fw`, fw)).remaining, 4);
        }
        assert.equal(moved(), 0, "MOVED redirects");
      } finally {
        await made.close();
      }
    });
  }
}

for (const f of FACTORIES) {
  test(`${f.name} cluster: keys of one call in different hash slots are refused before sending (CROSSSLOT), never degraded`, async () => {
    const made = await f.cluster(cluster.nodes[0]!.port);
    try {
      const rl = new Limiter(made.client, { failure: "open", deadlineMs: LONG_DEADLINE_MS });
      const tb = new TokenBucket({ capacity: 2, perSecond: 1 });
      let a = "rl:{a}:x", b = "rl:{b}:x";
      assert.notEqual(slotOf(a), slotOf(b));
      await assert.rejects(rl.checkAll([[a, tb, 1], [b, tb, 1]]), (e: unknown) => {
        assert.ok(e instanceof UsageError, String(e));
        assert.deepEqual([e.code, e.message], ["CROSSSLOT", CONTRACT.errors.render.cross_slot]);
        return true;
      });
      await assert.rejects(rl.acquire([[a, tb, 1], [b, new Concurrency({ limit: 1, leaseMs: 1000 }), 1]]), { name: "UsageError", code: "CROSSSLOT" });
      assert.equal(rl.counters["usage_errors"], 2);
      a = "rl:{same}:x";
      b = "rl:{same}:y";
      assert.equal((await rl.checkAll([[a, tb, 1], [b, tb, 1]])).degraded, false);
    } finally {
      await made.close();
    }
  });
}

for (const f of FACTORIES) {
  for (const engine of ["module", "fcall"] as EngineName[]) {
    test(`${f.name} cluster, ${engine}: a hold and its settle on the tag's node (the default ledger shares its slot), no MOVED; a ledger in another slot refused before sending`, async () => {
      const made = await f.cluster(cluster.nodes[0]!.port);
      try {
        const rl = new Limiter(made.client, { failure: "open", engine, deadlineMs: LONG_DEADLINE_MS });
        const tpm = new FixedWindow({ limit: 1000, windowMs: 60_000 });
        const before = moved();
        const tags = Array.from({ length: 30 }, (_, i) => `hold-${f.name}-${engine}-${i}`);
        assert.equal(new Set(tags.map((t) => Math.floor(slotOf(t) / 5462))).size, 3, "tags over the three slot thirds");
        for (const t of tags) {
          const h = await rl.hold([[`rl:{${t}}:rpm`, tpm, 1, "exact"], [`rl:{${t}}:tpm`, tpm, 500]]);
          assert.deepEqual([h.allowed, h.local], [true, false], String(h.decision.error));
          assert.equal(await h.add(100), false);
          assert.ok(await h.settle(200));
          assert.equal((await rl.peek(`rl:{${t}}:tpm`, tpm)).remaining, 800);
        }
        assert.equal(moved() - before, 0, "MOVED redirects");
        const [a, b] = ["rl:{a}:tpm", "rl:holds:{b}"];
        assert.notEqual(slotOf(a), slotOf(b));
        await assert.rejects(rl.hold([[a, tpm, 1]], { ledger: b }), { name: "UsageError", code: "CROSSSLOT" });
      } finally {
        await made.close();
      }
    });
  }
}

for (const f of FACTORIES) {
  test(`${f.name} cluster, FCALL, cold: 90 calls at once find the library missing; one FUNCTION LOAD per node, every call decided`, async () => {
    cold(cluster.nodes);
    const made = await f.cluster(cluster.nodes[0]!.port);
    try {
      const rl = new Limiter(made.client, { failure: "closed", engine: "fcall", deadlineMs: LONG_DEADLINE_MS });
      const tb = new TokenBucket({ capacity: 2, perSecond: 1 });
      const ds = await Promise.all(Array.from({ length: 90 }, (_, i) => rl.check(`rl:{cold-${f.name}-${i}}:tb`, tb)));
      assert.ok(ds.every((d) => !d.degraded), String(ds.find((d) => d.degraded)?.error));
      for (const s of cluster.nodes) assert.equal(loads(s.port), 1, `FUNCTION LOAD on ${s.port}`);
    } finally {
      await made.close();
    }
  });
}

for (const f of FACTORIES) {
  test(`${f.name} stock cluster, engine auto, cold: 120 calls at once over every slot range, each exact, at most one FUNCTION LOAD per node`, async () => {
    cold(stock.nodes);
    const made = await f.cluster(stock.nodes[0]!.port);
    try {
      const rl = new Limiter(made.client, { failure: "closed", deadlineMs: LONG_DEADLINE_MS });
      assert.equal(rl.describe().description, "not yet known");
      const tb = new TokenBucket({ capacity: 2, perSecond: 0.001 });
      // 40 keys, three checks each: the bucket allows two (remaining 1, then 0) and denies the third.
      const keys = Array.from({ length: 40 }, (_, i) => `rl:{stock-${f.name}-${i}}:tb`);
      const slots = new Set(keys.map((k) => Math.floor(slotOf(k) / 5462)));
      assert.equal(slots.size, 3, "keys spread over the three slot thirds");
      const ds = await Promise.all(keys.flatMap((k) => [0, 1, 2].map(() => rl.check(k, tb).then((d) => [k, d] as const))));
      assert.equal(ds.length, 120);
      assert.ok(ds.every(([, d]) => !d.degraded), String(ds.find(([, d]) => d.degraded)?.[1].error));
      for (const k of keys) {
        const mine = ds.filter(([kk]) => kk === k).map(([, d]) => [d.allowed, d.remaining] as const);
        mine.sort((a, b) => b[1] - a[1] || Number(b[0]) - Number(a[0]));
        assert.deepEqual(mine, [[true, 1], [true, 0], [false, 0]], k);
      }
      for (const s of stock.nodes) assert.ok(loads(s.port) <= 1, `FUNCTION LOAD on ${s.port}: ${loads(s.port)}`);
      assert.equal(rl.describe().description, "the Lua library through FCALL");
    } finally {
      await made.close();
    }
  });
}
