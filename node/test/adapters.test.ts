// The ioredis adapter's batching: the commands issued while another is in flight go together as one
// pipeline; each still gets its own reply, an error reply only for its own command.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { Redis as Redis6 } from "ioredis6";
import { Server, LONG_DEADLINE_MS } from "./servers.ts";
import { ioredisAdapter, Limiter, FixedWindow } from "../src/index.ts";
import { RedisErrorReply } from "../src/engine.ts";

let server: Server;
before(async () => {
  server = await Server.start({ module: true });
});
after(async () => {
  await server?.close();
});

for (const [name, make] of [["ioredis 5", (p: number) => new Redis(p, "127.0.0.1")], ["ioredis 6", (p: number) => new Redis6(p, "127.0.0.1")]] as const) {
  test(`${name}: concurrent commands each get their own reply, an error reply only its own`, async () => {
    const client = make(server.port);
    try {
      const a = ioredisAdapter(client);
      const sends = [];
      for (let i = 0; i < 200; i++) {
        sends.push(i % 7 === 3 ? a.send(["NO.SUCH.COMMAND", String(i)], undefined) : a.send(["ECHO", String(i)], undefined));
      }
      const settled = await Promise.allSettled(sends);
      settled.forEach((s, i) => {
        if (i % 7 === 3) {
          assert.equal(s.status, "rejected");
          assert.ok((s as PromiseRejectedResult).reason instanceof RedisErrorReply, String((s as PromiseRejectedResult).reason));
        } else {
          assert.deepEqual(s, { status: "fulfilled", value: String(i) });
        }
      });
      // And alone again once idle.
      assert.equal(await a.send(["ECHO", "alone"], undefined), "alone");
    } finally {
      client.disconnect();
    }
  });

  test(`${name}: a limiter's concurrent checks on one key allow exactly its limit`, async () => {
    const client = make(server.port);
    try {
      const rl = new Limiter(client, { failure: "closed", deadlineMs: LONG_DEADLINE_MS });
      const p = new FixedWindow({ limit: 70, windowMs: 60_000 });
      const k = `rl:{batch-${name.replace(" ", "")}}:k`;
      const ds = await Promise.all(Array.from({ length: 150 }, () => rl.check(k, p)));
      assert.equal(ds.filter((d) => d.allowed).length, 70);
      assert.ok(ds.every((d) => !d.degraded));
    } finally {
      client.disconnect();
    }
  });
}
