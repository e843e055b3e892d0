/** RL.* commands as argument lists (strings: what both clients send): the one place that turns limits
 * into arguments, as `client/src/command.rs`. Each limit's arguments follow its kind's declaration. */
import { randomBytes } from "node:crypto";
import { ERRORS } from "./contract.js";
import { UsageError } from "./errors.js";
import { Policy, TokenBucket, secondsText } from "./policy.js";

/** One limit to check: a key, its policy, and what this request costs (1 for most, 0 to peek). */
export type Limit = readonly [key: string, policy: Policy, cost: number];

export const NO_RELEASE = "a concurrency limit is taken with acquire, which releases it: check has no release";

const RUN = randomBytes(8).toString("hex");
let seq = 0;
/** Where RL.SLIDE request ids come from (unique to this process run and call); tests may replace it. */
export const requestIds = { next: (): string => `${RUN}-${(seq++).toString(16)}` };

/** The one call that decides `limits` atomically: one limit its own command, several token buckets
 * one RL.TOKEN, other or mixed kinds one RL.ALL. */
export function decide(limits: readonly Limit[]): string[] {
  return build(limits, undefined);
}

/** Like `decide`, the concurrency limits among `limits` taken as leases held by `holder`. */
export function acquire(limits: readonly Limit[], holder: string): string[] {
  return build(limits, holder);
}

function build(limits: readonly Limit[], holder: string | undefined): string[] {
  if (limits.length === 0) throw new UsageError("no limits to check");
  for (const l of limits) if (!(l[1] instanceof Policy)) throw new UsageError(`not a policy: ${String(l[1])}`);
  if (limits.length === 1) {
    const [key, policy, cost] = limits[0]!;
    if (policy.kind.request === "cost") return [policy.kind.command, key, policy.params[0], policy.params[1], wholeText(cost, "cost")];
    return [policy.kind.command, key, ...policy.params, ...request(policy, cost, holder)];
  }
  if (limits.every((l) => l[1] instanceof TokenBucket)) {
    const out = ["RL.TOKEN"];
    for (const [key, policy, cost] of limits) out.push(key, ...policy.params, ...request(policy, cost, holder));
    return out;
  }
  const out = ["RL.ALL"];
  for (const [key, policy, cost] of limits) {
    out.push(key, policy.kind.group, ...policy.params, ...request(policy, cost, holder));
  }
  return out;
}

function wholeText(n: unknown, what: string): string {
  if (typeof n === "bigint" && n >= 0n) return n.toString();
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0) {
    throw new UsageError(`the ${what} must be a whole number >= 0, not ${String(n)}`);
  }
  return String(n);
}

function request(policy: Policy, cost: number, holder: string | undefined): string[] {
  const text = wholeText(cost, "cost");
  const form = policy.kind.request;
  if (form === "cost") return [text];
  if (form === "id") {
    if (cost !== 1) throw new UsageError(ERRORS.render.log_cost);
    return [requestIds.next()];
  }
  if (holder === undefined) throw new UsageError(NO_RELEASE);
  if (cost === 0) throw new UsageError(ERRORS.render.lease_weight);
  return [holder, "WEIGHT", text];
}

/** `RL.TAKE key capacity rate max`: as many tokens as the bucket holds now, up to `most`. */
export function take(key: string, policy: Policy, most: number): string[] {
  if (!(policy instanceof TokenBucket)) throw new UsageError("partial grants are taken from token buckets");
  if (!Number.isSafeInteger(most) || most < 1) throw new UsageError("take at least one token (max >= 1)");
  return ["RL.TAKE", key, ...policy.params, String(most)];
}

/** `RL.REFUND KIND key p1 p2 units`: gives units back (token buckets, fixed windows, sliding counters). */
export function refund(key: string, policy: Policy, units: number): string[] {
  if (!policy.kind.refunds) throw new UsageError(`a ${policy.kind.name} takes no refunds`);
  return ["RL.REFUND", policy.kind.group, key, ...policy.params, wholeText(units, "units")];
}

/** `RL.INSPECT key [p1 p2]`: what `key` holds; with the policy, what a request would meet now. */
export function inspect(key: string, policy?: Policy): string[] {
  return ["RL.INSPECT", key, ...(policy ? policy.params : [])];
}

export function release(key: string, holder: string): string[] {
  return ["RL.RELEASE", key, holder];
}

/** `RL.RENEW key lease id` (`leaseMs` whole milliseconds). */
export function renew(key: string, leaseMs: number, holder: string): string[] {
  return ["RL.RENEW", key, secondsText(Math.round(leaseMs)), holder];
}

const waitText = (maxWaitMs: number): string => secondsText(Math.max(0, Math.floor(maxWaitMs)));

/** The call reserving the token buckets among `limits` within `maxWaitMs` (whole ms, rounded down)
 * while the others decide now; undefined when none reserves (then it is `decide`). */
export function reserve(limits: readonly Limit[], maxWaitMs: number): string[] | undefined {
  if (!limits.some((l) => l[1] instanceof TokenBucket)) return undefined;
  const wait = waitText(maxWaitMs);
  if (limits.length === 1) {
    const [key, policy, cost] = limits[0]!;
    return ["RL.RESERVE", key, ...policy.params, wholeText(cost, "cost"), wait];
  }
  const out = ["RL.ALL"];
  for (const [key, policy, cost] of limits) {
    if (policy instanceof TokenBucket) out.push(key, "RESERVE", ...policy.params, wholeText(cost, "cost"), wait);
    else out.push(key, policy.kind.group, ...decide([[key, policy, cost]]).slice(2));
  }
  return out;
}

/** `RL.RESERVE key capacity rate least max_wait UPTO most`. */
export function batch(key: string, policy: Policy, least: number, most: number, maxWaitMs: number): string[] {
  if (!(policy instanceof TokenBucket)) throw new UsageError("batches are reserved from token buckets");
  if (!(least >= 1) || !(most >= least)) throw new UsageError("a batch takes at least one token, and max >= min");
  return ["RL.RESERVE", key, ...policy.params, String(least), waitText(maxWaitMs), "UPTO", String(most)];
}
