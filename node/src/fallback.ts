/**
 * The local fallback: while Redis cannot decide, each application instance limits on its own with the
 * same algorithms as core's and its share of the limit (`limit / instances`, at least 1; a token
 * bucket's rate is shared too). Imprecise by design: a rough bound that stays available. As
 * `client/src/fallback.rs` (and Python's `local_kinds.py`), held to `contract/vectors/fallback.json`.
 *
 * The sliding log, which keeps every request, is approximated by the sliding counter (constant memory
 * per key). Memory is bounded: past `MAX_KEYS` keys, state that has expired is dropped first, then
 * everything (a fresh start errs towards allowing, as failing open does).
 *
 * Times are integer nanoseconds since the Unix epoch (bigint); `now` is a parameter so the algorithms
 * are tested with explicit times. The sliding counter's weighting of the previous window is the one
 * float, as in core.
 */
import type { Limit } from "./command.js";
import { Decision } from "./decision.js";
import { UsageError } from "./errors.js";
import { CONTRACT } from "./contract.js";
import { Concurrency, FixedWindow, Policy, SlidingCounter, SlidingLog, TokenBucket } from "./policy.js";

/** The most keys kept (the contract's `fallback.max_keys`): past it, expired state goes first, then everything. */
export const MAX_KEYS: number = CONTRACT.fallback.max_keys;
const MS = 1_000_000n;

type Kind = "token_bucket" | "fixed_window" | "sliding_counter" | "concurrency";

/** One policy at an instance's share; `period` is ns per token for a bucket, the window or the lease otherwise. */
interface Params {
  kind: Kind;
  limit: bigint;
  period: bigint;
}

interface Verdict {
  allowed: boolean;
  limit: bigint;
  remaining: bigint;
  /** null: never fits. */
  retryAfterNs: bigint | null;
  resetAfterNs: bigint;
}

type State =
  | { t: "bucket"; tat: bigint }
  | { t: "window"; end: bigint; count: bigint }
  | { t: "counter"; start: bigint; prev: bigint; curr: bigint }
  | { t: "leases"; held: Map<string, [end: bigint, weight: bigint]> };

interface Outcome {
  verdict: Verdict;
  /** undefined: nothing to write. */
  state?: State;
  expiresAt?: bigint;
}

const max = (a: bigint, b: bigint): bigint => (a > b ? a : b);
const min = (a: bigint, b: bigint): bigint => (a < b ? a : b);

function paramsOf(policy: Policy, instances: bigint): Params {
  const limit = max(1n, policy.limitExact / instances);
  if (policy instanceof TokenBucket) return { kind: "token_bucket", limit, period: policy.intervalNs * instances };
  if (policy instanceof Concurrency) return { kind: "concurrency", limit, period: policy.periodNs };
  if (policy instanceof FixedWindow) return { kind: "fixed_window", limit, period: policy.periodNs };
  if (policy instanceof SlidingCounter || policy instanceof SlidingLog) return { kind: "sliding_counter", limit, period: policy.periodNs };
  throw new UsageError(`not a policy: ${String(policy)}`);
}

function never(limit: bigint): Outcome {
  return { verdict: { allowed: false, limit, remaining: 0n, retryAfterNs: null, resetAfterNs: 0n } };
}

function decideOne(p: Params, state: State | undefined, now: bigint, cost: bigint, id: string | undefined): Outcome {
  if (cost < 0n) return never(p.limit);
  if (p.kind === "concurrency") {
    if (id === undefined) return never(p.limit); // a check cannot take a lease it could never release
    return acquireLease(p, state?.t === "leases" ? state : undefined, now, max(cost, 1n), id);
  }
  if (cost > p.limit) {
    // Never fits: denied, with what is left and when it resets as a peek sees them (core's).
    const peek = decideOne(p, state, now, 0n, id).verdict;
    return { verdict: { allowed: false, limit: p.limit, remaining: peek.remaining, retryAfterNs: null, resetAfterNs: peek.resetAfterNs } };
  }
  if (p.kind === "token_bucket") return bucket(p, state?.t === "bucket" ? state : undefined, now, cost);
  if (p.kind === "fixed_window") return fixed(p, state?.t === "window" ? state : undefined, now, cost);
  return counter(p, state?.t === "counter" ? state : undefined, now, cost);
}

function bucket(p: Params, s: { tat: bigint } | undefined, now: bigint, cost: bigint): Outcome {
  const tau = p.limit * p.period; // a full bucket's worth of time
  const start = max(s ? s.tat : now, now);
  const next = start + cost * p.period;
  if (next - now > tau) {
    const remaining = max(0n, (tau - (start - now)) / p.period);
    return { verdict: { allowed: false, limit: p.limit, remaining, retryAfterNs: next - now - tau, resetAfterNs: start - now } };
  }
  const verdict = { allowed: true, limit: p.limit, remaining: (tau - (next - now)) / p.period, retryAfterNs: 0n, resetAfterNs: next - now };
  return cost ? { verdict, state: { t: "bucket", tat: next }, expiresAt: next } : { verdict };
}

function takeOne(p: Params, state: State | undefined, now: bigint, most: bigint): [Outcome, bigint] {
  if (p.kind !== "token_bucket" || most < 1n) return [never(p.limit), 0n];
  const s = state?.t === "bucket" ? state : undefined;
  const tau = p.limit * p.period;
  const start = max(s ? s.tat : now, now);
  const n = min(most, max(0n, (tau - (start - now)) / p.period));
  if (n === 0n) {
    return [{ verdict: { allowed: false, limit: p.limit, remaining: 0n, retryAfterNs: start + p.period - now - tau, resetAfterNs: start - now } }, 0n];
  }
  return [bucket(p, s, now, n), n];
}

function fixed(p: Params, s: { end: bigint; count: bigint } | undefined, now: bigint, cost: bigint): Outcome {
  if (!s || s.end <= now) {
    // An empty window is the initial state: nothing to reset.
    if (!cost) return { verdict: { allowed: true, limit: p.limit, remaining: p.limit, retryAfterNs: 0n, resetAfterNs: 0n } };
    s = { end: now + p.period, count: 0n };
  }
  if (s.count + cost > p.limit) {
    return { verdict: { allowed: false, limit: p.limit, remaining: p.limit - s.count, retryAfterNs: s.end - now, resetAfterNs: s.end - now } };
  }
  const count = s.count + cost;
  const verdict = { allowed: true, limit: p.limit, remaining: p.limit - count, retryAfterNs: 0n, resetAfterNs: s.end - now };
  return cost ? { verdict, state: { t: "window", end: s.end, count }, expiresAt: s.end } : { verdict };
}

type Counter = { t: "counter"; start: bigint; prev: bigint; curr: bigint };

function counterNow(p: Params, s: Counter | undefined, now: bigint): Counter {
  const start = now - (now % p.period);
  if (!s || s.start < start - p.period) return { t: "counter", start, prev: 0n, curr: 0n };
  if (s.start === start - p.period) return { t: "counter", start, prev: s.curr, curr: 0n };
  return s;
}

function counter(p: Params, s: Counter | undefined, now: bigint, cost: bigint): Outcome {
  const c = counterNow(p, s, now);
  const w = p.period;
  const elapsed = now - c.start;
  const estimate = Number(c.prev * (w - elapsed)) / Number(w) + Number(c.curr);
  const reset = c.curr || c.prev ? c.start + (c.curr ? 2n * w : w) - now : 0n;
  const limit = Number(p.limit);
  if (estimate + Number(cost) > limit) {
    const left = p.limit - cost;
    const retry = c.curr + cost > p.limit
      ? c.start + w - now + (w - (w * left) / max(c.curr, 1n)) // only the next window's decay can make room
      : w - (w * (left - c.curr)) / max(c.prev, 1n) - elapsed; // the previous window's weight must decay
    const remaining = BigInt(Math.max(0, Math.trunc(limit - estimate)));
    return { verdict: { allowed: false, limit: p.limit, remaining, retryAfterNs: max(retry, MS), resetAfterNs: reset } };
  }
  const verdict = { allowed: true, limit: p.limit, remaining: BigInt(Math.trunc(limit - estimate - Number(cost))), retryAfterNs: 0n, resetAfterNs: reset };
  if (!cost) return { verdict };
  return {
    verdict: { ...verdict, resetAfterNs: c.start + 2n * w - now },
    state: { t: "counter", start: c.start, prev: c.prev, curr: c.curr + cost },
    expiresAt: c.start + 2n * w,
  };
}

function live(s: { held: Map<string, [bigint, bigint]> } | undefined, now: bigint): Map<string, [bigint, bigint]> {
  const out = new Map<string, [bigint, bigint]>();
  if (s) for (const [id, e] of s.held) if (e[0] > now) out.set(id, e);
  return out;
}

function used(held: Map<string, [bigint, bigint]>): bigint {
  let u = 0n;
  for (const [, w] of held.values()) u += w;
  return u;
}

function acquireLease(p: Params, s: { held: Map<string, [bigint, bigint]> } | undefined, now: bigint, weight: bigint, id: string): Outcome {
  const held = live(s, now);
  const end = now + p.period;
  const mine = held.get(id);
  if (mine) held.set(id, [end, mine[1]]); // a retry by a holder is the same request
  else {
    const u = used(held);
    if (u + weight > p.limit) {
      let retry: bigint | null = null; // a weight above the limit never fits
      if (weight <= p.limit) {
        let freed = 0n;
        const byEnd = [...held.values()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
        for (const [leaseEnd, w] of byEnd) {
          freed += w;
          retry = leaseEnd - now;
          if (u - freed + weight <= p.limit) break;
        }
      }
      let last = now;
      for (const [e] of held.values()) last = max(last, e);
      return { verdict: { allowed: false, limit: p.limit, remaining: p.limit - u, retryAfterNs: retry, resetAfterNs: last - now } };
    }
    held.set(id, [end, weight]);
  }
  let last = 0n;
  for (const [e] of held.values()) last = max(last, e);
  return {
    verdict: { allowed: true, limit: p.limit, remaining: p.limit - used(held), retryAfterNs: 0n, resetAfterNs: last - now },
    state: { t: "leases", held },
    expiresAt: last,
  };
}

/** The limit a combined decision describes: the longest denial (never fits first), else the fewest left. */
function limitingOf(outcomes: Outcome[]): number {
  const denied = outcomes.map((o, i) => [o, i] as const).filter(([o]) => !o.verdict.allowed);
  if (denied.length) {
    const nev = denied.find(([o]) => o.verdict.retryAfterNs === null);
    if (nev) return nev[1];
    let best = denied[0]!;
    for (const d of denied) if ((d[0].verdict.retryAfterNs ?? 0n) > (best[0].verdict.retryAfterNs ?? 0n)) best = d;
    return best[1];
  }
  let best = 0;
  for (let i = 1; i < outcomes.length; i++) if (outcomes[i]!.verdict.remaining < outcomes[best]!.verdict.remaining) best = i;
  return best;
}

/** Rounded up to whole milliseconds, as the module's replies are. */
const ms = (ns: bigint): number => Number((ns + MS - 1n) / MS);

function decisionOf(v: Verdict, limiting: number, degraded: boolean, error?: Error): Decision {
  return new Decision(v.allowed, Number(v.limit), Number(v.remaining), v.retryAfterNs === null ? null : ms(v.retryAfterNs), ms(v.resetAfterNs), limiting, degraded, error);
}

const EPOCH = BigInt(Date.now()) * MS - process.hrtime.bigint();
/** The clock: ns since the Unix epoch, monotonic (the wall clock when the module loaded, then hrtime). */
export function nowNs(): bigint {
  return EPOCH + process.hrtime.bigint();
}

/** An in-process limiter deciding with `limit / instances` of each policy, per key. */
export class LocalLimiter {
  readonly instances: number;
  private readonly n: bigint;
  private entries = new Map<string, [State, bigint]>();

  constructor(instances = 1) {
    if (!Number.isSafeInteger(instances) || instances < 1) throw new UsageError("fallback: instances must be a whole number >= 1");
    this.instances = instances;
    this.n = BigInt(instances);
  }

  /** Keys held. */
  get size(): number {
    return this.entries.size;
  }

  /** Decides `limits` together, all or nothing, as RL.ALL does. Concurrency limits take no lease here
   * (a check could never release it): use `acquire`. */
  decide(limits: readonly Limit[], now = nowNs(), degraded = true, error?: Error): Decision {
    return this.decideFor(limits, undefined, now, degraded, error);
  }

  /** `decide`, the concurrency limits among `limits` taking leases held by `id` (the cost is the weight). */
  acquire(limits: readonly Limit[], id: string, now = nowNs(), degraded = true, error?: Error): Decision {
    return this.decideFor(limits, id, now, degraded, error);
  }

  /** Frees the lease `id` holds at `key`, as RL.RELEASE: true when it held one. */
  release(key: string, id: string, now = nowNs()): boolean {
    return this.leaseOp(key, id, null, now);
  }

  /** Extends the lease of `id` at `key` to `leaseMs` from now, as RL.RENEW: true when it still held one. */
  renew(key: string, leaseMs: number, id: string, now = nowNs()): boolean {
    return this.leaseOp(key, id, BigInt(leaseMs) * MS, now);
  }

  /** As many whole tokens as the bucket's share holds, up to `most`, as RL.TAKE. Other kinds: a
   * denial that never fits. */
  take(key: string, policy: Policy, most: number, now = nowNs(), degraded = true, error?: Error): { decision: Decision; taken: number } {
    const [outcome, taken] = takeOne(paramsOf(policy, this.n), this.state(key, now), now, BigInt(most));
    this.store(key, outcome, now, 1);
    return { decision: decisionOf(outcome.verdict, 0, degraded, error), taken: Number(taken) };
  }

  /** Gives `units` back (token buckets, fixed windows, sliding counters), as RL.REFUND. */
  refund(key: string, policy: Policy, units: number, now = nowNs()): void {
    const p = paramsOf(policy, this.n);
    const s = this.state(key, now);
    const u = BigInt(units);
    let o: Outcome | undefined;
    const ok: Verdict = { allowed: true, limit: p.limit, remaining: 0n, retryAfterNs: 0n, resetAfterNs: 0n };
    if (s?.t === "bucket" && p.kind === "token_bucket") {
      const tat = max(now, s.tat - u * p.period);
      o = { verdict: ok, state: { t: "bucket", tat }, expiresAt: tat };
    } else if (s?.t === "window" && p.kind === "fixed_window") {
      o = { verdict: ok, state: { t: "window", end: s.end, count: max(0n, s.count - u) }, expiresAt: s.end };
    } else if (s?.t === "counter" && p.kind === "sliding_counter") {
      const c = counterNow(p, s, now);
      o = { verdict: ok, state: { t: "counter", start: c.start, prev: c.prev, curr: max(0n, c.curr - u) }, expiresAt: c.start + 2n * p.period };
    }
    if (o) this.store(key, o, now, 0);
  }

  private decideFor(limits: readonly Limit[], id: string | undefined, now: bigint, degraded: boolean, error?: Error): Decision {
    const outcomes = limits.map(([key, policy, cost]) => decideOne(paramsOf(policy, this.n), this.state(key, now), now, BigInt(cost), id));
    if (!outcomes.length) return decisionOf({ allowed: true, limit: 0n, remaining: 0n, retryAfterNs: 0n, resetAfterNs: 0n }, 0, degraded, error);
    const limiting = limitingOf(outcomes);
    if (outcomes.every((o) => o.verdict.allowed)) {
      this.makeRoom(limits.length, now);
      limits.forEach(([key], i) => this.store(key, outcomes[i]!, now, 0));
    }
    return decisionOf(outcomes[limiting]!.verdict, limiting, degraded, error);
  }

  private leaseOp(key: string, id: string, leaseNs: bigint | null, now: bigint): boolean {
    const s = this.state(key, now);
    const held = live(s?.t === "leases" ? s : undefined, now);
    const mine = held.get(id);
    if (!mine) return false;
    if (leaseNs === null) held.delete(id);
    else held.set(id, [now + leaseNs, mine[1]]);
    let last = now;
    for (const [e] of held.values()) last = max(last, e);
    this.store(key, { verdict: { allowed: true, limit: 0n, remaining: 0n, retryAfterNs: 0n, resetAfterNs: 0n }, state: { t: "leases", held }, expiresAt: last }, now, 0);
    return true;
  }

  private state(key: string, now: bigint): State | undefined {
    const e = this.entries.get(key);
    return e && e[1] > now ? e[0] : undefined;
  }

  private store(key: string, o: Outcome, now: bigint, more: number): void {
    if (!o.state) return;
    if (o.expiresAt! <= now) {
      this.entries.delete(key);
      return;
    }
    if (more) this.makeRoom(more, now);
    this.entries.set(key, [o.state, o.expiresAt!]);
  }

  private makeRoom(more: number, now: bigint): void {
    if (this.entries.size + more <= MAX_KEYS) return;
    for (const [k, e] of this.entries) if (e[1] <= now) this.entries.delete(k);
    if (this.entries.size + more > MAX_KEYS) this.entries.clear();
  }
}
