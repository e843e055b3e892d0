/** RL.* commands as argument lists (strings: what both clients send): the one place that turns limits
 * into arguments, as `client/src/command.rs`. Each limit's arguments follow its kind's declaration. */
import { randomBytes } from "node:crypto";
import { ALL_COMMAND, ERRORS, MAX_WHOLE, call, holdCall, kind, requestOption } from "./contract.js";
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

/** A usage error in the contract's words (`ERR invalid key: ...`): its code is the text's first word. */
function refusal(text: string): UsageError {
  return new UsageError(text, text.slice(0, text.indexOf(" ")));
}

/** A key as the commands take it: a string, not empty (`undefined` is not a key: it would be `""`). */
export function keyText(key: unknown): string {
  if (typeof key !== "string" || key === "") throw refusal(ERRORS.render.empty_key);
  return key;
}

/** The limits of one call, refused before sending where the module would refuse them: none, not a
 * policy, a missing or empty key, the same key twice. */
function checked(limits: readonly Limit[]): void {
  if (limits.length === 0) throw new UsageError("no limits to check");
  for (const l of limits) {
    keyText(l[0]);
    if (!(l[1] instanceof Policy)) throw new UsageError(`not a policy: ${String(l[1])}`);
  }
  if (limits.length > 1 && new Set(limits.map((l) => l[0])).size < limits.length) throw refusal(ERRORS.duplicate_key);
}

function build(limits: readonly Limit[], holder: string | undefined): string[] {
  checked(limits);
  if (limits.length === 1) {
    const [key, policy, cost] = limits[0]!;
    if (policy.kind.request === "cost") return [policy.kind.command, key, policy.params[0], policy.params[1], costText(cost)];
    return [policy.kind.command, key, ...policy.params, ...request(policy, cost, holder)];
  }
  if (limits.every((l) => l[1] instanceof TokenBucket)) {
    const out = [TokenBucket.KIND.command];
    for (const [key, policy, cost] of limits) out.push(key, ...policy.params, ...request(policy, cost, holder));
    return out;
  }
  return [ALL_COMMAND, ...groups(limits, holder)];
}

/** RL.ALL's groups of `limits`: `key KIND p1 p2 request` each. */
function groups(limits: readonly Limit[], holder: string | undefined): string[] {
  const out: string[] = [];
  for (const [key, policy, cost] of limits) {
    out.push(key, policy.kind.group, ...policy.params, ...request(policy, cost, holder));
  }
  return out;
}

export const NO_HOLD_RELEASE = "a concurrency limit is taken with acquire, which releases it: a hold cannot";

/** `RL.HOLD ledger id ttl abandon` and RL.ALL's groups of `limits` (their estimates). */
export function hold(ledger: string, id: string, ttlMs: number, abandon: string, limits: readonly Limit[]): string[] {
  checked(limits);
  keyText(ledger);
  if (limits.some((l) => l[1].kind.request === "lease")) throw new UsageError(NO_HOLD_RELEASE);
  if (!(Number.isInteger(ttlMs) && ttlMs > 0)) throw new UsageError("a hold's ttlMs is a whole number of milliseconds > 0");
  return [...holdCall("hold", { ledger, id, ttl: secondsText(ttlMs), abandon }), ...groups(limits, undefined)];
}

/** `RL.SETTLE ledger id mode key units [key units ...]`. */
export function settle(ledger: string, id: string, mode: string, units: readonly (readonly [string, number])[]): string[] {
  const out = holdCall("settle", { ledger, id, mode });
  for (const [key, n] of units) out.push(keyText(key), costText(n));
  return out;
}

/** The module's refusal of a request field (`cost`): `ERR invalid cost: must be a whole number >= 0`. */
function fieldError(field: string, expected: string): UsageError {
  return refusal(ERRORS.format.replace("{field}", field).replace("{expected}", expected));
}

/** A cost (or a refund's units, which the module reads as one) as the commands take it: a whole number
 * from 0 to the largest (2^64-1), a `number` (exactly as it is, past 2^53 too) or a `bigint`;
 * anything else is refused before sending with the module's texts. */
export function costText(n: unknown): string {
  // The usual cost, a small whole number: no bigint made.
  if (typeof n === "number" && Number.isSafeInteger(n) && n >= 0) return String(n);
  const field = "cost";
  let v: bigint;
  if (typeof n === "bigint") v = n;
  else if (typeof n === "number" && Number.isInteger(n)) v = BigInt(n);
  else v = -1n;
  if (v < 0n) throw fieldError(field, ERRORS.requests.find((r) => r.field === "cost")!.expected);
  if (v > MAX_WHOLE) throw fieldError(field, ERRORS.too_large);
  return v.toString();
}

function request(policy: Policy, cost: number, holder: string | undefined): string[] {
  const text = costText(cost);
  const form = policy.kind.request;
  if (form === "cost") return [text];
  if (form === "id") {
    if (cost !== 1) throw new UsageError(ERRORS.render.log_cost);
    return [requestIds.next()];
  }
  if (holder === undefined) throw new UsageError(NO_RELEASE);
  if (cost === 0) throw new UsageError(ERRORS.render.lease_weight);
  return [holder, requestOption(form), text];
}

/** `RL.TAKE key capacity rate max`: as many tokens as the bucket holds now, up to `most`. */
export function take(key: string, policy: Policy, most: number): string[] {
  keyText(key);
  if (!(policy instanceof TokenBucket)) throw new UsageError("partial grants are taken from token buckets");
  if (!Number.isSafeInteger(most) || most < 1) throw new UsageError("take at least one token (max >= 1)");
  return call("take", { key, ...params(policy), max: String(most) });
}

/** `RL.REFUND KIND key p1 p2 units`: gives units back (token buckets, fixed windows, sliding counters). */
export function refund(key: string, policy: Policy, units: number): string[] {
  keyText(key);
  if (!policy.kind.refunds) throw new UsageError(`a ${policy.kind.name} takes no refunds`);
  return call("refund", { group: policy.kind.group, key, ...params(policy), units: costText(units) });
}

/** `RL.INSPECT key [p1 p2]`: what `key` holds; with the policy, what a request would meet now. */
export function inspect(key: string, policy?: Policy): string[] {
  keyText(key);
  return policy ? call("inspect_peek", { key, ...params(policy) }) : call("inspect", { key });
}

export function release(key: string, holder: string): string[] {
  return call("release", { key, id: holder });
}

/** `RL.RENEW key lease id` (`leaseMs` whole milliseconds). */
export function renew(key: string, leaseMs: number, holder: string): string[] {
  return call("renew", { key, lease: secondsText(Math.round(leaseMs)), id: holder });
}

/** A policy's two parameters as the calls' `{p1}` and `{p2}`. */
function params(policy: Policy): { p1: string; p2: string } {
  const [p1, p2] = policy.params;
  return { p1, p2 };
}

/** A token bucket reserving (RL.RESERVE, RESERVE groups of RL.ALL): the contract's kind. */
const RESERVATION = kind("reservation");

const waitText = (maxWaitMs: number): string => secondsText(Math.max(0, Math.floor(maxWaitMs)));

/** The call reserving the token buckets among `limits` within `maxWaitMs` (whole ms, rounded down)
 * while the others decide now; undefined when none reserves (then it is `decide`). */
export function reserve(limits: readonly Limit[], maxWaitMs: number): string[] | undefined {
  checked(limits);
  if (!limits.some((l) => l[1] instanceof TokenBucket)) return undefined;
  const wait = waitText(maxWaitMs);
  if (limits.length === 1) {
    const [key, policy, cost] = limits[0]!;
    return [RESERVATION.command, key, ...policy.params, costText(cost), wait];
  }
  const out = [ALL_COMMAND];
  for (const [key, policy, cost] of limits) {
    if (policy instanceof TokenBucket) out.push(key, RESERVATION.group, ...policy.params, costText(cost), wait);
    else out.push(key, policy.kind.group, ...decide([[key, policy, cost]]).slice(2));
  }
  return out;
}

/** `RL.RESERVE key capacity rate least max_wait UPTO most`. */
export function batch(key: string, policy: Policy, least: number, most: number, maxWaitMs: number): string[] {
  keyText(key);
  if (!(policy instanceof TokenBucket)) throw new UsageError("batches are reserved from token buckets");
  if (!(least >= 1) || !(most >= least)) throw new UsageError("a batch takes at least one token, and max >= min");
  return call("reserve_upto", { key, ...params(policy), min: String(least), max_wait: waitText(maxWaitMs), max: String(most) });
}
