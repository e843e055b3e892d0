// The contract's vector files, read with their big integers (beyond 2^53) as bigint.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./servers.ts";
import assert from "node:assert/strict";
import { TokenBucket, FixedWindow, SlidingCounter, SlidingLog, Concurrency, UsageError, type Decision, type Policy } from "../src/index.ts";

export const VECTORS = join(ROOT, "contract", "vectors");

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Any = any;

export function cases(name: string): { input: Any; output: Any }[] {
  const text = readFileSync(join(VECTORS, `${name}.json`), "utf8").replace(
    /([:\[,]\s*)(-?\d{16,})(?=\s*[,\]}])/g,
    '$1"#big:$2"',
  );
  return JSON.parse(text, (_k, v) => (typeof v === "string" && v.startsWith("#big:") ? BigInt(v.slice(5)) : v)).cases;
}

/** A policy as the vectors write it; `batch` and `lease_ms` where given (volume.json). */
export function policyOf(spec: Any): Policy {
  const kind = spec.kind as string;
  const batched = { ...(spec.batch !== undefined && { batch: spec.batch }), ...(spec.lease_ms !== undefined && { leaseMs: spec.lease_ms }) };
  if (kind === "token_bucket") return new TokenBucket({ capacity: spec.limit, perSecond: spec.rate, ...batched });
  const ms = Number(spec.period_us) / 1000;
  if (kind === "concurrency") return new Concurrency({ limit: spec.limit, leaseMs: ms, ...(spec.batch !== undefined && { batch: spec.batch }) });
  const Cls = { fixed_window: FixedWindow, sliding_counter: SlidingCounter, sliding_log: SlidingLog }[kind];
  if (!Cls) throw new Error(`no policy for ${kind}`);
  return new Cls({ limit: spec.limit, windowMs: ms, ...batched });
}

/** The call an errors.json case's answer was got by (`input.call`: a check of one limit), as a limit. */
export function callOf(call: Any): readonly [string, Policy, number] {
  if (call?.method !== "check") throw new Error(`no call ${JSON.stringify(call)}`);
  return [call.key, policyOf(call.policy), call.cost];
}

export type Outcome = { d: Decision } | { e: unknown };

export function settle(p: Promise<Decision>): Promise<Outcome> {
  return p.then((d) => ({ d }), (e: unknown) => ({ e }));
}

/** errors.json's outcome: the failure policy's decision (degraded, with the answer as its error: the
 * reply as the server wrote it, which the drivers hand over as written), or the UsageError raised. */
export function assertOutcome(got: Outcome, input: Any, output: Any, what: string): void {
  if (output.raise) {
    assert.ok("e" in got && got.e instanceof UsageError, `${what}: ${JSON.stringify(got)}`);
    assert.deepEqual({ code: got.e.code, message: got.e.message }, output.raise, what);
  } else {
    assert.ok("d" in got, `${what}: ${"e" in got ? got.e : ""}`);
    assert.deepEqual({ allowed: got.d.allowed, degraded: got.d.degraded }, output.decision, what);
    if (input.reply !== undefined) assert.equal(got.d.error?.message, input.reply, what);
  }
}
