// Outages with DEFAULT client options (ioredis' offline queue and 20 retries, node-redis' queue and
// reconnects): every call returns the failure policy's degraded decision within the deadline, the
// breaker keeps calls away, its probe ends the outage when Redis answers again.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { Server, LONG_DEADLINE_MS } from "./servers.ts";
import { FACTORIES } from "./clients.ts";
import {
  Limiter, TokenBucket, DeadlineError, ServerError, BreakerOpenError, ConflictError, type Decision, type OutageEvent,
} from "../src/index.ts";

const DEADLINE = 100;
const SLACK = 40; // timers and the event loop
const p = new TokenBucket({ capacity: 1000, perSecond: 1000 });

async function timed(rl: Limiter, key: string): Promise<{ d: Decision; ms: number }> {
  const t0 = performance.now();
  const d = await rl.check(key, p);
  return { d, ms: performance.now() - t0 };
}

for (const f of FACTORIES) {
  describe(`${f.name}, default options`, () => {
    test("a stopped server: degraded within the deadline, the breaker opens, its probe ends the outage; logger.warn: one line when it starts, one when it ends", async () => {
      const server = await Server.start({ module: true });
      const made = await f.make(server.port);
      try {
        const warns: string[] = [];
        const errors: string[] = [];
        const logger = { error: (m: string) => void errors.push(m), warn: (m: string) => void warns.push(m) };
        const rl = new Limiter(made.client, { failure: "open", deadlineMs: DEADLINE, breaker: { failures: 3, cooldownMs: 300 }, logger });
        let degraded = 0;
        rl.on("degraded", () => void degraded++);
        const events: string[] = [];
        let engine = "";
        rl.on("outage", (e: OutageEvent) => (events.push("outage"), (engine = e.engine)));
        rl.on("recovered", () => events.push("recovered"));
        assert.equal((await rl.check("rl:{o}:a", p)).degraded, false);
        await server.stop();
        let worst = 0;
        for (let i = 0; i < 10; i++) {
          const { d, ms } = await timed(rl, "rl:{o}:a");
          assert.equal(d.degraded, true);
          assert.equal(d.allowed, true, "open");
          worst = Math.max(worst, ms);
        }
        const parallel = await Promise.all(Array.from({ length: 50 }, () => timed(rl, "rl:{o}:a")));
        for (const { d, ms } of parallel) {
          assert.equal(d.degraded, true);
          worst = Math.max(worst, ms);
        }
        assert.ok(worst < DEADLINE + SLACK, `worst ${worst.toFixed(1)} ms`);
        assert.equal(rl.breaker!.isOpen, true);
        assert.deepEqual(events, ["outage"]);
        assert.equal(engine, "the ratelimit module", "the outage names the engine in use");
        assert.equal(warns.length, 1, warns.join("\n"));
        assert.match(warns[0]!, /^redis-ratelimit: Redis does not decide \(an outage; engine: the ratelimit module\): .+; checks get the failure policy's \(open\) decision meanwhile$/);
        await server.run(); // the same port again
        let d: Decision | undefined;
        for (let i = 0; i < 100; i++) {
          d = await rl.check("rl:{o}:a", p);
          if (!d.degraded) break;
          await new Promise((r) => setTimeout(r, 50));
        }
        assert.equal(d!.degraded, false, `still degraded: ${d!.error}`);
        assert.equal(rl.breaker!.isOpen, false);
        assert.deepEqual(events, ["outage", "recovered"]);
        assert.equal(warns.length, 2, warns.join("\n"));
        assert.match(warns[1]!, new RegExp(`^redis-ratelimit: Redis answers again; outage over after \\d+ ms, ${degraded} decisions made by the failure policy \\(open\\) meanwhile$`));
        assert.ok(degraded >= 60, String(degraded));
        assert.deepEqual(errors, []);
        console.log(`${f.name} stopped server: worst call ${worst.toFixed(1)} ms (deadline ${DEADLINE} ms)`);
      } finally {
        await made.close();
        await server.close();
      }
    });

    test("a SIGSTOPped server: degraded (closed: denied) within the deadline, answers again when resumed", async () => {
      const server = await Server.start({ module: true });
      const made = await f.make(server.port);
      try {
        const rl = new Limiter(made.client, { failure: "closed", deadlineMs: DEADLINE, breaker: { failures: 100, cooldownMs: 100 } });
        assert.equal((await rl.check("rl:{s}:a", p)).degraded, false);
        server.pause();
        let worst = 0;
        const all = await Promise.all(Array.from({ length: 20 }, () => timed(rl, "rl:{s}:a")));
        for (let i = 0; i < 5; i++) all.push(await timed(rl, "rl:{s}:a"));
        for (const { d, ms } of all) {
          assert.equal(d.degraded, true);
          assert.equal(d.allowed, false);
          assert.equal(d.retryAfterSecs(), 1);
          assert.ok(d.error instanceof DeadlineError, String(d.error));
          worst = Math.max(worst, ms);
        }
        assert.ok(worst < DEADLINE + SLACK, `worst ${worst.toFixed(1)} ms`);
        server.resume();
        let d: Decision | undefined;
        for (let i = 0; i < 50; i++) {
          d = await rl.check("rl:{s}:a", p);
          if (!d.degraded) break;
          await new Promise((r) => setTimeout(r, 20));
        }
        assert.equal(d!.degraded, false);
        console.log(`${f.name} SIGSTOPped server: worst call ${worst.toFixed(1)} ms (deadline ${DEADLINE} ms)`);
      } finally {
        server.resume();
        await made.close();
        await server.close();
      }
    });
  });
}

// An outage that Redis answers itself: OOM (maxmemory 1 byte; the module's commands are deny-oom). The
// breaker's clock is the test's, so its cool-down ends when the test says.
for (const f of FACTORIES) {
  test(`${f.name}: an outage counted once; the breaker's probe meeting a conflict closes it (Redis answered)`, async () => {
    const server = await Server.start({ module: true });
    const made = await f.make(server.port);
    try {
      let now = 0;
      const rl = new Limiter(made.client, {
        failure: "open", deadlineMs: LONG_DEADLINE_MS, logger: false, breaker: { failures: 2, cooldownMs: 1000, now: () => now },
      });
      const admin = (...args: string[]) => rl.adapter.send(args, undefined); // past the breaker
      const events: string[] = [];
      rl.on("outage", () => events.push("outage"));
      rl.on("recovered", () => events.push("recovered"));
      const good = "rl:{b}:good";
      const taken = "rl:{b}:taken";
      await admin("SET", taken, "another program's");
      assert.equal((await rl.check(good, p)).degraded, false);

      await admin("CONFIG", "SET", "maxmemory", "1");
      const errors: unknown[] = [];
      for (let i = 0; i < 5; i++) {
        const d = await rl.check(good, p);
        assert.equal(d.degraded, true);
        errors.push(d.error);
      }
      assert.ok(errors.slice(0, 2).every((e) => e instanceof ServerError && /^OOM/.test(e.message)), String(errors));
      assert.ok(errors.slice(2).every((e) => e instanceof BreakerOpenError), String(errors));
      assert.equal(rl.breaker!.isOpen, true);
      assert.equal(rl.counters["outage"], 1, "one outage, however many calls it degraded");
      assert.deepEqual(events, ["outage"]);

      await admin("CONFIG", "SET", "maxmemory", "0");
      now += 1000; // the cool-down is over: the next call probes
      const probe = await rl.check(taken, p);
      assert.ok(probe.degraded && probe.error instanceof ConflictError, String(probe.error));
      assert.equal(rl.breaker!.isOpen, false, "the probe met a conflict: Redis answered, the breaker closes");
      assert.deepEqual(events, ["outage", "recovered"]);
      const after = await rl.check(good, p);
      assert.equal(after.degraded, false, String(after.error));

      // A second outage is counted as the second.
      await admin("CONFIG", "SET", "maxmemory", "1");
      for (let i = 0; i < 3; i++) assert.equal((await rl.check(good, p)).degraded, true);
      await admin("CONFIG", "SET", "maxmemory", "0");
      assert.equal(rl.counters["outage"], 2);
      assert.equal(rl.counters["conflicts"], 1);
    } finally {
      await made.close();
      await server.close();
    }
  });
}
