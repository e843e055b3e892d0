// Redis 6.2 (no FUNCTION): the library through EVALSHA, chosen by `auto`, on each client with its
// default options; SCRIPT FLUSH mid-run (the script loaded again on the node that answered NOSCRIPT).
// The server is RL_REDIS62_SERVER (`scripts/servers.sh redis-6.2` builds one); skipped when unset.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { Server, ask, LONG_DEADLINE_MS } from "./servers.ts";
import { FACTORIES, type Made } from "./clients.ts";
import { Limiter, TokenBucket, FixedWindow, SlidingLog, Concurrency } from "../src/index.ts";

const BINARY = process.env["RL_REDIS62_SERVER"];
const skip = !BINARY ? "RL_REDIS62_SERVER is unset (scripts/servers.sh redis-6.2 builds a Redis 6.2)" : !existsSync(BINARY) ? `RL_REDIS62_SERVER=${BINARY} does not exist` : false;

let server: Server;
before(async () => {
  if (!skip) server = await Server.start({ binary: BINARY! });
});
after(async () => server?.close());

let n = 0;
for (const f of FACTORIES) {
  describe(`${f.name} on Redis 6.2`, { skip }, () => {
    let made: Made;
    let rl: Limiter;
    before(async () => {
      made = await f.make(server.port);
      rl = new Limiter(made.client, { failure: "closed", deadlineMs: LONG_DEADLINE_MS });
    });
    after(async () => made?.close());

    test("auto chooses EVALSHA; decisions, several kinds in one call, a permit; SCRIPT FLUSH mid-run", async () => {
      assert.match(await ask(server.port, "INFO", "server"), /redis_version:6\.2\./);
      const v = await rl.verify();
      assert.equal(v.engine, "evalsha", v.why);
      const k = `rl:{r62-${++n}}`;
      const bucket = new TokenBucket({ capacity: 2, perSecond: 1 });
      assert.equal((await rl.check(`${k}:tb`, bucket)).allowed, true);
      assert.equal((await rl.check(`${k}:tb`, bucket)).allowed, true);
      const denied = await rl.check(`${k}:tb`, bucket);
      assert.equal(denied.allowed, false);
      assert.equal(denied.degraded, false);
      const all = await rl.checkAll([[`${k}:fw`, new FixedWindow({ limit: 5, windowMs: 60_000 }), 1], [`${k}:log`, new SlidingLog({ limit: 1, windowMs: 60_000 }), 1]]);
      assert.equal(all.allowed, true);
      const again = await rl.checkAll([[`${k}:fw`, new FixedWindow({ limit: 5, windowMs: 60_000 }), 1], [`${k}:log`, new SlidingLog({ limit: 1, windowMs: 60_000 }), 1]]);
      assert.equal(again.allowed, false);
      assert.equal(again.limiting, 1);
      assert.equal(await ask(server.port, "SCRIPT", "FLUSH"), "OK");
      const after = await rl.check(`${k}:fw`, new FixedWindow({ limit: 5, windowMs: 60_000 }));
      assert.equal(after.degraded, false, String(after.error));
      assert.equal(after.remaining, 3, "the count survives the flush: one taken before, the denied pair took nothing");
      const permit = await rl.acquire(`${k}:c`, new Concurrency({ limit: 1, leaseMs: 5_000 }));
      assert.equal(permit.allowed, true);
      assert.equal((await rl.acquire(`${k}:c`, new Concurrency({ limit: 1, leaseMs: 5_000 }))).allowed, false);
      await permit.release();
      const next = await rl.acquire(`${k}:c`, new Concurrency({ limit: 1, leaseMs: 5_000 }));
      assert.equal(next.allowed, true);
      await next.release();
    });
  });
}
