/**
 * rate-limiter-flexible's `RateLimiterCompatibleAbstract` API on the module (or the library), through a
 * `Limiter` (its deadline, engine, breaker and failure policy): `consume`, `penalty`, `reward`, `get`,
 * `set`, `block`, `delete`, resolving with a `RateLimiterRes` or rejecting with one, for its users'
 * code as it is.
 *
 * `points` per `duration` seconds is one fixed window (RL.FIXED) that starts at the key's first request,
 * as rate-limiter-flexible's own. Blocks (`block`, `blockDuration`, `set` above `points`) live in a
 * second key, `<key>:block`, read in parallel with each consume. Where the module's rules differ from
 * rate-limiter-flexible's counters (a denied request takes nothing, a count never passes the limit nor
 * goes below zero), see README.md.
 */
import { Limiter } from "./limiter.js";
import { FixedWindow } from "./policy.js";
import { UsageError } from "./errors.js";
import * as command from "./command.js";
import { Decision } from "./decision.js";
import { kind } from "./contract.js";

const OWNER = kind(FixedWindow.KIND.name).owner;

/** rate-limiter-flexible's result: the same fields, `toString`, `toJSON`. */
export class RateLimiterRes {
  remainingPoints: number;
  msBeforeNext: number;
  consumedPoints: number;
  isFirstInDuration: boolean;
  constructor(remainingPoints = 0, msBeforeNext = 0, consumedPoints = 0, isFirstInDuration = false) {
    this.remainingPoints = remainingPoints;
    this.msBeforeNext = msBeforeNext;
    this.consumedPoints = consumedPoints;
    this.isFirstInDuration = Boolean(isFirstInDuration);
  }
  toJSON(): { remainingPoints: number; msBeforeNext: number; consumedPoints: number; isFirstInDuration: boolean } {
    return { remainingPoints: this.remainingPoints, msBeforeNext: this.msBeforeNext, consumedPoints: this.consumedPoints, isFirstInDuration: this.isFirstInDuration };
  }
  toString(): string {
    return JSON.stringify(this.toJSON());
  }
}

export interface RateLimiterModuleOptions {
  limiter: Limiter;
  /** Points per duration (default 4, as rate-limiter-flexible's). */
  points?: number;
  /** The window, seconds (default 1); whole milliseconds. */
  duration?: number;
  /** When a consume is rejected, block the key this many seconds (default 0: no block). */
  blockDuration?: number;
  /** Keys are `<keyPrefix>:<key>` (default `rlflx`, as rate-limiter-flexible's). */
  keyPrefix?: string;
}

/** A class with rate-limiter-flexible's `RateLimiterCompatibleAbstract` API on the module. */
export class RateLimiterModule {
  readonly limiter: Limiter;
  readonly points: number;
  readonly duration: number;
  blockDuration: number;
  /** Not supported (always false): the module decides at once. */
  execEvenly = false;
  readonly keyPrefix: string;
  private readonly policy: FixedWindow;

  constructor(opts: RateLimiterModuleOptions) {
    if (!(opts?.limiter instanceof Limiter)) throw new UsageError("RateLimiterModule: `limiter` must be a Limiter");
    this.limiter = opts.limiter;
    this.points = opts.points ?? 4;
    this.duration = opts.duration ?? 1;
    this.blockDuration = opts.blockDuration ?? 0;
    this.keyPrefix = opts.keyPrefix ?? "rlflx";
    if (!Number.isSafeInteger(this.points) || this.points < 1) throw new UsageError("RateLimiterModule: points must be a whole number >= 1");
    if (!(this.duration > 0)) {
      throw new UsageError(`RateLimiterModule: duration must be > 0 seconds (a window that never ends, duration 0, is not kept by ${FixedWindow.KIND.command})`);
    }
    this.policy = new FixedWindow({ limit: this.points, windowMs: Math.round(this.duration * 1000) });
  }

  getKey(key: string | number): string {
    return `${this.keyPrefix}:${key}`;
  }

  /** The window's key: `getKey(key)` and the kind's owner (`rlflx:ada:fixed_window`), as the contract's
   * `limit_key` ends every key an adapter writes. */
  private windowKey(key: string | number): string {
    return `${this.getKey(key)}:${OWNER}`;
  }

  private blockKey(key: string | number): string {
    return `${this.getKey(key)}:block`;
  }

  /** ms the key stays blocked (0: not blocked; -1: blocked with no end); rejects when Redis does not answer. */
  private async blocked(key: string | number): Promise<number> {
    const ms = Number(await this.limiter.call(["PTTL", this.blockKey(key)]));
    return ms === -2 ? 0 : ms;
  }

  private res(d: Decision, consumed: number, first = false): RateLimiterRes {
    return new RateLimiterRes(Math.max(0, d.remaining), d.resetAfterMs, consumed, first);
  }

  /** Consumes `points` (default 1): resolves with the result, rejects with a `RateLimiterRes` (no
   * points left, or the key blocked) or with an `Error` (a usage error). */
  async consume(key: string | number, points = 1): Promise<RateLimiterRes> {
    if (!Number.isSafeInteger(points) || points < 0) throw new UsageError("RateLimiterModule: points to consume must be a whole number >= 0");
    const k = this.windowKey(key);
    const [d, blockedMs] = await Promise.all([
      this.limiter.check(k, this.policy, points),
      this.blocked(key).catch(() => 0), // Redis not answering: the failure policy's decision stands
    ]);
    if (blockedMs !== 0) {
      // A blocked consume counts (in the block key, whose expiry INCRBY keeps), as rate-limiter-flexible's.
      const [consumed] = await Promise.all([
        this.limiter.call(["INCRBY", this.blockKey(key), String(points)]).then(Number, () => this.points + 1 + points),
        d.allowed && !d.degraded && points > 0 ? this.limiter.refund(k, this.policy, points) : undefined,
      ]);
      throw new RateLimiterRes(0, blockedMs, consumed, false);
    }
    const used = d.limit - d.remaining;
    if (d.allowed) {
      // The fallback's share is smaller than `points`: its count, scaled to them.
      const consumed = d.degraded ? (this.limiter.local ? Math.ceil((used * this.points) / Math.max(1, d.limit)) : points) : used;
      return new RateLimiterRes(Math.max(0, this.points - consumed), d.degraded && !this.limiter.local ? this.duration * 1000 : d.resetAfterMs, consumed, !d.degraded && used === points && points > 0);
    }
    const consumed = (d.degraded ? this.points : used) + points; // as rate-limiter-flexible counts a rejection
    if (this.blockDuration > 0 && !d.degraded) {
      const blocked = await this.block(key, this.blockDuration);
      throw new RateLimiterRes(0, blocked.msBeforeNext, consumed, true); // the block starts a new duration
    }
    const ms = d.retryAfterMs ?? (d.resetAfterMs || this.duration * 1000);
    throw new RateLimiterRes(0, ms, consumed, !d.degraded && used === 0);
  }

  /** Adds `points` without rejecting. The module's count never passes the limit: a penalty past it
   * fills the window. */
  async penalty(key: string | number, points = 1): Promise<RateLimiterRes> {
    const k = this.windowKey(key);
    let d = await this.limiter.check(k, this.policy, points);
    if (!d.allowed && d.remaining > 0 && !d.degraded) d = await this.limiter.check(k, this.policy, d.remaining);
    return this.res(d, d.limit - d.remaining);
  }

  /** Gives `points` back (the count stops at 0). */
  async reward(key: string | number, points = 1): Promise<RateLimiterRes> {
    const k = this.windowKey(key);
    await this.limiter.refund(k, this.policy, points);
    const d = await this.limiter.check(k, this.policy, 0);
    return this.res(d, d.limit - d.remaining);
  }

  /** The key's state, or null when it has none. Rejects when Redis does not answer. */
  async get(key: string | number): Promise<RateLimiterRes | null> {
    const [i, blockedMs, count] = await Promise.all([
      this.limiter.peek(this.windowKey(key), this.policy), this.blocked(key), this.limiter.call(["GET", this.blockKey(key)]),
    ]);
    if (blockedMs !== 0) return new RateLimiterRes(0, blockedMs, Number(count ?? this.points + 1), false);
    if (!i.exists || i.remaining === undefined) return null;
    return new RateLimiterRes(i.remaining, i.resetAfterMs ?? 0, this.points - i.remaining, false);
  }

  /** Sets the key's consumed points for `secDuration` seconds (0: the window's duration; above
   * `points`: a block of `secDuration`, 0 for one with no end). */
  async set(key: string | number, points: number, secDuration: number): Promise<RateLimiterRes> {
    if (points > this.points) {
      await this.limiter.call(["DEL", this.windowKey(key)]);
      const b = await this.block(key, secDuration);
      await this.limiter.call(["SET", this.blockKey(key), String(points), "KEEPTTL"]);
      return new RateLimiterRes(0, b.msBeforeNext, points, false);
    }
    await this.delete(key);
    const windowMs = Math.round((secDuration > 0 ? Math.min(secDuration, this.duration) : this.duration) * 1000);
    if (points <= 0) return new RateLimiterRes(this.points, windowMs, 0, false);
    const d = Decision.fromReply(await this.limiter.call(command.decide([[this.windowKey(key), new FixedWindow({ limit: this.points, windowMs }), points]])));
    return new RateLimiterRes(0, d.resetAfterMs, points, false); // as rate-limiter-flexible's set
  }

  /** Blocks the key for `secDuration` seconds (0: with no end). */
  async block(key: string | number, secDuration: number): Promise<RateLimiterRes> {
    const ms = Math.round(secDuration * 1000);
    const count = String(this.points + 1);
    await this.limiter.call(ms > 0 ? ["SET", this.blockKey(key), count, "PX", String(ms)] : ["SET", this.blockKey(key), count]);
    return new RateLimiterRes(0, ms === 0 ? -1 : ms, this.points + 1, false);
  }

  /** Deletes the key's state and block: true when there was either. */
  async delete(key: string | number): Promise<boolean> {
    const n = await Promise.all([this.limiter.call(["DEL", this.windowKey(key)]), this.limiter.call(["DEL", this.blockKey(key)])]);
    return n.some((v) => Number(v) > 0);
  }
}
