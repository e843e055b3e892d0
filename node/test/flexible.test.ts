// RateLimiterModule (rate-limiter-flexible's RateLimiterCompatibleAbstract API on the module and the
// library) next to rate-limiter-flexible's own RateLimiterMemory on the same sequences: the same
// resolutions and rejections, RateLimiterRes fields equal (msBeforeNext within timer slack); used
// under rate-limiter-flexible's own RLWrapperBlackAndWhite; and its failure policy when Redis is gone.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { RateLimiterMemory, RLWrapperBlackAndWhite, RateLimiterRes as FlexRes } from "rate-limiter-flexible";
import { Server, freePort, LONG_DEADLINE_MS } from "./servers.ts";
import { Limiter, RateLimiterModule, RateLimiterRes } from "../src/index.ts";

type Out = { ok: boolean; res: unknown };
interface Like {
  consume(key: string, points?: number): Promise<unknown>;
  penalty(key: string, points?: number): Promise<unknown>;
  reward(key: string, points?: number): Promise<unknown>;
  get(key: string): Promise<unknown>;
  set(key: string, points: number, secs: number): Promise<unknown>;
  block(key: string, secs: number): Promise<unknown>;
  delete(key: string): Promise<boolean>;
}

async function out(p: Promise<unknown>): Promise<Out> {
  try {
    const res = await p;
    return { ok: true, res: res === null || typeof res === "boolean" ? res : (res as FlexRes).toJSON() };
  } catch (e) {
    if (e instanceof Error) throw e;
    return { ok: false, res: (e as FlexRes).toJSON() };
  }
}

const SLACK = 60;
function same(ours: Out, theirs: Out, what: string): void {
  assert.equal(ours.ok, theirs.ok, `${what}: resolved/rejected ${JSON.stringify(ours)} vs ${JSON.stringify(theirs)}`);
  if (ours.res === null || theirs.res === null || typeof ours.res === "boolean") {
    assert.deepEqual(ours.res, theirs.res, what);
    return;
  }
  const a = ours.res as Record<string, number>, b = theirs.res as Record<string, number>;
  assert.deepEqual([a["remainingPoints"], a["consumedPoints"], a["isFirstInDuration"]], [b["remainingPoints"], b["consumedPoints"], b["isFirstInDuration"]], `${what}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
  assert.ok(Math.abs(a["msBeforeNext"]! - b["msBeforeNext"]!) <= SLACK, `${what}: msBeforeNext ${a["msBeforeNext"]} vs ${b["msBeforeNext"]}`);
}

/** Runs `step` on both and holds them equal. */
function pair(ours: Like, theirs: Like) {
  return async (what: string, step: (l: Like) => Promise<unknown>): Promise<Out> => {
    const [a, b] = await Promise.all([out(step(ours)), out(step(theirs))]);
    same(a, b, what);
    return a;
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

for (const engine of ["module", "library"] as const) {
  describe(`RateLimiterModule on the ${engine}`, () => {
    let server: Server, redis: Redis, limiter: Limiter;
    let n = 0;
    const key = () => `${engine}-${n++}`;
    before(async () => {
      server = await Server.start({ module: engine === "module" });
      redis = new Redis(server.port, "127.0.0.1");
      limiter = new Limiter(redis, { failure: "closed", deadlineMs: LONG_DEADLINE_MS });
      await limiter.verify();
      assert.equal(limiter.describe().engine === "module", engine === "module", JSON.stringify(limiter.describe()));
    });
    after(async () => {
      redis.disconnect();
      await server.close();
    });
    const both = (o: { points: number; duration: number; blockDuration?: number }) =>
      pair(new RateLimiterModule({ limiter, ...o }), new RateLimiterMemory(o) as unknown as Like);

    test("consume: resolves within points, rejects with a RateLimiterRes past them", async () => {
      const step = both({ points: 5, duration: 2 });
      const k = key();
      for (let i = 1; i <= 5; i++) await step(`consume ${i}`, (l) => l.consume(k));
      const r = await step("consume 6", (l) => l.consume(k));
      assert.equal(r.ok, false);
      await step("get within points", (l) => l.get(key()));
      await step("too many at once", (l) => l.consume(key(), 9));
      const ours = new RateLimiterModule({ limiter, points: 1, duration: 1 });
      const x = "x-" + key();
      await ours.consume(x);
      const rej = await ours.consume(x).then(() => null, (e) => e);
      assert.ok(rej instanceof RateLimiterRes, String(rej));
      assert.equal(String(new RateLimiterRes(1, 2, 3, true)), String(new FlexRes(1, 2, 3, true)), "toString as theirs");
    });

    test("penalty, reward, get, set, delete", async () => {
      const step = both({ points: 5, duration: 2 });
      const k = key();
      await step("consume 2", (l) => l.consume(k, 2));
      await step("penalty 1", (l) => l.penalty(k, 1));
      await step("reward 2", (l) => l.reward(k, 2));
      await step("get", (l) => l.get(k));
      await step("consume 4", (l) => l.consume(k, 4));
      await step("rejected", (l) => l.consume(k, 1));
      await step("delete", (l) => l.delete(k));
      await step("get: none", (l) => l.get(k));
      await step("delete: nothing", (l) => l.delete(k));
      const s = key();
      await step("set 3 for 2 s", (l) => l.set(s, 3, 2));
      await step("consume after set", (l) => l.consume(s));
      await step("get after set", (l) => l.get(s));
      const s2 = key();
      await step("set above points: a block", (l) => l.set(s2, 9, 2));
      await step("consume in it", (l) => l.consume(s2));
      await step("get in it", (l) => l.get(s2));
    });

    test("block, blockDuration", async () => {
      const step = both({ points: 5, duration: 1 });
      const k = key();
      await step("block 3 s", (l) => l.block(k, 3));
      await step("blocked consume", (l) => l.consume(k));
      await step("blocked get", (l) => l.get(k));
      await step("delete ends the block", (l) => l.delete(k));
      await step("consume after delete", (l) => l.consume(k));
    });

    test("blockDuration: the first rejection blocks for blockDuration, past the window", async () => {
      const o = { points: 2, duration: 1, blockDuration: 2 };
      const ours = new RateLimiterModule({ limiter, ...o });
      const theirs = new RateLimiterMemory(o);
      const k = key();
      const seq = async (l: Like) => [await out(l.consume(k)), await out(l.consume(k)), await out(l.consume(k))];
      const [a, b] = await Promise.all([seq(ours), seq(theirs as unknown as Like)]);
      for (let i = 0; i < 3; i++) same(a[i]!, b[i]!, `consume ${i + 1}`);
      await sleep(1100);
      const [a2, b2] = await Promise.all([out(ours.consume(k)), out(theirs.consume(k))]);
      assert.deepEqual([a2.ok, b2.ok], [false, false], "still blocked after the window");
      const ms = (x: Out) => (x.res as { msBeforeNext: number }).msBeforeNext;
      assert.ok(Math.abs(ms(a2) - ms(b2)) <= SLACK, `${ms(a2)} vs ${ms(b2)}`);
    });

    test("under rate-limiter-flexible's RLWrapperBlackAndWhite", async () => {
      const wrapped = new RLWrapperBlackAndWhite({
        limiter: new RateLimiterModule({ limiter, points: 1, duration: 1 }) as never,
        whiteList: ["ops"], blackList: ["bad"],
      });
      const k = key();
      assert.equal((await wrapped.consume(k)).remainingPoints, 0);
      await assert.rejects(wrapped.consume(k), (e) => e instanceof RateLimiterRes);
      for (let i = 0; i < 3; i++) await wrapped.consume("ops");
      await assert.rejects(wrapped.consume("bad"));
    });
  });
}

test("Redis gone: the limiter's failure policy answers (closed rejects with a RateLimiterRes, open resolves)", async () => {
  const port = await freePort();
  const redis = new Redis(port, "127.0.0.1", { lazyConnect: true });
  redis.on("error", () => {});
  try {
    const closed = new RateLimiterModule({ limiter: new Limiter(redis, { failure: "closed", deadlineMs: 50 }), points: 3 });
    const rej = await closed.consume("k").then(() => assert.fail("resolved"), (e) => e);
    assert.ok(rej instanceof RateLimiterRes);
    assert.equal(rej.msBeforeNext, 1000);
    const open = new RateLimiterModule({ limiter: new Limiter(redis, { failure: "open", deadlineMs: 50 }), points: 3 });
    assert.equal((await open.consume("k")).remainingPoints, 2);
    const local = new RateLimiterModule({ limiter: new Limiter(redis, { failure: "fallback", instances: 1, deadlineMs: 50 }), points: 3 });
    const got = [];
    for (let i = 0; i < 4; i++) got.push(await out(local.consume("k")));
    assert.deepEqual(got.map((g) => g.ok), [true, true, true, false], "the fallback counts in process");
    await assert.rejects(local.get("k"), "get reads Redis");
  } finally {
    redis.disconnect();
  }
});
