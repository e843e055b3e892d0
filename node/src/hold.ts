/**
 * Token-budget holds (RL.HOLD / RL.SETTLE, docs/commands.md): an estimate held now, the actual settled
 * later, exactly once, in the window the hold was taken from. `Limiter.hold` makes a `Hold`; this module
 * is what the hold does afterwards: report usage (`add`), settle (`settle`, `cancel`, or `close` /
 * `await using` at the end of its scope), retrying a settle that meets an outage with the same id.
 */
import "./dispose.js";
import * as command from "./command.js";
import { Decision } from "./decision.js";
import { BreakerOpenError, CallError, DeadlineError, UnreachableError } from "./errors.js";
import { SETTLE_MODE } from "./contract.js";
import type { Policy } from "./policy.js";

/** One limit of a hold: its key, policy and estimated units; `exact`: charged as it is (a prompt's
 * tokens, known up front), never settled by `add` or a `settle` of one number (`cancel` gives it back). */
export type HoldLimit = readonly [key: string, policy: Policy, units: number, charge?: "held" | "exact"];

/** Usage or an actual: one number for every held limit, or a number per key (those named only; a key
 * not named stays charged as held). */
export type Usage = number | Readonly<Record<string, number>> | ReadonlyMap<string, number>;

export interface HoldOptions {
  /** The hold's id (1 to 256 bytes; default: a random request id). A retried hold with the same id
   * replies as the first and takes nothing: pass the request's own id to make a retry safe. */
  id?: string;
  /** How long the hold lives unsettled, ms (whole; default 300000: 5 minutes). */
  ttlMs?: number;
  /** What happens to a hold never settled when its ttl ends: the contract's abandon words (`CHARGE`,
   * the default: it stays charged; `RETURN`: its unused units go back). */
  abandon?: string;
  /** The ledger's key (default: `rl:holds:{tag}`, the first key's hash tag, from the contract). */
  ledger?: string;
}

/** How long a hold lives unsettled by default, ms. */
export const DEFAULT_TTL_MS = 300_000;

/** A settle (or `add`) that meets an outage is sent this many times in all, then given up. */
export const SETTLE_ATTEMPTS = 3;

/** What a hold needs of its limiter: calls within its deadline, its log. */
export interface HoldHost {
  readonly deadlineMs: number;
  call(cmd: readonly string[]): Promise<unknown>;
  logError(message: string): void;
}

/** Whether `e` is an outage (no answer, the breaker open): worth sending the same settle again. */
function outage(e: unknown): e is CallError {
  return e instanceof DeadlineError || e instanceof UnreachableError || e instanceof BreakerOpenError;
}

/**
 * A hold: the decision (`allowed`, `decision`), then `add` (usage so far), `settle` (the actual) or
 * `cancel`. `await using h = await limiter.hold(...)` (or `close()` in a `finally`) settles at the
 * scope's end with the last usage `add` reported, or cancels when none was. A denied hold holds nothing:
 * its calls do nothing. A `local` hold (Redis did not answer: the failure policy decided) has nothing in
 * Redis to settle: its calls do nothing either.
 */
export class Hold {
  private last: Usage | undefined;
  private done = false;
  /** Whether the hold's last settle was given up (an outage outlasted its attempts; logged). */
  givenUp = false;

  constructor(
    private readonly host: HoldHost,
    readonly decision: Decision,
    readonly ledger: string,
    readonly id: string,
    private readonly limits: readonly HoldLimit[],
    /** The keys whose units Redis holds (kinds the contract's `held_kinds` names). */
    private readonly heldKeys: readonly string[],
  ) {}

  get allowed(): boolean {
    return this.decision.allowed;
  }

  /** The failure policy decided (Redis did not answer): nothing is held in Redis, settling does nothing. */
  get local(): boolean {
    return this.decision.degraded;
  }

  /** Whether calls on this hold reach Redis: allowed there. */
  private get live(): boolean {
    return this.decision.allowed && !this.decision.degraded;
  }

  /** Reports the usage so far (a running total: PARTIAL); resolves true when the stream should stop: a
   * limit went past its held units and has nothing left. False when the hold is local, denied, gone
   * (expired) or Redis did not answer. */
  async add(usage: Usage): Promise<boolean> {
    this.last = usage;
    if (!this.live) return false;
    const d = await this.send(SETTLE_MODE.partial, this.units(usage), "add");
    return d !== null && !d.allowed;
  }

  /** Settles the actual (FINAL): what the hold did not use goes back, an excess is charged, in the
   * hold's own window; once (settling again replies as the first). Resolves the limiting group's state
   * after it, or null: no such hold (expired, never held), a local or denied hold, or an outage that
   * outlasted the retries (logged). */
  async settle(actual: Usage): Promise<Decision | null> {
    this.done = true;
    if (!this.live) return null;
    return this.send(SETTLE_MODE.final, this.units(actual), "settle");
  }

  /** Gives back everything the hold took, its exact limits too (FINAL with 0 on every held key). */
  async cancel(): Promise<Decision | null> {
    this.done = true;
    if (!this.live) return null;
    return this.send(SETTLE_MODE.final, this.heldKeys.map((k) => [k, 0] as const), "cancel");
  }

  /** The scope's end: nothing when settled or cancelled already; else settles the last usage `add`
   * reported, or cancels when none was. Never rejects for an outage (logged). */
  async close(): Promise<void> {
    if (this.done) return;
    if (this.last === undefined) await this.cancel();
    else await this.settle(this.last);
  }

  /** `await using h = await limiter.hold(...)`: `close()` at the block's end. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** `usage` as the settle's pairs: one number on every held limit that is not exact, or each key's. */
  private units(usage: Usage): (readonly [string, number])[] {
    if (typeof usage === "number") {
      const held = new Set(this.heldKeys);
      return this.limits.filter((l) => l[3] !== "exact" && held.has(l[0])).map((l) => [l[0], usage] as const);
    }
    return usage instanceof Map ? [...usage] : Object.entries(usage);
  }

  /** One settle, sent again on an outage (same id: the server counts it once) up to SETTLE_ATTEMPTS
   * times, a pause between; then logged and given up (null). Usage errors and error replies reject. */
  private async send(mode: string, units: readonly (readonly [string, number])[], what: string): Promise<Decision | null> {
    if (units.length === 0) return null;
    const cmd = command.settle(this.ledger, this.id, mode, units);
    for (let attempt = 1; ; attempt++) {
      try {
        const reply = await this.host.call(cmd);
        this.givenUp = false;
        return reply === null || reply === undefined ? null : Decision.fromReply(reply);
      } catch (e) {
        if (!outage(e)) throw e;
        if (attempt >= SETTLE_ATTEMPTS) {
          this.givenUp = true;
          this.host.logError(`redis-ratelimit: the hold ${this.id} on ${this.ledger}: ${what} given up after ${attempt} attempts: ${e.message}`);
          return null;
        }
        await new Promise((ok) => setTimeout(ok, Math.min(this.host.deadlineMs, 100) * attempt));
      }
    }
  }
}
