// Token-budget holds (RL.HOLD / RL.SETTLE) on real servers, each client with its default options: the
// module; the Lua library too (FCALL) once the library defines rl_hold.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { LONG_DEADLINE_MS, Server, ask, moduleAndStock } from "./servers.ts";
import { FACTORIES, type Made } from "./clients.ts";
import { Limiter, FixedWindow, TokenBucket, SlidingLog, UsageError, CONTRACT, LIBRARY, type Hold, type EngineName, type Policy } from "../src/index.ts";
import { ledgerOf } from "../src/contract.ts";

const servers = moduleAndStock();
const SETUPS: { name: string; server: () => (typeof servers)["module"]; engine: EngineName }[] = [
  { name: "module", server: () => servers.module, engine: "module" },
  // The library's holds land after the module's: tested on a stock server once it has them.
  ...(/\bC\.rl_hold\b/.test(LIBRARY)
    ? [
      { name: "library (FCALL)", server: () => servers.stock, engine: "fcall" as EngineName },
      { name: "library (EVALSHA)", server: () => servers.stock, engine: "evalsha" as EngineName },
    ]
    : []),
];
const HOLDS = (CONTRACT as unknown as { holds: { errors: { field: string; reply: string }[]; max_id_bytes: number } }).holds;

let n = 0;
const tag = () => `h${++n}`;
const tpm = new FixedWindow({ limit: 1000, windowMs: 60_000 });

test("the default ledger: the contract's template with the first key's hash tag, else the whole key", () => {
  assert.equal(ledgerOf("rl:{key:42}:tpm"), "rl:holds:{key:42}");
  assert.equal(ledgerOf("plain-key"), "rl:holds:{plain-key}");
  assert.equal(ledgerOf("a{}b"), "rl:holds:{a{}b}");
});

for (const f of FACTORIES) {
  for (const s of SETUPS) {
    describe(`${f.name} on ${s.name}`, () => {
      let made: Made;
      let rl: Limiter;
      let port: number;
      before(async () => {
        port = s.server().port;
        made = await f.make(port);
        rl = new Limiter(made.client, { failure: "closed", engine: s.engine, deadlineMs: LONG_DEADLINE_MS });
      });
      after(async () => made.close());
      const remaining = async (key: string, policy: Policy = tpm) => (await rl.peek(key, policy)).remaining;
      const exists = async (...keys: string[]) => Number(await ask(port, "EXISTS", ...keys));
      /** The keys of a ledger: itself, and whatever the server keeps under its name (a hold's own key). */
      const ledgerKeys = async (ledger: string) => (await ask(port, "KEYS", `${ledger}*`)).split("\n").filter(Boolean);

      test("an allowed hold takes its estimate and records it in the ledger; a denied one writes nothing", async () => {
        const t = tag();
        const rpm = `rl:{${t}}:rpm`, tokens = `rl:{${t}}:tpm`;
        const h = await rl.hold([[rpm, new FixedWindow({ limit: 10, windowMs: 60_000 }), 1], [tokens, tpm, 600]]);
        assert.equal(h.allowed, true);
        assert.equal(h.local, false);
        assert.equal(h.ledger, `rl:holds:{${t}}`);
        assert.ok((await ledgerKeys(h.ledger)).length > 0, "the hold is recorded under the ledger");
        assert.equal(await remaining(tokens), 400);
        // Denied: the second group has 400 left; the first group is not taken either.
        const denied = await rl.hold([[rpm, new FixedWindow({ limit: 10, windowMs: 60_000 }), 1], [tokens, tpm, 500]]);
        assert.equal(denied.allowed, false);
        assert.equal(denied.decision.limiting, 1);
        assert.equal((await rl.peek(rpm, new FixedWindow({ limit: 10, windowMs: 60_000 }))).remaining, 9);
        assert.equal(await denied.settle(0), null, "a denied hold settles nothing");
        // A denial on fresh keys: no key, no ledger.
        const u = tag();
        const never = await rl.hold([[`rl:{${u}}:tpm`, tpm, 1001]]);
        assert.equal(never.allowed, false);
        assert.equal(await exists(`rl:{${u}}:tpm`), 0);
        assert.deepEqual(await ledgerKeys(`rl:holds:{${u}}`), []);
        await h.cancel();
      });

      test("settle gives the unused units back; a retried settle (and a retried hold) counts once", async () => {
        const key = `rl:{${tag()}}:tpm`;
        const h = await rl.hold([[key, tpm, 600]], { id: "req-1" });
        assert.equal(h.id, "req-1");
        assert.equal(await remaining(key), 400);
        const again = await rl.hold([[key, tpm, 600]], { id: "req-1" });
        assert.equal(again.allowed, true);
        assert.equal(await remaining(key), 400, "a retried hold takes nothing");
        const first = await h.settle(250);
        assert.ok(first);
        assert.equal(first.allowed, true);
        assert.equal(await remaining(key), 750);
        const second = await h.settle(250);
        assert.deepEqual(second, first, "the retried settle replies as the first");
        assert.deepEqual(await again.settle(100), first, "the same id settled again: the first reply, nothing changed");
        assert.equal(await remaining(key), 750, "settled once");
      });

      test("add reports usage as it comes; past the hold with nothing left it says stop", async () => {
        const key = `rl:{${tag()}}:tpm`;
        const small = new FixedWindow({ limit: 100, windowMs: 60_000 });
        const h = await rl.hold([[key, small, 50]]);
        assert.equal(await h.add(40), false);
        assert.equal(await remaining(key, small), 50, "within the hold: nothing more charged");
        assert.equal(await h.add(90), false);
        assert.equal(await remaining(key, small), 10, "the excess is charged as it comes");
        assert.equal(await h.add(130), true, "past the limit: stop");
        const final = await h.settle(130);
        assert.ok(final);
        assert.equal(await remaining(key, small), 0);
      });

      test("leaving the scope unsettled under CHARGE (the default): the estimate stays charged, even on a throw", async () => {
        const key = `rl:{${tag()}}:tpm`;
        let kept: Hold | undefined;
        {
          await using h = await rl.hold([[key, tpm, 300]]);
          assert.equal(h.allowed, true);
          assert.equal(await remaining(key), 700);
          kept = h;
        }
        assert.equal(await remaining(key), 700, "the estimate stays charged: nothing goes back");
        assert.ok(await kept.settle(0), "the hold was settled at the scope's end: the server replies as that settle did");
        assert.equal(await remaining(key), 700, "settling again changes nothing");
        // Left by an exception (a client that went away, a failed stream): the same.
        await assert.rejects((async () => {
          await using h = await rl.hold([[key, tpm, 200]]);
          assert.equal(h.allowed, true);
          throw new Error("the client went away");
        })(), /went away/);
        assert.equal(await remaining(key), 500, "billing-safe: a throw refunds nothing");
      });

      test("leaving the scope under CHARGE after add above the estimate: charged the usage", async () => {
        const key = `rl:{${tag()}}:tpm`;
        {
          await using h = await rl.hold([[key, tpm, 300]]);
          assert.equal(await h.add(420), false);
          assert.equal(await remaining(key), 580, "the excess is charged as it comes");
        }
        assert.equal(await remaining(key), 580, "charged the usage, 420");
        // Usage below the estimate: the estimate stays charged (max of the two).
        {
          await using h = await rl.hold([[key, tpm, 100]]);
          await h.add(30);
        }
        assert.equal(await remaining(key), 480, "the estimate, 100, not the usage, 30");
      });

      test("leaving the scope under RETURN: the part not reported by add goes back", async () => {
        const key = `rl:{${tag()}}:tpm`;
        {
          await using h = await rl.hold([[key, tpm, 100]], { abandon: "RETURN" });
          assert.equal(h.abandon, "RETURN");
          await h.add(30);
          assert.equal(await remaining(key), 900);
        }
        assert.equal(await remaining(key), 970, "70 came back; the 30 used stay charged");
        {
          await using h = await rl.hold([[key, tpm, 100]], { abandon: "return" });
          assert.equal(await remaining(key), 870);
          void h;
        }
        assert.equal(await remaining(key), 970, "no add: everything came back");
      });

      test("the scope's end names every held limit, not only those a per-key add reported; never an exact one", async () => {
        const t = tag();
        const a = `rl:{${t}}:a`, b = `rl:{${t}}:b`, exact = `rl:{${t}}:exact`;
        {
          await using h = await rl.hold([[a, tpm, 100], [b, tpm, 100], [exact, tpm, 50, "exact"]], { abandon: "RETURN" });
          await h.add({ [a]: 30 });
          assert.deepEqual([await remaining(a), await remaining(b), await remaining(exact)], [900, 900, 950]);
        }
        assert.deepEqual([await remaining(a), await remaining(b), await remaining(exact)], [970, 1000, 950],
          "a settled at its usage, b (never reported) at 0, the exact limit left charged");
        {
          await using h = await rl.hold([[a, tpm, 100], [b, tpm, 100], [exact, tpm, 50, "exact"]]);
          await h.add({ [a]: 150 });
        }
        assert.deepEqual([await remaining(a), await remaining(b), await remaining(exact)], [820, 900, 900],
          "CHARGE: a at its usage (150), b at its estimate, the exact limit as given");
      });

      test("an explicit cancel still gives everything held back; the scope's end then sends nothing", async () => {
        const t = tag();
        const key = `rl:{${t}}:tpm`, rpm = `rl:{${t}}:rpm`;
        const requests = new FixedWindow({ limit: 10, windowMs: 60_000 });
        {
          await using h = await rl.hold([[rpm, requests, 1, "exact"], [key, tpm, 300]]);
          await h.add(120);
          assert.equal(await remaining(key), 700);
          assert.ok(await h.cancel());
        }
        assert.equal(await remaining(key), 1000, "everything held came back");
        assert.equal(await remaining(rpm, requests), 9, "the exact limit stays charged");
      });

      test("input/output split: the prompt charged exactly, the completion held and settled", async () => {
        const t = tag();
        const input = `rl:{${t}}:input`, output = `rl:{${t}}:output`;
        const h = await rl.hold([[input, tpm, 200, "exact"], [output, tpm, 500]]);
        assert.equal(await remaining(input), 800);
        assert.equal(await remaining(output), 500);
        assert.equal(await h.add(50), false);
        await h.settle(120);
        assert.equal(await remaining(input), 800, "the prompt stays charged");
        assert.equal(await remaining(output), 880, "the completion's unused units went back");
        // Per key, and a cancel: the held limit comes back, the exact one stays charged.
        const h2 = await rl.hold([[input, tpm, 100, "exact"], [output, tpm, 100]]);
        await h2.settle({ [output]: 10 });
        assert.equal(await remaining(output), 870);
        const h3 = await rl.hold([[input, tpm, 100, "exact"], [output, tpm, 100]]);
        await h3.cancel();
        assert.deepEqual([await remaining(input), await remaining(output)], [600, 870]);
      });

      test("a token bucket's hold returns to the bucket; a sliding log is decided, not held", async () => {
        const t = tag();
        const bucket = new TokenBucket({ capacity: 100, perSecond: 0.001 });
        const log = new SlidingLog({ limit: 5, windowMs: 60_000 });
        const h = await rl.hold([[`rl:{${t}}:b`, bucket, 60], [`rl:{${t}}:log`, log, 1]]);
        assert.equal(h.allowed, true);
        assert.equal(await remaining(`rl:{${t}}:b`, bucket), 40);
        await h.settle(10);
        assert.equal(await remaining(`rl:{${t}}:b`, bucket), 90);
        assert.equal(await remaining(`rl:{${t}}:log`, log), 4);
      });

      test("an abandoned hold: RETURN gives its units back when its ttl ends, CHARGE (the default) keeps them", async () => {
        const t = tag();
        const kept = `rl:{${t}}:kept`, back = `rl:{${t}}:back`;
        await rl.hold([[kept, tpm, 300]], { ttlMs: 100 });
        await rl.hold([[back, tpm, 300]], { ttlMs: 100, abandon: "return" });
        // A longer hold keeps the ledger: this test is about the client passing the policy, not about
        // a ledger's own end (the module at a09916d let a ledger expire with its last hold, its RETURN
        // units with it).
        const open = await rl.hold([[`rl:{${t}}:open`, tpm, 1]], { ttlMs: 60_000 });
        assert.deepEqual([await remaining(kept), await remaining(back)], [700, 700]);
        await new Promise((ok) => setTimeout(ok, 300));
        // The next call on the ledger finds the ended holds.
        await open.cancel();
        assert.deepEqual([await remaining(kept), await remaining(back)], [700, 1000]);
      });

      test("the server's hold errors are usage errors, raised", async () => {
        const key = `rl:{${tag()}}:tpm`;
        const long = "x".repeat(HOLDS.max_id_bytes + 1);
        await assert.rejects(rl.hold([[key, tpm, 1]], { id: long }), (e: unknown) => {
          assert.ok(e instanceof UsageError);
          assert.equal(e.message, HOLDS.errors.find((x) => x.field === "id")!.reply);
          return true;
        });
        const h = await rl.hold([[key, tpm, 1]]);
        await assert.rejects(h.settle({ [`rl:{${tag()}}:other`]: 1 }), (e: unknown) => {
          assert.ok(e instanceof UsageError);
          assert.equal(e.message, HOLDS.errors.find((x) => x.field === "key")!.reply);
          return true;
        });
        await assert.rejects(rl.hold([[key, tpm, 1]], { abandon: "KEEP" }), UsageError);
        await h.cancel();
      });
    });
  }

  describe(`${f.name}, outages`, () => {
    test("a settle that meets an outage is retried, then logged once and given up without raising", async () => {
      const server = await Server.start({ module: true });
      const made = await f.make(server.port);
      try {
        const errors: string[] = [];
        const rl = new Limiter(made.client, { failure: "closed", deadlineMs: 300, breaker: false, logger: { error: (m) => void errors.push(m) } });
        // The first call waits for the connection: given the long deadline of a loaded machine.
        await new Limiter(made.client, { failure: "closed", deadlineMs: LONG_DEADLINE_MS }).verify();
        const h = await rl.hold([[`rl:{${tag()}}:tpm`, tpm, 100]]);
        assert.equal(h.allowed, true);
        assert.equal(h.local, false);
        await server.stop();
        assert.equal(await h.settle(10), null);
        assert.equal(h.givenUp, true);
        assert.equal(errors.length, 1, errors.join("\n"));
        assert.match(errors[0]!, new RegExp(`hold ${h.id} .*given up after 3 attempts`));
        await h.close(); // settled (given up): the scope's end sends nothing more
        assert.equal(errors.length, 1);
      } finally {
        await made.close();
        await server.close();
      }
    });

    test("Redis down at hold time: the failure policy decides, the hold is local and settles nothing", async () => {
      const server = await Server.start({ module: true });
      const made = await f.make(server.port);
      try {
        const rl = new Limiter(made.client, { failure: "open", deadlineMs: 300, breaker: false, logger: false });
        await new Limiter(made.client, { failure: "closed", deadlineMs: LONG_DEADLINE_MS }).verify();
        await server.stop();
        const h = await rl.hold([[`rl:{${tag()}}:tpm`, tpm, 100]]);
        assert.equal(h.allowed, true);
        assert.equal(h.local, true);
        assert.equal(await h.add(50), false);
        assert.equal(await h.settle(10), null);
        assert.equal(h.givenUp, false, "nothing was sent");
      } finally {
        await made.close();
        await server.close();
      }
    });
  });
}
