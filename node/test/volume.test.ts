// contract/vectors/volume.json: the pre-check and batched units (docs/high-volume.md) driven through the
// limiter with the vectors' clock, one or two instances (limiters) answered by the vectors' replies in
// order: each step's commands sent (refunds first, a batch taken ahead last), its decision, the units
// held after it; and the batch options a policy refuses.
import { test } from "node:test";
import assert from "node:assert/strict";
import { cases, policyOf, type Any } from "./vectors.ts";
import { Decision, Limiter, PolicyError, type Adapter, type Limit } from "../src/index.ts";

/** Cases not run, and why. */
const SKIPPED: Record<string, string> = {};

const fields = (d: Decision) => ({
  allowed: d.allowed, limit: d.limit, limiting: d.limiting, local: d.local, remaining: d.remaining,
  reset_after_ms: d.resetAfterMs, retry_after_ms: d.retryAfterMs,
});

/** An adapter that records each command and answers it with the next of `replies`. */
function replaying(sent: string[][], replies: number[][]): Adapter {
  return {
    name: "vector",
    cluster: false,
    send: (args) => {
      sent.push([...args]);
      const reply = replies.shift();
      return reply ? Promise.resolve(reply) : Promise.reject(new Error(`no reply left for ${args.join(" ")}`));
    },
  };
}

test("volume.json: each step's commands, decision and held units; the refused batch options", async () => {
  let run = 0;
  const skipped = new Set<string>();
  for (const { input, output } of cases("volume")) {
    if (input.policy) {
      const what = JSON.stringify(input.policy);
      if (output.error) {
        assert.throws(() => policyOf(input.policy), (e: unknown) => e instanceof PolicyError && e.field === output.error.field && e.reason === output.error.expected, what);
      } else assert.ok(policyOf(input.policy).batching, what);
      run++;
      continue;
    }
    if (input.name in SKIPPED) {
      skipped.add(input.name);
      continue;
    }
    let now = 0;
    const sent: string[][] = [];
    const replies: number[][] = [];
    const adapter = replaying(sent, replies);
    const instances: Limiter[] = [];
    const instance = (i: number) =>
      (instances[i] ??= new Limiter(adapter, { failure: "closed", engine: "module", breaker: false, logger: false, localPrecheck: input.precheck, now: () => now }));
    for (const [i, step] of input.steps.entries()) {
      const what = `${input.name}, step ${i} (at ${step.at_ms} ms)`;
      now = step.at_ms;
      sent.length = 0;
      replies.push(...step.replies);
      const limits: Limit[] = step.limits.map((l: Any) => [l.key, policyOf(l.policy), l.cost] as const);
      const rl = instance(step.instance ?? 0);
      const d = await rl.checkAll(limits);
      // Batches taken ahead are answered off the check's path: before the step's end here.
      await new Promise((done) => setImmediate(done));
      const held = Object.fromEntries(limits.filter((l) => l[1].batching).map(([key, policy]) => [key, rl.held(key, policy)]));
      assert.deepEqual({ sent, decision: fields(d), held }, output.steps[i], what);
      assert.equal(replies.length, 0, `${what}: every reply read`);
    }
    run++;
  }
  assert.deepEqual([...skipped].sort(), Object.keys(SKIPPED).sort(), "every skipped case exists");
  assert.ok(run >= 10, `${run} cases run`);
});
