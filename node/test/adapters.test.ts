// The ioredis adapter's batching: the commands issued while another is in flight go together as one
// pipeline; each still gets its own reply, an error reply only for its own command. The node-redis
// adapter keeps a client without an 'error' listener from ending the process on a reset connection.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { Redis as Redis6 } from "ioredis6";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Server, LONG_DEADLINE_MS, until } from "./servers.ts";
import { ioredisAdapter, Limiter, FixedWindow } from "../src/index.ts";
import { RedisErrorReply } from "../src/engine.ts";

const HERE = dirname(fileURLToPath(import.meta.url));

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

for (const which of ["redis", "redis4"]) {
  test(`node-redis ${which === "redis4" ? 4 : 5} with no 'error' listener of its own: the process survives its server killed under it`, async () => {
    const own = await Server.start({ module: true });
    const child = spawn(process.execPath, ["--import", "tsx", join(HERE, "fixtures", "no-error-listener.ts"), which, String(own.port)], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const exited = new Promise<number | null>((ok) => child.once("exit", ok));
    try {
      await until("the child's first decision", () => out.includes("ready") || child.exitCode !== null, 20_000);
      assert.match(out, /ready/, err);
      await own.stop(); // SIGKILL: the client's connection is reset
      child.stdin.write("go\n");
      const code = await exited;
      assert.equal(code, 0, `the process ended: ${err}`);
      assert.match(out, /survived/, err);
    } finally {
      child.kill("SIGKILL");
      await own.close();
    }
  });
}
