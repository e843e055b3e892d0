// Sentinel: a primary and a replica (the module on both) watched by three sentinels, on free loopback
// ports; ioredis 5 and 6 with `sentinels` and node-redis 5's Sentinel client (createSentinel), each with
// its default options. One SENTINEL FAILOVER while every client keeps calling: each call decides within
// the deadline (degraded while no primary answers), then calls go on against the new primary (its
// CLIENT LIST shows them) with the counts the old one replicated.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { Redis as Redis6 } from "ioredis6";
import { createSentinel } from "redis";
import { Sentinels, SERVICE, ask, until } from "./servers.ts";
import { Limiter, FixedWindow, type Decision } from "../src/index.ts";

const DEADLINE = 100;
const SLACK = 50; // timers and the event loop, on a shared machine

let topology: Sentinels;
const clients: { name: string; client: unknown; close(): Promise<void> }[] = [];
before(async () => {
  topology = await Sentinels.start();
  const sentinels = topology.sentinels.map((s) => ({ host: "127.0.0.1", port: s.port }));
  for (const [name, make] of [["ioredis 5", () => new Redis({ sentinels, name: SERVICE })], ["ioredis 6", () => new Redis6({ sentinels, name: SERVICE })]] as const) {
    const c = make();
    c.on("error", () => {});
    clients.push({ name, client: c, close: async () => void c.disconnect() });
  }
  const nr = createSentinel({ name: SERVICE, sentinelRootNodes: sentinels });
  nr.on("error", () => {});
  await nr.connect();
  clients.push({ name: "node-redis 5 (createSentinel)", client: nr, close: async () => void (await nr.destroy().catch(() => {})) });
});
after(async () => {
  for (const c of clients) await c.close();
  await topology?.close();
});

const offset = async (port: number, field: string) => Number(new RegExp(`${field}:(\\d+)`).exec(await ask(port, "INFO", "replication"))?.[1] ?? -1);

test("SENTINEL FAILOVER: every call within the deadline, then on the new primary with the replicated counts", async () => {
  const window = new FixedWindow({ limit: 1000, windowMs: 600_000 });
  const limiters = clients.map((c) => ({ name: c.name, rl: new Limiter(c.client, { failure: "open", deadlineMs: DEADLINE }) }));
  for (const { name, rl } of limiters) {
    assert.equal((await rl.verify()).engine, "module", name);
    for (let i = 0; i < 5; i++) assert.equal((await rl.check(`rl:{s}:${name}`, window)).degraded, false, name);
  }
  const old = await topology.primaryPort();
  const replica = topology.nodes.find((n) => n.port !== old)!;
  await until("the replica to have every write", async () => (await offset(replica.port, "slave_repl_offset")) === (await offset(old, "master_repl_offset")));

  let running = true;
  const seen = limiters.map(() => ({ calls: 0, degraded: 0, worst: 0 }));
  const loops = limiters.map(async ({ name, rl }, i) => {
    while (running) {
      const t0 = performance.now();
      const d: Decision = await rl.check(`rl:{during}:${name}`, window);
      const ms = performance.now() - t0;
      seen[i]!.calls++;
      if (d.degraded) seen[i]!.degraded++;
      seen[i]!.worst = Math.max(seen[i]!.worst, ms);
      await new Promise((r) => setTimeout(r, 5));
    }
  });
  try {
    assert.equal(await ask(topology.sentinels[0]!.port, "SENTINEL", "FAILOVER", SERVICE), "OK");
    await until("the sentinels to name a new primary", async () => (await topology.primaryPort()) !== old, 15_000);
    const now = await topology.primaryPort();
    assert.equal(now, replica.port);
    await until("the new primary to be a primary", async () => (await ask(now, "INFO", "replication")).includes("role:master"));
    // The sentinels turn the old primary into a replica (and kill its clients' connections).
    await until("the old primary to be a replica", async () => (await ask(old, "INFO", "replication")).includes("role:slave"), 20_000);
    // Each client reaches the new primary: decisions by Redis again.
    for (const { name, rl } of limiters) {
      await until(`${name} deciding on the new primary`, async () => !(await rl.check(`rl:{after}:${name}`, window)).degraded, 15_000);
    }
  } finally {
    running = false;
    await Promise.all(loops);
  }
  for (const [i, { name }] of limiters.entries()) {
    const s = seen[i]!;
    assert.ok(s.calls > 0, name);
    assert.ok(s.worst < DEADLINE + SLACK, `${name}: the slowest of ${s.calls} calls during the failover took ${s.worst.toFixed(1)} ms (${s.degraded} degraded)`);
  }
  const now = await topology.primaryPort();
  for (const { name, rl } of limiters) {
    const d = await rl.check(`rl:{s}:${name}`, window);
    assert.equal(d.degraded, false, name);
    assert.equal(d.remaining, 1000 - 6, `${name}: the count the old primary replicated goes on`);
  }
  // The calls just made were the new primary's: each client's connection there last ran RL.FIXED.
  const list = (await ask(now, "CLIENT", "LIST")).split("\n").filter((l) => l.includes("cmd=rl.fixed") && !/flags=\S*M/.test(l));
  assert.ok(list.length >= limiters.length, await ask(now, "CLIENT", "LIST"));
});
