/**
 * Decisions made in this process without a round trip (docs/high-volume.md, the contract's
 * `batching`), as pure rules: no I/O, every time a parameter (`now`, ms from any origin), so
 * `contract/vectors/volume.json` drives them through the limiter, which sends what they plan. As
 * `client/src/precheck.rs` and `client/src/batch.rs`.
 *
 * - `Denials`, the pre-check: a check Redis denied stays denied here until the `retry_after` Redis
 *   gave, for the same keys at the same or a larger cost. Safe: other instances can only consume more.
 * - `Batches`, batched units: a check takes up to its policy's `batch` units in one call and spends the
 *   rest here until their lease ends; a hot key's next batch is taken ahead, off the caller's path.
 *   Every unit spent here was taken from Redis first, so nothing is admitted beyond the limit.
 */
import type { Limit } from "./command.js";
import type { BatchingRules } from "./contract.js";
import type { Decision } from "./decision.js";
import { TokenBucket, type Policy } from "./policy.js";

/** Units to give back to Redis with RL.REFUND. */
export interface Refund {
  key: string;
  policy: Policy;
  units: number;
}

/** `d`'s reset shortened by the `passed` ms since Redis gave it. */
const aged = (d: Decision, passed: number): number => Math.max(0, Math.floor(d.resetAfterMs - passed));

interface Denial {
  until: number;
  cost: number;
  decision: Decision;
}

/** The pre-check: Redis' denials, remembered until their `retry_after` (at most `maxKeys` checks). */
export class Denials {
  private readonly denied = new Map<string, Denial>();

  constructor(private readonly maxKeys: number) {}

  /** The keys of a check in order, and its cost (its largest). */
  private static id(limits: readonly Limit[]): [string, number] {
    if (limits.length === 1) return [limits[0]![0], limits[0]![2]];
    let cost = 0;
    for (const l of limits) cost = Math.max(cost, l[2]);
    return [limits.map((l) => l[0]).join("\n"), cost];
  }

  /** Redis' denial still in force at `now` for the keys of `limits` at the same or a larger cost, the
   * time left as its retry_after (whole ms, rounded up) and its reset shorter by the time passed; or
   * undefined: ask Redis. */
  check(limits: readonly Limit[], now: number): Decision | undefined {
    if (this.denied.size === 0) return undefined;
    const [id, cost] = Denials.id(limits);
    const d = this.denied.get(id);
    if (d === undefined || now >= d.until || cost < d.cost) return undefined;
    const left = d.until - now;
    const passed = d.decision.retryAfterMs! - left;
    return d.decision.with({ retryAfterMs: Math.ceil(left), resetAfterMs: aged(d.decision, passed), local: true });
  }

  /** Remembers Redis' answer `d` to `limits` at `now` when it denied with a retry_after. */
  remember(limits: readonly Limit[], d: Decision, now: number): void {
    if (d.allowed || d.degraded || d.local || d.retryAfterMs === null) return;
    if (this.denied.size >= this.maxKeys) {
      for (const [k, x] of this.denied) if (now >= x.until) this.denied.delete(k);
      if (this.denied.size >= this.maxKeys) this.denied.clear();
    }
    const [id, cost] = Denials.id(limits);
    this.denied.set(id, { until: now + d.retryAfterMs, cost, decision: d });
  }
}

/** A batch call in flight (one per key at a time): landed when its answer (or its failure) is in. */
export class Flight {
  private done!: () => void;
  /** Resolves when the call has landed. */
  readonly landed = new Promise<void>((resolve) => (this.done = resolve));

  land(): void {
    this.done();
  }
}

/** The batched units of one (key, policy). */
interface State {
  readonly key: string;
  readonly policy: Policy;
  /** Units taken and not yet spent. */
  held: number;
  /** The units the last call took for a request of cost 1. */
  size: number;
  /** When the answer that gave the units came. */
  since: number;
  /** When their use ends. */
  until: number;
  /** When the window they were taken in ends (a token bucket's: never). */
  windowEnd: number;
  /** Redis' answer that gave them. */
  last: Decision;
  /** This key's batch call in flight: checks lacking units wait for it. */
  flight: Flight | undefined;
}

/** The state's id: the key, the kind and its parameters. */
const idOf = (key: string, policy: Policy): string => `${key}\n${policy.kind.group}\n${policy.params[0]}\n${policy.params[1]}`;

/** Sorted by their ids. */
const byId = <T>(entries: [string, T][]): [string, T][] => entries.sort((a, b) => (a[0] < b[0] ? -1 : 1));

/** Batched units per (key, policy) of one limiter, at most `rules.max_keys` states. */
export class Batches {
  private readonly states = new Map<string, State>();
  private nextSweep: number | undefined;

  constructor(readonly rules: BatchingRules) {}

  /** The expired units of `s` at `now` (none before its `until`), given back while their window lasts,
   * else dropped (they belonged to a window that is over). */
  private expire(s: State, now: number, out: Refund[]): void {
    if (now < s.until || s.held === 0) return;
    if (now + this.rules.refund_margin_ms < s.windowEnd) out.push({ key: s.key, policy: s.policy, units: s.held });
    s.held = 0;
  }

  /** The next size of a state's batch: doubled while hot (its units ran out in use), halved when
   * cool, never more than a share of what Redis said was left nor more than the batch. */
  private next(s: State, hot: boolean): number {
    const r = this.rules;
    const size = hot ? s.size * r.grow : Math.max(1, Math.floor(s.size / r.grow));
    return Math.max(1, Math.min(size, Math.max(1, Math.floor(s.last.remaining / r.share)), s.policy.batching!.batch));
  }

  /** What a check of `limits` does at `now`: give expired units back (every `sweep_ms` the expired
   * states of other keys too), then decide here when every limit holds its cost (and take the next
   * batch ahead where that leaves a key low), or wait for the batch call in flight of a key lacking
   * units, or make one call asking extras. */
  plan(limits: readonly Limit[], now: number): Plan {
    const ids = limits.map(([key, policy]) => idOf(key, policy));
    const refunds = this.sweep(ids, now);
    const states = ids.map((id) => this.states.get(id));
    for (const s of states) if (s) this.expire(s, now, refunds);
    const holding = limits.map(([, policy, cost], j) => {
      const s = states[j];
      return policy.batching !== undefined && s !== undefined && now < s.until && s.held >= cost;
    });
    if (holding.every(Boolean)) {
      let best: Decision | undefined;
      const ahead: Plan[] = [];
      for (let j = 0; j < limits.length; j++) {
        const s = states[j]!;
        s.held -= limits[j]![2];
        const a = this.ahead(s, ids[j]!, now);
        if (a) ahead.push(a);
        const d = s.last.with({ remaining: s.last.remaining + s.held, resetAfterMs: aged(s.last, now - s.since), retryAfterMs: 0, limiting: j, local: true });
        // All allowed: the most restrictive has the fewest left (the first on ties).
        if (best === undefined || d.remaining < best.remaining) best = d;
      }
      return new Plan(this, limits, ids, refunds, best, undefined, ahead);
    }
    for (let j = 0; j < limits.length; j++) {
      const flight = states[j]?.flight;
      if (limits[j]![1].batching && !holding[j] && flight) return new Plan(this, limits, ids, refunds, undefined, flight);
    }
    const n = limits.length;
    const plan = new Plan(this, limits, ids, refunds, undefined);
    for (let j = 0; j < n; j++) {
      const policy = limits[j]![1];
      const batching = policy.batching;
      // In a call of several limits only a bucket batches: a window's end is known only from an
      // answer about that limit alone.
      if (!batching || holding[j] || (n > 1 && !(policy instanceof TokenBucket))) continue;
      const s = states[j];
      if (s === undefined && this.states.size >= this.rules.max_keys) continue;
      const size = s === undefined ? Math.min(this.rules.start, batching.batch) : this.next(s, now < s.until);
      // One batch call per key at a time keeps held and in-flight units per key below the batch.
      plan.ask(j, size, size - 1, s && size > 1 ? (s.flight = new Flight()) : undefined);
    }
    return plan;
  }

  /** The batch to take ahead for `s` after a local decision at `now` left its held units below
   * `size / ahead`, none in flight and its lease going on: the next size, at most what keeps held and
   * in flight below the batch; its call is the limit alone at cost 0 asking the units. */
  private ahead(s: State, id: string, now: number): Plan | undefined {
    if (s.flight || s.held * this.rules.ahead >= s.size || now >= s.until) return undefined;
    const batch = s.policy.batching!.batch;
    const size = this.next(s, true);
    const units = Math.min(size, batch - 1 - Math.min(s.held, batch - 1));
    if (units === 0) return undefined;
    const plan = new Plan(this, [[s.key, s.policy, 0]], [id], [], undefined, undefined, [], false);
    plan.ask(0, size, units, (s.flight = new Flight()));
    return plan;
  }

  /** Every `sweep_ms`, the expired states of keys other than `ids`: their units to give back (in the
   * order of their ids), the states forgotten. */
  private sweep(ids: readonly string[], now: number): Refund[] {
    this.nextSweep ??= now + this.rules.sweep_ms;
    if (now < this.nextSweep) return [];
    this.nextSweep = now + this.rules.sweep_ms;
    const out: Refund[] = [];
    for (const [id, s] of byId([...this.states].filter(([id, s]) => now >= s.until && !ids.includes(id)))) {
      this.states.delete(id);
      this.expire(s, now, out);
    }
    return out;
  }

  /** Redis allowed limit `j` of `limits` at `now` with `d`, taking `extra` units beyond its cost from a
   * batch of `size`: held until the lease ends (a window's: at most its end less the margin; units
   * of a window that has ended meanwhile are dropped). Returns the units held now. */
  took(limits: readonly Limit[], j: number, id: string, size: number, extra: number, d: Decision, now: number): number {
    const [key, policy] = limits[j]!;
    const margin = this.rules.refund_margin_ms;
    const rule = this.rules.kinds[policy.kind.name] ?? "none";
    const windowEnd = rule === "none" ? Infinity : now + Math.max(0, d.resetAfterMs - (rule === "reset_minus_window" ? policy.periodMs : 0));
    const until = Math.min(now + policy.batching!.leaseMs, windowEnd - margin);
    let s = this.states.get(id);
    if (s === undefined) {
      s = { key, policy, held: 0, size, since: now, until, windowEnd, last: d, flight: undefined };
      this.states.set(id, s);
    }
    const held = windowEnd > s.windowEnd + margin ? 0 : s.held;
    Object.assign(s, { held: held + extra, size, since: now, until, windowEnd, last: d });
    return s.held;
  }

  /** A denial: the limit's next call starts small. */
  denied(id: string): void {
    const s = this.states.get(id);
    if (s) s.size = this.rules.start;
  }

  /** `flight` landed: the state whose call it was has none in flight now. */
  landed(id: string, flight: Flight): void {
    const s = this.states.get(id);
    if (s?.flight === flight) s.flight = undefined;
    flight.land();
  }

  /** Every held unit whose window lasts at `now`, to give back (the limiter is closing), in the order
   * of their ids; the states are forgotten. */
  drain(now: number): Refund[] {
    const out: Refund[] = [];
    for (const [, s] of byId([...this.states])) {
      if (s.held > 0 && now + this.rules.refund_margin_ms < s.windowEnd) out.push({ key: s.key, policy: s.policy, units: s.held });
    }
    this.states.clear();
    return out;
  }

  /** Units held here for `key` under `policy`. */
  held(key: string, policy: Policy): number {
    return this.states.get(idOf(key, policy))?.held ?? 0;
  }
}

/** One call's plan (a check's, or a batch taken ahead): the units to give back first (not waited
 * for), then a local decision (and the batches to take ahead), a batch call in flight to wait for
 * (`behind`, then plan again), or the call to make (`call`) whose answer `answer` reads. */
export class Plan {
  /** Per limit, the size asked and the extra units beyond its cost (none: the limit keeps no state
   * from this call), and the flight it is for its key. */
  private readonly asked: ({ size: number; extra: number; flight: Flight | undefined } | undefined)[];
  private retried = false;

  constructor(
    private readonly batches: Batches,
    private readonly limits: readonly Limit[],
    private readonly ids: readonly string[],
    readonly refunds: Refund[],
    /** Decided here: no call. */
    readonly local: Decision | undefined,
    /** Another call's flight to wait for, then plan again. */
    readonly behind?: Flight,
    /** Batches to take ahead, off the caller's path (after a local decision). */
    readonly ahead: readonly Plan[] = [],
    /** A denied call asking extras is asked again without them (a check's; not a batch taken ahead). */
    private readonly retries = true,
  ) {
    this.asked = limits.map(() => undefined);
  }

  /** Limit `j` asks `extra` units beyond its cost, from a batch of `size`; `flight`: its key's. */
  ask(j: number, size: number, extra: number, flight: Flight | undefined): void {
    this.asked[j] = { size, extra, flight };
  }

  /** The limits to send, each asking its cost plus its extra. */
  get call(): Limit[] {
    return this.limits.map((l, j) => {
      const extra = this.asked[j]?.extra ?? 0;
      return extra === 0 ? l : ([l[0], l[1], l[2] + extra] as const);
    });
  }

  /** The call is over: its keys' flights land (their waiters plan again). */
  private land(): void {
    for (let j = 0; j < this.asked.length; j++) {
      const flight = this.asked[j]?.flight;
      if (flight) this.batches.landed(this.ids[j]!, flight);
    }
  }

  /** The call ended without an answer to read (its error goes to the caller): nothing taken. */
  failed(): void {
    this.land();
  }

  /** Reads Redis' answer `d` to `call` at `now`: the check's decision (its remaining counts the units
   * held here), or, once, the call to send again without extras when a check's call asking extras was
   * denied (the request itself may fit); its keys' flights land with the decision. */
  answer(d: Decision, now: number): Decision | Limit[] {
    const extras = this.asked.some((a) => a && a.extra > 0);
    if (!d.degraded && !d.allowed && extras && this.retries && !this.retried) {
      this.retried = true;
      for (const a of this.asked) {
        if (a) Object.assign(a, { size: this.batches.rules.start, extra: 0 });
      }
      return this.limits as Limit[];
    }
    this.land();
    if (d.degraded) return d;
    let remaining = d.remaining;
    for (let j = 0; j < this.limits.length; j++) {
      const a = this.asked[j];
      if (!a) continue;
      if (!d.allowed) {
        this.batches.denied(this.ids[j]!);
        continue;
      }
      const held = this.batches.took(this.limits, j, this.ids[j]!, a.size, a.extra, d, now);
      if (this.limits.length === 1 || d.limiting === j) remaining += held;
    }
    return remaining === d.remaining ? d : d.with({ remaining });
  }
}
