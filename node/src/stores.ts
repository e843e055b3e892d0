/**
 * Where users already are: stores that put express-rate-limit and @fastify/rate-limit on the module
 * (or the library), through a `Limiter` (its deadline, engine, breaker and failure policy).
 *
 * Each counts a fixed window (RL.FIXED) of the window and limit the package gives it. When Redis does not
 * decide, the limiter's failure policy answers: `open` counts the request as the first, `closed` as
 * one over the limit, `fallback` with the in-process window's own count (this instance's share).
 *
 * Keys: `<prefix><key>:fixed_window` (the kind's owner ends every key an adapter writes, as the
 * contract's `limit_key`). A store made without a `prefix` takes one from what it limits, not from
 * when it was made: `rl:erl:<h>:` and `rl:frl:<h>:`, `h` a short hash of the kind and the store's
 * identity: express-rate-limit's `identifier` when the app gives it as a string (its numbers may then
 * change and the counts carry on), else its `windowMs` and `limit`; @fastify/rate-limit's `max` and
 * `timeWindow` as the registration gives them. Every instance of an app derives the same prefixes
 * whatever the order it makes its stores in. Two stores of one process whose identities are the same
 * still count apart (as express-rate-limit expects: it reports ERR_ERL_DOUBLE_COUNT for two of them on
 * one request): the second gets `rl:erl:<h>-2:`, the third `-3`, in the order they are made; such twins
 * need an explicit `prefix` each to keep their keys whatever that order.
 */
import { createHash } from "node:crypto";
import { Limiter } from "./limiter.js";
import { FixedWindow } from "./policy.js";
import { UsageError } from "./errors.js";

import type { Decision } from "./decision.js";
import { kind } from "./contract.js";

const OWNER = kind(FixedWindow.KIND.name).owner;

/** The default prefixes given in this process, and how many stores took each. */
const taken = new Map<string, number>();

/** The default prefix of a store of `adapter` (`erl`, `frl`) whose identity is `identity`: a short hash
 * of the kind and the identity; a second store of the same in this process gets `-2`, and so on. */
function defaultPrefix(adapter: string, identity: unknown): string {
  const h = createHash("sha256").update(JSON.stringify([FixedWindow.KIND.name, identity])).digest("hex").slice(0, 8);
  const base = `rl:${adapter}:${h}`;
  const n = (taken.get(base) ?? 0) + 1;
  taken.set(base, n);
  return n === 1 ? `${base}:` : `${base}-${n}:`;
}

/** A number as it is; a function (a limit or window computed per request) as `function`. */
const shown = (v: unknown): unknown => (typeof v === "number" || typeof v === "string" ? v : typeof v);

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
  readonly localKeys = false;
  private readonly given: string | undefined;
  private derived: string | undefined;
  private policy: FixedWindow | undefined;
  windowMs = 0;
  /** Denied requests whose decrement is coming (skipFailedRequests: a 429 is a failed request): a
   * denial took nothing, so its decrement gives nothing back. */
  private readonly pending = new Map<string, number>();
  private skipsFailed = false;

  /** `prefix`: the start of every key of this store. Without one the store takes `rl:erl:<h>:` when
   * express-rate-limit hands it its options (`init`), `h` a short hash of the kind and its identity
   * (its `identifier` when a string, else `windowMs` and `limit`); a second store of the same identity
   * in this process gets `rl:erl:<h>-2:`. Give one to keep two stores of the same identity on their
   * keys whatever the order the app makes them in, or to keep a store's keys when its numbers change. */
  constructor(options: { limiter: Limiter; prefix?: string }) {
    if (!(options?.limiter instanceof Limiter)) throw new UsageError("ExpressRateLimitStore: `limiter` must be a Limiter");
    this.limiter = options.limiter;
    this.given = options.prefix;
  }

  /** The start of every key of this store: the one given, else the one `init` derived ("" before it). */
  get prefix(): string {
    return this.given ?? this.derived ?? "";
  }

  /** express-rate-limit's options: the window and the limit come from them, and the default prefix. */
  init(options: Any): void {
    const limit = options.limit ?? options.max;
    if (typeof limit !== "number") {
      throw new UsageError(`ExpressRateLimitStore: \`limit\` must be a number: a limit computed per request cannot be kept by one ${FixedWindow.KIND.command} window (give each group its own rateLimit instance)`);
    }
    this.windowMs = options.windowMs;
    this.skipsFailed = !!options.skipFailedRequests;
    // A limit of 0 blocks everything in express-rate-limit; the window still needs one to exist.
    this.policy = new FixedWindow({ limit: Math.max(1, limit), windowMs: options.windowMs });
    // Once: a store's keys do not move (a second init is a store reused, which express-rate-limit reports).
    if (this.given === undefined && this.derived === undefined) {
      const identity = typeof options.identifier === "string" ? { identifier: options.identifier } : { windowMs: options.windowMs, limit };
      this.derived = defaultPrefix("erl", identity);
    }
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
 * store: fastifyRateLimitStore(limiter) })`. `prefix`: the start of every key of its stores; without
 * one each registration's store takes `rl:frl:<h>:`, `h` a short hash of the kind and the
 * registration's `max` and `timeWindow` (a second registration of the same in this process gets
 * `rl:frl:<h>-2:`), and each route's keys go on with its method and URL. */
export function fastifyRateLimitStore(limiter: Limiter, prefix?: string): new (options?: Any) => Any {
  if (!(limiter instanceof Limiter)) throw new UsageError("fastifyRateLimitStore: pass a Limiter");
  const policies = new Map<string, FixedWindow>();
  const policy = (max: number, windowMs: number): FixedWindow => {
    const k = `${max}/${windowMs}`;
    let p = policies.get(k);
    if (!p) policies.set(k, (p = new FixedWindow({ limit: Math.max(1, max), windowMs })));
    return p;
  };
  return class FastifyRateLimitStore {
    /** The start of this store's keys (its registration's); a route's go on with `route`. */
    readonly prefix: string;
    /** `options`: the registration's (the plugin makes one store per registration, then a child per
     * route with options of its own); `route`, `start`: a child's. */
    constructor(readonly options: Any = {}, readonly route = "", start?: string) {
      // A window RL.FIXED keeps: one that restarts or doubles on each request past the limit is not.
      if (options?.continueExceeding || options?.exponentialBackoff) {
        throw new UsageError(`fastifyRateLimitStore: \`continueExceeding\` and \`exponentialBackoff\` are not offered (${FixedWindow.KIND.command}'s window starts at the key's first request and does not move)`);
      }
      this.prefix = start ?? prefix ?? defaultPrefix("frl", { max: shown(options?.max), timeWindow: shown(options?.timeWindow) });
    }
    incr(key: string, cb: (err: Error | null, result?: { current: number; ttl: number }) => void, timeWindow: number, max: number): void {
      const p = policy(max, timeWindow);
      limiter.check(windowKey(this.prefix + this.route, key), p, 1).then(
        (d) => cb(null, { current: hits(d, max, limiter), ttl: blind(d, limiter) ? timeWindow : d.resetAfterMs }),
        (e: Error) => cb(e),
      );
    }
    /** The window's count without taking from it (`checkRateLimit(req, { increment: false })`):
     * `{ current: 0, ttl: 0 }` for no window; Redis not answering is an error (no failure policy). */
    read(key: string, cb: (err: Error | null, result?: { current: number; ttl: number }) => void, timeWindow: number, max: number): void {
      const p = policy(max, timeWindow);
      limiter.peek(windowKey(this.prefix + this.route, key), p).then(
        (i) => cb(null, i.exists && i.remaining !== undefined ? { current: p.limit - i.remaining, ttl: i.resetAfterMs ?? 0 } : { current: 0, ttl: 0 }),
        (e: Error) => cb(e),
      );
    }
    child(routeOptions: Any): FastifyRateLimitStore {
      return new FastifyRateLimitStore({ ...this.options, ...routeOptions }, `${routeOptions?.routeInfo?.method ?? ""}${routeOptions?.routeInfo?.url ?? ""}:`, this.prefix);
    }
  };
}
