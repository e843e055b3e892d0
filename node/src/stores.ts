/**
 * Where users already are: stores that put express-rate-limit and @fastify/rate-limit on the module
 * (or the library), through a `Limiter` (its deadline, engine, breaker and failure policy).
 *
 * Each counts a fixed window (RL.FIXED) of the window and limit the package gives it. When Redis does not
 * decide, the limiter's failure policy answers: `open` counts the request as the first, `closed` as
 * one over the limit, `fallback` with the in-process window's own count (this instance's share).
 *
 * Keys: `<prefix><key>:fixed_window` (the kind's owner ends every key an adapter writes, as the
 * contract's `limit_key`). Each store made without a `prefix` gets a distinct one, numbered in the
 * order the stores are made in this process (`rl:erl:1:`, `rl:erl:2:`; `rl:frl:1:` ...), so two stores
 * of one app never count in each other's. Instances share a limit only while they make their stores in
 * the same order (one that makes a store conditionally or lazily counts in other keys): the README asks
 * for an explicit `prefix` in production.
 */
import { Limiter } from "./limiter.js";
import { FixedWindow } from "./policy.js";
import { UsageError } from "./errors.js";

import type { Decision } from "./decision.js";
import { kind } from "./contract.js";

const OWNER = kind(FixedWindow.KIND.name).owner;
let erlStores = 0;
let frlStores = 0;

/** The key of the window of `key` under `prefix` (the kind's owner last, as the contract's `limit_key`). */
const windowKey = (prefix: string, key: string): string => `${prefix}${key}:${OWNER}`;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;

/** Whether `d` carries no count: the open or closed failure policy's decision (the fallback's counts). */
const blind = (d: Decision, limiter: Limiter): boolean => d.degraded && !limiter.local;

function hits(d: Decision, limit: number, limiter: Limiter): number {
  if (blind(d, limiter)) return d.allowed ? 1 : limit + 1;
  // A fallback's share is smaller than the limit express-rate-limit compares with: scaled to it.
  if (d.degraded) return d.allowed ? Math.ceil(((d.limit - d.remaining) * limit) / d.limit) : limit + 1;
  return d.allowed ? d.limit - d.remaining : d.limit + 1;
}

/** An express-rate-limit (7+) `Store`: `rateLimit({ windowMs, limit, store: new ExpressRateLimitStore({ limiter }) })`. */
export class ExpressRateLimitStore {
  readonly limiter: Limiter;
  readonly prefix: string;
  readonly localKeys = false;
  private policy: FixedWindow | undefined;
  windowMs = 0;
  /** Denied requests whose decrement is coming (skipFailedRequests: a 429 is a failed request): a
   * denial took nothing, so its decrement gives nothing back. */
  private readonly pending = new Map<string, number>();
  private skipsFailed = false;

  /** `prefix`: the start of every key of this store (default `rl:erl:<n>:`, `n` this store's number
   * among those made in this process without one). Give each store its own to keep its keys whatever
   * the order the app makes them in. */
  constructor(options: { limiter: Limiter; prefix?: string }) {
    if (!(options?.limiter instanceof Limiter)) throw new UsageError("ExpressRateLimitStore: `limiter` must be a Limiter");
    this.limiter = options.limiter;
    this.prefix = options.prefix ?? `rl:erl:${++erlStores}:`;
  }

  /** express-rate-limit's options: the window and the limit come from them. */
  init(options: Any): void {
    const limit = options.limit ?? options.max;
    if (typeof limit !== "number") {
      throw new UsageError("ExpressRateLimitStore: `limit` must be a number: a limit computed per request cannot be kept by one RL.FIXED window (give each group its own rateLimit instance)");
    }
    this.windowMs = options.windowMs;
    this.skipsFailed = !!options.skipFailedRequests;
    // A limit of 0 blocks everything in express-rate-limit; the window still needs one to exist.
    this.policy = new FixedWindow({ limit: Math.max(1, limit), windowMs: options.windowMs });
  }

  private get p(): FixedWindow {
    if (!this.policy) throw new UsageError("ExpressRateLimitStore: init() was not called (pass the store to rateLimit({ store }))");
    return this.policy;
  }

  async increment(key: string): Promise<{ totalHits: number; resetTime: Date | undefined }> {
    const d = await this.limiter.check(windowKey(this.prefix, key), this.p, 1);
    if (!d.allowed && this.skipsFailed) this.pending.set(key, (this.pending.get(key) ?? 0) + 1);
    return { totalHits: hits(d, this.p.limit, this.limiter), resetTime: new Date(Date.now() + (blind(d, this.limiter) ? this.windowMs : d.resetAfterMs)) };
  }

  async decrement(key: string): Promise<void> {
    const pending = this.pending.get(key);
    if (pending) {
      if (pending > 1) this.pending.set(key, pending - 1);
      else this.pending.delete(key);
      return;
    }
    await this.limiter.refund(windowKey(this.prefix, key), this.p, 1);
  }

  async resetKey(key: string): Promise<void> {
    await this.limiter.call(["DEL", windowKey(this.prefix, key)]).catch(() => undefined);
  }

  async get(key: string): Promise<{ totalHits: number; resetTime: Date | undefined } | undefined> {
    const i = await this.limiter.peek(windowKey(this.prefix, key), this.p).catch(() => undefined);
    if (!i?.exists || i.remaining === undefined) return undefined;
    return { totalHits: this.p.limit - i.remaining, resetTime: new Date(Date.now() + (i.resetAfterMs ?? 0)) };
  }
}

/** A @fastify/rate-limit store class on `limiter`: `app.register(fastifyRateLimit, { max, timeWindow,
 * store: fastifyRateLimitStore(limiter) })`. */
export function fastifyRateLimitStore(limiter: Limiter, prefix?: string): new (options?: Any) => Any {
  if (!(limiter instanceof Limiter)) throw new UsageError("fastifyRateLimitStore: pass a Limiter");
  // A distinct default per store class, as ExpressRateLimitStore's.
  const start = prefix ?? `rl:frl:${++frlStores}:`;
  const policies = new Map<string, FixedWindow>();
  const policy = (max: number, windowMs: number): FixedWindow => {
    const k = `${max}/${windowMs}`;
    let p = policies.get(k);
    if (!p) policies.set(k, (p = new FixedWindow({ limit: Math.max(1, max), windowMs })));
    return p;
  };
  return class FastifyRateLimitStore {
    constructor(readonly options: Any = {}, readonly route = "") {
      // A window RL.FIXED keeps: one that restarts or doubles on each request past the limit is not.
      if (options?.continueExceeding || options?.exponentialBackoff) {
        throw new UsageError("fastifyRateLimitStore: `continueExceeding` and `exponentialBackoff` are not offered (RL.FIXED's window starts at the key's first request and does not move)");
      }
    }
    incr(key: string, cb: (err: Error | null, result?: { current: number; ttl: number }) => void, timeWindow: number, max: number): void {
      const p = policy(max, timeWindow);
      limiter.check(windowKey(start + this.route, key), p, 1).then(
        (d) => cb(null, { current: hits(d, max, limiter), ttl: blind(d, limiter) ? timeWindow : d.resetAfterMs }),
        (e: Error) => cb(e),
      );
    }
    /** The window's count without taking from it (`checkRateLimit(req, { increment: false })`):
     * `{ current: 0, ttl: 0 }` for no window; Redis not answering is an error (no failure policy). */
    read(key: string, cb: (err: Error | null, result?: { current: number; ttl: number }) => void, timeWindow: number, max: number): void {
      const p = policy(max, timeWindow);
      limiter.peek(windowKey(start + this.route, key), p).then(
        (i) => cb(null, i.exists && i.remaining !== undefined ? { current: p.limit - i.remaining, ttl: i.resetAfterMs ?? 0 } : { current: 0, ttl: 0 }),
        (e: Error) => cb(e),
      );
    }
    child(routeOptions: Any): FastifyRateLimitStore {
      return new FastifyRateLimitStore({ ...this.options, ...routeOptions }, `${routeOptions?.routeInfo?.method ?? ""}${routeOptions?.routeInfo?.url ?? ""}:`);
    }
  };
}


