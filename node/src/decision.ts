/** What a limiter says about one request: the five fields of every RL.* reply, plus whether Redis or
 * the failure policy decided. As `client/src/decision.rs`. Times are whole milliseconds. */
import { ReplyError } from "./errors.js";

export class Decision {
  constructor(
    /** The request is allowed. */
    readonly allowed: boolean,
    /** The capacity or limit (`RateLimit-Limit`). */
    readonly limit: number,
    /** Units left after this request (`RateLimit-Remaining`). */
    readonly remaining: number,
    /** 0 when allowed; when denied, ms until the same request would be allowed; null: it never fits. */
    readonly retryAfterMs: number | null,
    /** ms until the limiter is back to its initial state (bucket full, window empty). */
    readonly resetAfterMs: number,
    /** In a multi-limit check, the 0-based position of the limit this decision describes. */
    readonly limiting = 0,
    /** Redis did not decide (unreachable, too slow, breaker open, misconfigured): the failure policy did. */
    readonly degraded = false,
    /** Why Redis did not decide, when degraded. */
    readonly error?: Error,
    /** Decided in this process without a round trip: a pre-check's denial or batched units spent. */
    readonly local = false,
  ) {}

  /** The request can never be allowed with this policy (its cost is above the limit). */
  get neverFits(): boolean {
    return !this.allowed && this.retryAfterMs === null;
  }

  /** `Retry-After` in whole seconds: rounded up, at least 1; null when allowed or never fits. */
  retryAfterSecs(): number | null {
    if (this.allowed || this.retryAfterMs === null) return null;
    return Math.max(1, Math.ceil(this.retryAfterMs / 1000));
  }

  /** `RateLimit-Reset` in whole seconds, rounded up. */
  resetAfterSecs(): number {
    return Math.ceil(this.resetAfterMs / 1000);
  }

  with(changes: Partial<Pick<Decision, "allowed" | "remaining" | "retryAfterMs" | "resetAfterMs" | "limiting" | "degraded" | "local">>): Decision {
    return new Decision(
      changes.allowed ?? this.allowed, this.limit, changes.remaining ?? this.remaining,
      changes.retryAfterMs === undefined ? this.retryAfterMs : changes.retryAfterMs,
      changes.resetAfterMs ?? this.resetAfterMs, changes.limiting ?? this.limiting, changes.degraded ?? this.degraded, this.error,
      changes.local ?? this.local,
    );
  }

  /** Reads an RL.* reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms (, sixth)]`. */
  static fromReply(reply: unknown): Decision {
    if (Array.isArray(reply) && reply.length === 5) {
      // The usual reply, five integers: read without copying it.
      const r = reply as unknown[];
      const allowed = r[0], limit = r[1], remaining = r[2], retry = r[3], reset = r[4];
      if (isInt(allowed) && isInt(limit) && isInt(remaining) && isInt(retry) && isInt(reset)) {
        return new Decision(allowed === 1, limit, remaining, retry >= 0 ? retry : null, Math.max(0, reset), 0);
      }
    }
    const f = integers(reply);
    if (f.length < 5) throw new ReplyError(`not a decision: ${JSON.stringify(reply)}`);
    const [allowed, limit, remaining, retry, reset] = f as [number, number, number, number, number];
    return new Decision(
      allowed === 1, limit, remaining, retry >= 0 ? retry : null, Math.max(0, reset),
      f.length > 5 ? Math.max(0, f[5]! - 1) : 0,
    );
  }
}

/** What a partial grant (RL.TAKE, a batch reservation) took: the bucket after it, and the units taken. */
export interface Taken {
  decision: Decision;
  taken: number;
}

export function takenFromReply(reply: unknown): Taken {
  const f = integers(reply);
  if (f.length < 6) throw new ReplyError(`not a partial grant: ${JSON.stringify(reply)}`);
  return { decision: Decision.fromReply(f.slice(0, 5)), taken: Math.max(0, f[5]!) };
}

/** What a limiter key holds (RL.INSPECT, read-only). */
export interface Inspection {
  exists: boolean;
  limiter?: string;
  remaining?: number;
  retryAfterMs?: number | null;
  resetAfterMs?: number;
  fields: Record<string, number>;
}

export function inspectionFromReply(reply: unknown): Inspection {
  if (reply === null || reply === undefined) return { exists: false, fields: {} };
  const pairs: [string, unknown][] = [];
  if (reply instanceof Map) for (const [k, v] of reply) pairs.push([String(k), v]);
  else if (Array.isArray(reply) && reply.length % 2 === 0) {
    for (let i = 0; i < reply.length; i += 2) pairs.push([String(reply[i]), reply[i + 1]]);
  } else if (typeof reply === "object") for (const [k, v] of Object.entries(reply)) pairs.push([k, v]);
  else throw new ReplyError(`not field/value pairs: ${JSON.stringify(reply)}`);
  const fields: Record<string, number> = {};
  let limiter: string | undefined;
  for (const [k, v] of pairs) {
    if (k === "limiter") limiter = String(v);
    else if (typeof v === "number") fields[k] = v;
  }
  const retry = fields["retry_after_ms"];
  const out: Inspection = { exists: true, fields };
  if (limiter !== undefined) out.limiter = limiter;
  if (fields["remaining"] !== undefined) out.remaining = fields["remaining"];
  if (retry !== undefined) out.retryAfterMs = retry < 0 ? null : retry;
  if (fields["reset_after_ms"] !== undefined) out.resetAfterMs = fields["reset_after_ms"];
  return out;
}

function isInt(v: unknown): v is number {
  return typeof v === "number" && Number.isInteger(v);
}

function integers(reply: unknown): number[] {
  if (!Array.isArray(reply)) throw new ReplyError(`not a list of integers: ${JSON.stringify(reply)}`);
  return reply.map((v) => {
    if (typeof v === "number" && Number.isInteger(v)) return v;
    if (typeof v === "bigint") return Number(v);
    throw new ReplyError(`not a list of integers: ${JSON.stringify(reply)}`);
  });
}
