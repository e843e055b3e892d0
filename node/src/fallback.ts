/**
 * The local fallback: while Redis cannot decide, each application instance limits on its own at its
 * share of each limit. Imprecise by design: a rough bound that stays available. As
 * `client/src/fallback.rs`, held to it by `contract/vectors/fallback.json`.
 *
 * One algorithm serves every kind whose contract `fallback` is `token_bucket` (every kind but
 * concurrency): core's token bucket (GCRA) of the policy's `limit` refilled over its period, shared by
 * the instances: `limit / instances` tokens (at least 1), refilled `instances` times slower. A token
 * bucket is then itself at its share; a window or a log lets an instance admit at most its share in a
 * burst, plus what refills meanwhile (in any period, at most the share plus `limit / instances`). The
 * kinds whose `fallback` is `leases` (concurrency) keep leases, acquired, renewed and released here. A
 * new kind needs nothing of its own here.
 *
 * Memory is bounded: past `MAX_KEYS` keys, state that has expired is dropped first, then everything (a
 * fresh start errs towards allowing, as failing open does). Times are integer nanoseconds since the
 * Unix epoch (bigint); `now` is a parameter so the algorithm is tested with explicit times.
 */
import type { Limit } from "./command.js";
import { Decision } from "./decision.js";
import { UsageError } from "./errors.js";
import { BOUNDS, CONTRACT } from "./contract.js";
import type { Policy } from "./policy.js";

/** The most keys kept (the contract's `fallback.max_keys`): past it, expired state goes first, then everything. */
export const MAX_KEYS: number = CONTRACT.fallback.max_keys;
const MS = 1_000_000n;
const MAX_HORIZON_NS = BigInt(BOUNDS.max_horizon_secs!) * 1_000_000_000n;

interface Verdict {
  allowed: boolean;
  limit: bigint;
  remaining: bigint;
  /** null: never fits. */
  retryAfterNs: bigint | null;
  resetAfterNs: bigint;
}

type State = { t: "bucket"; tat: bigint } | { t: "leases"; held: Map<string, [end: bigint, weight: bigint]> };

interface Outcome {
  verdict: Verdict;
  /** undefined: nothing to write. */
  state?: State;
  expiresAt?: bigint;
  /** An impossible state replaced: written even when the combination is denied. */
  repair?: boolean;
}

const max = (a: bigint, b: bigint): bigint => (a > b ? a : b);
const min = (a: bigint, b: bigint): bigint => (a < b ? a : b);

function never(limit: bigint): Outcome {
  return { verdict: { allowed: false, limit, remaining: 0n, retryAfterNs: null, resetAfterNs: 0n } };
}

/** Whether the contract's fallback for the policy's kind is leases (concurrency). */
const keepsLeases = (policy: Policy): boolean => policy.kind.fallback === "leases";

/** Core's `TokenBucket` (GCRA): `capacity` tokens, one per `interval` ns; a full refill takes `tau` ns, of
 * which `slack` (below one interval) is rounding that counts as full. */
class Bucket {
  constructor(readonly capacity: bigint, readonly interval: bigint, readonly tau: bigint, readonly slack: bigint) {}

  /** `TokenBucket::per_period(limit, limit, period).share(n)`; undefined for a kind that keeps leases, or
   * when the clock cannot express it (a period within `limit` ns of the horizon). */
  static of(policy: Policy, n: bigint): Bucket | undefined {
    if (keepsLeases(policy)) return undefined;
    const limit = policy.limitExact;
    const period = policy.periodNs;
    const interval = (period + limit - 1n) / limit;
    const tau = interval * limit;
    if (tau > MAX_HORIZON_NS) return undefined;
    const capacity = max(1n, limit / n);
    const shared = interval * n * capacity;
    // A share the clock cannot express: the whole bucket (as core's share does).
    if (shared > MAX_HORIZON_NS) return new Bucket(limit, interval, tau, min(tau - period, interval - 1n));
    return new Bucket(capacity, interval * n, shared, 0n);
  }

  /** The backlog a stored TAT leaves, and whether it is impossible (more than two full refills ahead: a
   * clock fault, counted as an empty bucket). */
  backlog(tat: bigint | undefined, now: bigint): [bigint, boolean] {
    const stored = tat === undefined ? 0n : max(0n, tat - now);
    const depth = this.tau + this.slack;
    return stored > 2n * depth ? [depth, true] : [stored, false];
  }

  /** Core's `TokenBucket::reserve_tat`: `cost` tokens now, or from the future within `maxWait` ns. */
  reserve(tat: bigint | undefined, now: bigint, cost: bigint, maxWait = 0n): Outcome {
    const depth = this.tau + this.slack;
    const [backlog, repair] = this.backlog(tat, now);
    const verdict = (allowed: boolean, backlog: bigint, retryAfterNs: bigint | null): Verdict => ({
      allowed, limit: this.capacity, remaining: max(0n, depth - backlog) / this.interval, retryAfterNs, resetAfterNs: max(0n, backlog - this.slack),
    });
    const unchanged = (v: Verdict): Outcome =>
      repair ? { verdict: v, state: { t: "bucket", tat: now + this.tau }, expiresAt: now + this.tau, repair } : { verdict: v };
    if (cost > this.capacity) return unchanged(verdict(false, backlog, null));
    if (cost === 0n) return unchanged(verdict(true, backlog, 0n));
    const after = backlog + cost * this.interval;
    const wait = max(0n, after - depth);
    if (wait > min(max(maxWait, 0n), this.tau - this.slack)) return unchanged(verdict(false, backlog, wait));
    return { verdict: verdict(true, after, wait), state: { t: "bucket", tat: now + after }, expiresAt: now + after };
  }
}

const tatOf = (state: State | undefined): bigint | undefined => (state?.t === "bucket" ? state.tat : undefined);

function decideOne(policy: Policy, n: bigint, state: State | undefined, now: bigint, cost: bigint, id: string | undefined): Outcome {
  const share = max(1n, policy.limitExact / n);
  if (cost < 0n) return never(share);
  if (keepsLeases(policy)) {
    if (id === undefined) return never(share); // a check cannot take a lease it could never release
    return acquireLease(share, policy.periodNs, state?.t === "leases" ? state : undefined, now, max(cost, 1n), id);
  }
  const bucket = Bucket.of(policy, n);
  return bucket ? bucket.reserve(tatOf(state), now, cost) : never(share);
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

/** Core's `Leases` decision: a lease of `weight` for `id` at a share of `limit` (a retry by a holder is
 * the same request: the same slot, for longer). */
function acquireLease(limit: bigint, leaseNs: bigint, s: { held: Map<string, [bigint, bigint]> } | undefined, now: bigint, weight: bigint, id: string): Outcome {
  const held = live(s, now);
  const end = now + leaseNs;
  const mine = held.get(id);
  if (mine) held.set(id, [end, mine[1]]); // a retry by a holder is the same request
  else {
    const u = used(held);
    if (u + weight > limit) {
      let retry: bigint | null = null; // a weight above the limit never fits
      if (weight <= limit) {
        let freed = 0n;
        const byEnd = [...held.values()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
        for (const [leaseEnd, w] of byEnd) {
          freed += w;
          retry = leaseEnd - now;
          if (u - freed + weight <= limit) break;
        }
      }
      let last = now;
      for (const [e] of held.values()) last = max(last, e);
      return { verdict: { allowed: false, limit: limit, remaining: limit - u, retryAfterNs: retry, resetAfterNs: last - now } };
    }
    held.set(id, [end, weight]);
  }
  let last = 0n;
  for (const [e] of held.values()) last = max(last, e);
  return {
    verdict: { allowed: true, limit: limit, remaining: limit - used(held), retryAfterNs: 0n, resetAfterNs: last - now },
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

  /** As many whole tokens as the bucket's share holds, up to `most`, as RL.TAKE. A kind that keeps
   * leases: a denial that never fits. */
  take(key: string, policy: Policy, most: number, now = nowNs(), degraded = true, error?: Error): { decision: Decision; taken: number } {
    const bucket = Bucket.of(policy, this.n);
    if (!bucket) return { decision: decisionOf(never(max(1n, policy.limitExact / this.n)).verdict, 0, degraded, error), taken: 0 };
    const tat = tatOf(this.state(key, now));
    const available = bucket.reserve(tat, now, 0n).verdict.remaining;
    const taken = max(min(available, BigInt(most)), 1n);
    const outcome = bucket.reserve(tat, now, taken);
    this.store(key, outcome, now, 1);
    return { decision: decisionOf(outcome.verdict, 0, degraded, error), taken: outcome.verdict.allowed ? Number(taken) : 0 };
  }

  /** Gives `units` back to the bucket's share (the kinds that take refunds), as RL.REFUND. */
  refund(key: string, policy: Policy, units: number, now = nowNs()): void {
    const bucket = Bucket.of(policy, this.n);
    if (!bucket || !policy.kind.refunds) return;
    const [backlog] = bucket.backlog(tatOf(this.state(key, now)), now);
    if (backlog === 0n || units === 0) return;
    const tat = now + max(0n, backlog - min(BigInt(units), bucket.capacity) * bucket.interval);
    this.store(key, { verdict: never(0n).verdict, state: { t: "bucket", tat }, expiresAt: tat }, now, 0);
  }

  private decideFor(limits: readonly Limit[], id: string | undefined, now: bigint, degraded: boolean, error?: Error): Decision {
    const outcomes = limits.map(([key, policy, cost]) => decideOne(policy, this.n, this.state(key, now), now, BigInt(cost), id));
    if (!outcomes.length) return decisionOf({ allowed: true, limit: 0n, remaining: 0n, retryAfterNs: 0n, resetAfterNs: 0n }, 0, degraded, error);
    const limiting = limitingOf(outcomes);
    const allowed = outcomes.every((o) => o.verdict.allowed);
    this.makeRoom(limits.length, now);
    limits.forEach(([key], i) => {
      if (allowed || outcomes[i]!.repair) this.store(key, outcomes[i]!, now, 0);
    });
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
