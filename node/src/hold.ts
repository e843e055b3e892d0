/**
 * Token-budget holds (RL.HOLD / RL.SETTLE, docs/commands.md): an estimate held now, the actual settled
 * later, exactly once, in the window the hold was taken from. `Limiter.hold` makes a `Hold`; this module
 * is what the hold does afterwards: report usage (`add`), settle (`settle`, `cancel`, or `close` /
 * `await using` at the end of its scope: the hold's abandon policy, applied now), retrying a settle that
 * meets an outage with the same id.
 */
import "./dispose.js";
import * as command from "./command.js";
import { Decision } from "./decision.js";
import { BreakerOpenError, CallError, DeadlineError, UnreachableError } from "./errors.js";
import { ABANDON, HOLD_TTL_DEFAULT_MS, SETTLE_MODE } from "./contract.js";
import type { Policy } from "./policy.js";

/** One limit of a hold: its key, policy and estimated units; `exact`: charged as it is (a prompt's
 * tokens, known up front, or the request itself), never named by `add` or a `settle` of one number, nor
 * by `cancel` or the scope's end: it stays charged. */
export type HoldLimit = readonly [key: string, policy: Policy, units: number, charge?: "held" | "exact"];

/** Usage or an actual: one number for every held limit, or a number per key (those named only; a key
 * not named stays charged as held). */
export type Usage = number | Readonly<Record<string, number>> | ReadonlyMap<string, number>;

export interface HoldOptions {
  /** The hold's id (1 to 256 bytes; default: a random request id). A retried hold with the same id
   * replies as the first and takes nothing: pass the request's own id to make a retry safe. */
  id?: string;
  /** How long the hold lives unsettled, ms (whole; default the contract's `ttl_default_secs`: 5 minutes). */
  ttlMs?: number;
  /** What happens to a hold never settled when its ttl ends: the contract's abandon words (`CHARGE`,
   * the default: it stays charged; `RETURN`: its unused units go back). */
  abandon?: string;
  /** The ledger's key (default: `rl:holds:{tag}`, the first key's hash tag, from the contract). */
  ledger?: string;
}

/** How long a hold lives unsettled by default, ms (the contract's `holds.ttl_default_secs`). */
export const DEFAULT_TTL_MS: number = HOLD_TTL_DEFAULT_MS;

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
 * `cancel` (everything back). `await using h = await limiter.hold(...)` (or `close()` in a `finally`):
 * at the scope's end, a hold not settled nor cancelled has its abandon policy applied now, as a FINAL
 * naming every held limit that is not exact: under CHARGE each settles at the larger of its estimate
 * and the last usage `add` reported for it (nothing goes back), under RETURN at that usage (0 when
 * none: the unused part goes back). A denied hold holds nothing: its calls do nothing. A `local` hold
 * (Redis did not answer: the failure policy decided) has nothing in Redis to settle: its calls do
 * nothing either.
 */
export class Hold {
  /** The last usage `add` reported, per key. */
  private readonly used = new Map<string, number>();
  private done = false;
  /** The limits a settle names: held by Redis (a held kind) and not exact, each with its estimate. */
  private readonly settled: readonly (readonly [key: string, estimate: number])[];
  /** Whether the hold's last settle was given up (an outage outlasted its attempts; logged). */
  givenUp = false;

  constructor(
    private readonly host: HoldHost,
    readonly decision: Decision,
    readonly ledger: string,
    readonly id: string,
    limits: readonly HoldLimit[],
    /** The keys whose units Redis holds (kinds the contract's `held_kinds` names). */
    heldKeys: readonly string[],
    /** What leaving the scope unsettled does: the contract's abandon word (`CHARGE`, `RETURN`). */
    readonly abandon: string = ABANDON.charge,
  ) {
    const held = new Set(heldKeys);
    this.settled = limits.filter((l) => l[3] !== "exact" && held.has(l[0])).map((l) => [l[0], l[2]] as const);
  }

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
    const units = this.units(usage);
    for (const [key, n] of units) this.used.set(key, n);
    if (!this.live) return false;
    const d = await this.send(SETTLE_MODE.partial, units, "add");
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

  /** Gives back everything the hold held (FINAL with 0 on every held limit that is not exact; an exact
   * limit stays charged): the explicit way to give it all back, e.g. when the upstream call failed
   * before anything was billed. */
  async cancel(): Promise<Decision | null> {
    this.done = true;
    if (!this.live) return null;
    return this.send(SETTLE_MODE.final, this.settled.map(([k]) => [k, 0] as const), "cancel");
  }

  /** The scope's end: nothing when settled or cancelled already; else the hold's abandon policy, now
   * (what the server would do when its ttl ends), as a FINAL naming every held limit that is not exact:
   * CHARGE settles each at max(its estimate, the last usage `add` reported for it), billing-safe;
   * RETURN at that usage (0 when none). Never rejects for an outage (logged). */
  async close(): Promise<void> {
    if (this.done) return;
    this.done = true;
    if (!this.live) return;
    const charge = this.abandon.toUpperCase() === ABANDON.charge.toUpperCase();
    const units = this.settled.map(([key, estimate]) => {
      const used = this.used.get(key);
      return [key, charge ? Math.max(estimate, used ?? 0) : used ?? 0] as const;
    });
    await this.send(SETTLE_MODE.final, units, "close");
  }

  /** `await using h = await limiter.hold(...)`: `close()` at the block's end. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** `usage` as the settle's pairs: one number on every held limit that is not exact, or each key's. */
  private units(usage: Usage): (readonly [string, number])[] {
    if (typeof usage === "number") return this.settled.map(([key]) => [key, usage] as const);
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
