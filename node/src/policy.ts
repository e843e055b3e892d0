/**
 * Limiter policies: which algorithm, with which parameters, validated when built with the module's own
 * rules (the contract's bounds and error texts, core's arithmetic), so a policy is valid exactly when
 * the module would accept its parameters: `new TokenBucket({ capacity: 0, perSecond: 5 })` throws
 * `PolicyError("token_bucket: invalid capacity: must be a whole number >= 1")`.
 *
 * Lengths are milliseconds (whole), rates tokens per second. Whole numbers may be `number` or `bigint`.
 */
import { BATCHING, BOUNDS, ERRORS, MAX_WHOLE, kind as contractKind, paramError, type KindSpec } from "./contract.js";
import { PolicyError } from "./errors.js";

const NS_PER_SEC = 1_000_000_000n;
const MAX_HORIZON_SECS = BigInt(BOUNDS.max_horizon_secs!);
const MAX_HORIZON_NS = MAX_HORIZON_SECS * NS_PER_SEC;
const MAX_HORIZON_MS = Number(MAX_HORIZON_SECS) * 1000;
const MAX_RATE = BigInt(BOUNDS.max_rate_per_sec!);
const MAX_DIGITS = BOUNDS.max_decimal_digits!;
const MAX_FRACTION_DIGITS = BOUNDS.max_decimal_exponent! + MAX_DIGITS;

export type Whole = number | bigint;

/** Batched units (docs/high-volume.md): a check takes up to `batch` units for its key in one call and
 * spends them in this process; the unused ones go back when `leaseMs` ends (default: the contract's
 * 1 s) or the limiter closes. For the kinds that take refunds (a token bucket, a fixed window, a
 * sliding counter). */
export interface BatchOptions {
  /** The most units one call takes, a whole number from 1 to the policy's limit. */
  batch?: number;
  /** How long units taken may be held, whole ms (at least 1). */
  leaseMs?: number;
}

/** A policy's batching, validated. */
export interface Batching {
  readonly batch: number;
  readonly leaseMs: number;
}

/** `opts`' batching for a policy of `kind` and `limit`, refused where the kind cannot batch (it takes
 * no refunds) or the numbers are out of bounds; undefined when `batch` is not given. */
function batchingOf(kind: KindSpec, limit: bigint, opts: BatchOptions | undefined): Batching | undefined {
  const batch = opts?.batch;
  const lease = opts?.leaseMs;
  if (batch === undefined && lease === undefined) return undefined;
  const errors = BATCHING.errors;
  // The kinds that batch are those whose window end the contract knows (they take refunds).
  if (!(kind.name in BATCHING.kinds)) throw new PolicyError(kind.name, "batch", errors.kind.replace("{kind}", kind.name));
  if (typeof batch !== "number" || !Number.isSafeInteger(batch) || batch < 1 || BigInt(batch) > limit) {
    throw new PolicyError(kind.name, "batch", errors.batch);
  }
  const leaseMs = lease ?? BATCHING.lease_ms;
  if (typeof leaseMs !== "number" || !Number.isInteger(leaseMs) || leaseMs < 1 || leaseMs > MAX_HORIZON_MS) {
    throw new PolicyError(kind.name, "lease", errors.lease);
  }
  return { batch, leaseMs };
}

/** One limit's algorithm and parameters. */
export abstract class Policy {
  /** The contract's declaration of this policy's kind. */
  abstract readonly kind: KindSpec;
  /** The two parameters as the commands take them after the key. */
  readonly params: readonly [string, string];
  /** The limit exactly (u64); `limit` is it as a number. */
  readonly limitExact: bigint;
  /** What `RateLimit-Limit` says: the capacity or limit. */
  readonly limit: number;
  /** The time the limit is measured over (a window, a lease, a bucket's full refill), in ns. */
  readonly periodNs: bigint;
  /** The same in milliseconds (rounded up). */
  readonly periodMs: number;
  /** Batched units, when the policy was given `batch`. */
  readonly batching: Batching | undefined;

  protected constructor(limit: bigint, params: [string, string], periodNs: bigint, kind: KindSpec, opts: BatchOptions | undefined) {
    this.batching = batchingOf(kind, limit, opts);
    this.limitExact = limit;
    this.limit = Number(limit);
    this.params = params;
    this.periodNs = periodNs;
    this.periodMs = Number((periodNs + 999_999n) / 1_000_000n);
  }

  toString(): string {
    return `${this.kind.name}(${this.params.join(", ")})`;
  }
}

function whole(kind: string, name: string, value: unknown, high: bigint, expected: string): bigint {
  let v: bigint;
  if (typeof value === "bigint") v = value;
  else if (typeof value === "number" && Number.isInteger(value)) v = BigInt(value);
  else throw new PolicyError(kind, name, expected);
  if (v < 1n) throw new PolicyError(kind, name, expected);
  if (v > MAX_WHOLE) throw new PolicyError(kind, name, ERRORS.too_large);
  if (v > high) throw new PolicyError(kind, name, expected);
  return v;
}

/** A number's plain decimal text, no exponent, no trailing zeros (`5`, `0.5`, `0.0000001`): the
 * shortest digits that read back as the number, as Rust's `{}` prints an f64. */
export function plainDecimal(x: number): string {
  const s = String(x);
  const m = /^(-?)(\d+)(?:\.(\d+))?e([+-]\d+)$/.exec(s);
  if (!m) return s;
  const [, sign, int, frac = "", exp] = m;
  const digits = int! + frac;
  const point = int!.length + Number(exp);
  let out: string;
  if (point <= 0) out = "0." + "0".repeat(-point) + digits;
  else if (point >= digits.length) out = digits + "0".repeat(point - digits.length);
  else out = digits.slice(0, point) + "." + digits.slice(point);
  if (out.includes(".")) out = out.replace(/0+$/, "").replace(/\.$/, "");
  return sign + out;
}

/** What core's decimal parser refuses as out of range: too many significant or fraction digits. */
function outOfRange(text: string): boolean {
  const [w = "", f = ""] = text.split(".");
  const fraction = f.replace(/0+$/, "");
  return (w + fraction).replace(/^0+/, "").length > MAX_DIGITS || fraction.length > MAX_FRACTION_DIGITS;
}

/** The exact value of a plain decimal text as a fraction n / d. */
function fraction(text: string): [bigint, bigint] {
  const [w = "0", f = ""] = text.split(".");
  return [BigInt(w + f), 10n ** BigInt(f.length)];
}

const ceilDiv = (a: bigint, b: bigint): bigint => (a + b - 1n) / b;

function milliseconds(kind: string, name: string, value: unknown, expected: string): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value <= 0 || value > MAX_HORIZON_MS) {
    throw new PolicyError(kind, name, expected);
  }
  return value;
}

/** A length as the commands write it, from whole milliseconds: `1.500`. */
export function secondsText(ms: number): string {
  return `${Math.floor(ms / 1000)}.${String(ms % 1000).padStart(3, "0")}`;
}

/** RL.TOKEN: bursts of up to `capacity`, `perSecond` tokens per second on average. */
export class TokenBucket extends Policy {
  static readonly KIND = contractKind("token_bucket");
  readonly kind = TokenBucket.KIND;
  readonly capacity: number;
  readonly perSecond: number;
  /** The time one token takes to come back (core's emission interval), ns, rounded up. */
  readonly intervalNs: bigint;

  constructor(opts: { capacity: Whole; perSecond: number } & BatchOptions) {
    const k = TokenBucket.KIND.name;
    const capacity = whole(k, "capacity", opts.capacity, MAX_WHOLE, paramError(k, "capacity"));
    const rate = opts.perSecond;
    if (typeof rate !== "number" || !Number.isFinite(rate) || !(rate > 0)) {
      throw new PolicyError(k, "rate", paramError(k, "rate"));
    }
    const text = plainDecimal(rate);
    if (outOfRange(text)) throw new PolicyError(k, "rate", ERRORS.out_of_range);
    const [n, d] = fraction(text);
    if (ceilDiv(n, d) > MAX_RATE) throw new PolicyError(k, "rate", paramError(k, "rate", 1));
    // core/src/token_bucket.rs: the emission interval and a full refill, in ns, rounded up.
    const interval = ceilDiv(NS_PER_SEC * d, n);
    const exact = ceilDiv(capacity * NS_PER_SEC * d, n);
    const tau = interval * capacity;
    if (tau > MAX_HORIZON_NS || interval === 0n) throw new PolicyError(k, "capacity", paramError(k, "capacity", 1));
    const least = (a: bigint, b: bigint): bigint => (a < b ? a : b);
    const slack = least(tau - least(exact, tau), interval - 1n);
    super(capacity, [capacity.toString(), text], tau - slack, TokenBucket.KIND, opts);
    this.capacity = Number(capacity);
    this.perSecond = rate;
    this.intervalNs = interval;
  }
}

abstract class Windowed extends Policy {
  /** The window in milliseconds. */
  readonly windowMs: number;
  protected constructor(k: KindSpec, opts: { limit: Whole; windowMs: number } & BatchOptions, high: bigint) {
    const limit = whole(k.name, "limit", opts.limit, high, paramError(k.name, "limit"));
    const ms = milliseconds(k.name, "window", opts.windowMs, paramError(k.name, "window"));
    super(limit, [limit.toString(), secondsText(ms)], BigInt(ms) * 1_000_000n, k, opts);
    this.windowMs = ms;
  }
}

/** RL.FIXED: `limit` units per window; a window starts at the key's first request. */
export class FixedWindow extends Windowed {
  static readonly KIND = contractKind("fixed_window");
  readonly kind = FixedWindow.KIND;
  constructor(opts: { limit: Whole; windowMs: number } & BatchOptions) {
    super(FixedWindow.KIND, opts, MAX_WHOLE);
  }
}

/** RL.SLIDECOUNT: the sliding window counter, O(1) memory. */
export class SlidingCounter extends Windowed {
  static readonly KIND = contractKind("sliding_counter");
  readonly kind = SlidingCounter.KIND;
  constructor(opts: { limit: Whole; windowMs: number } & BatchOptions) {
    super(SlidingCounter.KIND, opts, MAX_WHOLE);
  }
}

/** RL.SLIDE: the exact sliding log, at most `limit` requests in any window. Its cost is always 1. */
export class SlidingLog extends Windowed {
  static readonly KIND = contractKind("sliding_log");
  readonly kind = SlidingLog.KIND;
  /** `batch` is refused: a log records requests, not units. */
  constructor(opts: { limit: Whole; windowMs: number } & BatchOptions) {
    super(SlidingLog.KIND, opts, BigInt(BOUNDS.max_log_limit!));
  }
}

/** RL.ACQUIRE: at most `limit` weight in flight, each permit on a lease of `leaseMs` its holder renews. */
export class Concurrency extends Policy {
  static readonly KIND = contractKind("concurrency");
  readonly kind = Concurrency.KIND;
  readonly leaseMs: number;
  /** `batch` is refused: leases are released, not spent. */
  constructor(opts: { limit: Whole; leaseMs: number; batch?: number }) {
    const k = Concurrency.KIND.name;
    const expected = paramError(k, "limit");
    // In core's order: a whole limit, the lease, then the limit's range.
    const limit = whole(k, "limit", opts.limit, MAX_WHOLE, expected);
    const ms = milliseconds(k, "lease", opts.leaseMs, paramError(k, "lease"));
    if (limit > BigInt(BOUNDS.max_lease_limit!)) throw new PolicyError(k, "limit", expected);
    super(limit, [limit.toString(), secondsText(ms)], BigInt(ms) * 1_000_000n, Concurrency.KIND, opts.batch === undefined ? undefined : { batch: opts.batch });
    this.leaseMs = ms;
  }
}
