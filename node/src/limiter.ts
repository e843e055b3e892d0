/**
 * The limiter: every call bounded by the package's own deadline (default 100 ms) whatever the client's
 * queue and retry options, the engine chosen and kept (module, FCALL, EVALSHA), a breaker, and a
 * failure policy that decides when Redis does not: `open` allows, `closed` denies, `fallback` decides in
 * this process at this instance's share of each limit (one token bucket, leases for concurrency). As
 * `client/src/limiter.rs`. Events: `outage` (Redis stopped deciding: the first failure after an answer),
 * `recovered` (Redis answers again), `degraded` (each decision the failure policy made).
 */
import "./dispose.js";
import { EventEmitter } from "node:events";
import { randomBytes } from "node:crypto";
import { adapt, OWN_ADAPTERS, type Adapter } from "./adapters.js";
import { Breaker, type BreakerOptions } from "./breaker.js";
import * as command from "./command.js";
import type { Limit } from "./command.js";
import { Decision, inspectionFromReply, takenFromReply, type Inspection, type Taken } from "./decision.js";
import { Engine, EngineGaveUp, RedisErrorReply, keysOf, type EngineName, type Send } from "./engine.js";
import { answerOf } from "./engineMachine.js";
import {
  BreakerOpenError, CallError, ConfigurationError, ConflictError, DeadlineError, ServerError, UnreachableError, UsageError,
} from "./errors.js";
import { COUNTERS, causeOf, classOfReply, classOfTransport, codeOf, replyClass, transportOf, type ReplyClass } from "./replyClass.js";
import { ERRORS, HELD_KINDS, HOLDS, abandonWord, ledgerOf } from "./contract.js";
import { DEFAULT_TTL_MS, Hold, type HoldLimit, type HoldOptions } from "./hold.js";
import { slotOf } from "./slot.js";
import { Concurrency, Policy, TokenBucket } from "./policy.js";
import { LocalLimiter } from "./fallback.js";
import { Batches, Denials, type Plan, type Refund } from "./localDecisions.js";
import { BATCHING } from "./contract.js";

export type FailurePolicy = "open" | "closed" | "fallback";

export interface LimiterOptions {
  /** What decides when Redis cannot: `open` allows, `closed` denies (retry after 1 s), `fallback`
   * decides in this process with `limit / instances` of each limit. Required. */
  failure: FailurePolicy;
  /** Under `fallback`: how many application instances share the limits (required there). */
  instances?: number;
  /** Every call's bound, connect and reload included, ms (default 100). */
  deadlineMs?: number;
  /** `auto` (default): the module, else FCALL (loading the library where allowed), else EVALSHA. */
  engine?: EngineName;
  /** The breaker's options, or `false` for none (default: 5 failures, 1000 ms). */
  breaker?: BreakerOptions | false;
  /** The pre-check (default false): a check Redis denied stays denied in this process until the
   * `retry_after` Redis gave, without a round trip (docs/high-volume.md). */
  localPrecheck?: boolean;
  /** The clock of decisions made here, ms (default `performance.now`): the vectors drive it. */
  now?: () => number;
  /** Where the misconfigured and conflict lines go (error level; default `console`); `false`: nowhere
   * (the `misconfigured` and `conflict` events still say the same). */
  logger?: Logger | false;
}

/** What the limiter logs with: `console`, or any logger with an `error` method (pino, winston, ...).
 * With a `warn` method too, an outage is logged: one line when it starts (naming the engine), one when
 * it ends (how long it lasted, the failure policy's decisions meanwhile). */
export interface Logger {
  error(message: string): void;
  warn?(message: string): void;
}

export interface OutageEvent {
  error: CallError;
  /** What the engine that decided last reports (`the ratelimit module`, ...; `not yet known` if none). */
  engine: string;
}

const DEADLINE = Symbol("deadline");

/** A call in flight: its deadline (`performance.now()` ms), whether it ended, how it is failed. */
interface InFlight {
  readonly at: number;
  done: boolean;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly resolve: (v: any) => void;
  readonly reject: (e: unknown) => void;
  readonly failed: ((e: CallError) => unknown) | undefined;
}

const same = (reply: unknown): unknown => reply;
const ignore = (): void => undefined;
/** A misconfiguration's cause is logged at most once per this long. */
const CAUSE_EVERY_MS = 60_000;
/** At most this many keys remembered as logged conflicts (then forgotten, and logged again). */
const CONFLICT_KEYS = 10_000;

/** What to do about a misconfiguration, by the reply's code (and text). */
function fixOf(message: string): string {
  const code = codeOf(message);
  // A NOPERM that steers no engine (the contract's engines.answers) is about a key, not a command.
  if (code === "NOPERM" && answerOf(message) === "error") return "give this Redis user the limiter's keys (its ACL key patterns, e.g. ~rl:*)";
  if (code === "NOPERM") return "give this Redis user the commands of the engine in use (ACL: the module's RL.*, or FCALL, FUNCTION LOAD, EVALSHA, EVAL)";
  if (code === "NOAUTH" || code === "WRONGPASS") return "give the client the Redis user's password";
  if (/^ERR unknown command/i.test(message)) return "load the module (--loadmodule), or let this user run FCALL and FUNCTION LOAD (or EVALSHA)";
  return "see docs/errors.md";
}

/** Ends a call with `error`: the value its `failed` makes of it, or the error. */
function fail(f: InFlight, error: CallError): void {
  if (!f.failed) return f.reject(error);
  try {
    f.resolve(f.failed(error));
  } catch (e) {
    f.reject(e);
  }
}

/**
 * One timer for all the calls in flight of a limiter, instead of a timer per call. Every call has the
 * same deadline after its start, so they expire in the order they started: the calls wait in that
 * order, and the timer is set for the oldest unfinished one's deadline (to the millisecond, as a
 * timer of its own would be). A call that ends is only marked; the timer drops it when it fires. The
 * timer keeps the process alive only while a call is unfinished, as a call's own timer did.
 */
class Deadlines {
  private queue: (InFlight | undefined)[] = [];
  private head = 0;
  private live = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly expire: (f: InFlight) => void) {}

  add(f: InFlight): void {
    this.queue.push(f);
    if (++this.live === 1 && this.timer) this.timer.ref();
    if (!this.timer) this.arm(f.at);
  }

  settle(f: InFlight): void {
    f.done = true;
    if (--this.live === 0 && this.timer) this.timer.unref();
  }

  private arm(at: number): void {
    this.timer = setTimeout(this.fire, Math.max(1, Math.ceil(at - performance.now())));
    if (this.live === 0) this.timer.unref();
  }

  private readonly fire = (): void => {
    this.timer = undefined;
    const now = performance.now();
    const q = this.queue;
    let i = this.head;
    const expired: InFlight[] = [];
    for (; i < q.length; i++) {
      const f = q[i]!;
      if (!f.done) {
        // A timer may fire a fraction of a millisecond early (its clock counts whole ms).
        if (f.at > now + 1) break;
        f.done = true;
        this.live--;
        expired.push(f);
      }
      q[i] = undefined;
    }
    if (i === q.length) {
      q.length = 0;
      i = 0;
    } else if (i > 1024 && i * 2 > q.length) {
      q.splice(0, i);
      i = 0;
    }
    this.head = i;
    if (i < q.length) this.arm(q[i]!.at);
    for (const f of expired) this.expire(f);
  };
}

/** A concurrency permit: release it (or `await using` it) when the work is done. Held leases are
 * renewed in the background while it lives. */
export class Permit {
  /** A lease renewal found the lease gone (it expired: renewals failed for a whole lease). */
  lost = false;
  private released = false;
  private timer: ReturnType<typeof setInterval> | undefined;

  constructor(
    private readonly limiter: Limiter,
    readonly decision: Decision,
    readonly holder: string,
    private readonly leases: readonly (readonly [string, Concurrency])[],
    renew: boolean,
    /** The fallback's limiter, when it holds this permit's leases (a degraded permit under `fallback`). */
    private readonly local?: LocalLimiter,
  ) {
    if (decision.allowed && (!decision.degraded || local) && renew && leases.length) {
      const every = Math.max(10, Math.floor(Math.min(...leases.map(([, p]) => p.leaseMs)) / 3));
      this.timer = setInterval(() => void this.renew(), every);
      this.timer.unref();
    }
  }

  get allowed(): boolean {
    return this.decision.allowed;
  }

  /** Renews every held lease now; false when one is gone (or Redis did not answer). */
  async renew(): Promise<boolean> {
    if (this.released || !this.decision.allowed) return false;
    if (this.local) {
      let held = true;
      for (const [key, policy] of this.leases) held = this.local.renew(key, policy.leaseMs, this.holder) && held;
      if (!held) this.lost = true;
      return held;
    }
    if (this.decision.degraded) return false;
    let all = true;
    for (const [key, policy] of this.leases) {
      try {
        const reply = await this.limiter.call(command.renew(key, policy.leaseMs, this.holder));
        if (reply !== 1) {
          all = false;
          this.lost = true;
        }
      } catch {
        all = false;
      }
    }
    return all;
  }

  /** Gives the permit back (once; later calls do nothing). */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    if (this.timer) clearInterval(this.timer);
    if (!this.decision.allowed) return;
    if (this.local) {
      for (const [key] of this.leases) this.local.release(key, this.holder);
      return;
    }
    if (this.decision.degraded) return;
    await Promise.all(
      this.leases.map(([key]) => this.limiter.call(command.release(key, this.holder)).catch(() => undefined)),
    );
  }

  /** `await using permit = await limiter.acquire(...)`: released at the block's end. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}

export class Limiter extends EventEmitter {
  readonly adapter: Adapter;
  readonly failure: FailurePolicy;
  readonly deadlineMs: number;
  readonly engine: Engine;
  readonly breaker: Breaker | undefined;
  /** The in-process limiter of the `fallback` failure policy (its state lives while the limiter does). */
  readonly local: LocalLimiter | undefined;
  private down = false;
  /** When the outage under way started (`performance.now()` ms), and the decisions made meanwhile. */
  private downSince = 0;
  private downDecisions = 0;
  private misconfiguredNow = false;
  /** The contract's counters: `outage` counts outages started (each `outage` event; the `degraded`
   * event tells each decision made meanwhile), `misconfigured`, `conflicts` and `usage_errors` count
   * calls. */
  readonly counters: Record<string, number> = Object.fromEntries(COUNTERS.map((c) => [c, 0]));
  private readonly logger: Logger | undefined;
  /** When each misconfiguration's cause was last logged. */
  private readonly causes = new Map<string, number>();
  /** The keys whose conflict was logged. */
  private readonly conflicts = new Set<string>();
  private readonly deadlines: Deadlines;
  /** The adapter's `send`; an adapter given by the user gets a copy of each command (ours do not keep
   * or change it, and the middleware sends the same command array again). */
  private readonly send: Send;
  /** The pre-check's denials, when `localPrecheck`. */
  private readonly denials: Denials | undefined;
  /** Batched units per (key, policy), made at the first check of a batched policy. */
  private batches: Batches | undefined;
  /** Refunds sent and not yet answered (`close` waits for them). */
  private readonly refunding = new Set<Promise<unknown>>();
  /** Batch calls in flight, which may bring units (`close` waits for them). */
  private readonly calling = new Set<Promise<unknown>>();
  private closed = false;
  private readonly now: () => number;

  constructor(client: unknown, options: LimiterOptions) {
    super();
    const failure = options?.failure;
    if (failure !== "open" && failure !== "closed" && failure !== "fallback") {
      throw new UsageError("a limiter states its failure policy: { failure: 'open' }, { failure: 'closed' } or { failure: 'fallback', instances: n }");
    }
    if (failure === "fallback") {
      const n = options.instances;
      if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 1) {
        throw new UsageError("failure: 'fallback' needs `instances`: how many application instances share the limits (a whole number >= 1)");
      }
      this.local = new LocalLimiter(n);
    } else if (options.instances !== undefined) {
      throw new UsageError("`instances` is the fallback failure policy's: pass failure: 'fallback' with it");
    }
    this.adapter = adapt(client);
    this.failure = options.failure;
    this.deadlineMs = options.deadlineMs ?? 100;
    if (!(this.deadlineMs > 0)) throw new UsageError("deadlineMs must be > 0");
    this.engine = new Engine(options.engine ?? "auto", this.adapter.nodeOf);
    this.logger = options.logger === false ? undefined : (options.logger ?? console);
    this.deadlines = new Deadlines((f) => fail(f, this.classified(DEADLINE, undefined) as CallError));
    const send = this.adapter.send;
    this.send = OWN_ADAPTERS.has(this.adapter) ? send : (args, route) => send([...args], route);
    this.breaker = options.breaker === false ? undefined : new Breaker(options.breaker ?? {});
    this.denials = options.localPrecheck ? new Denials(BATCHING.precheck_max_keys) : undefined;
    this.now = options.now ?? (() => performance.now());
    // Decisions made here: each pre-check denial and each check spending batched units.
    this.counters["local"] = 0;
  }

  /** True since Redis answered that the limiter is misconfigured, until Redis decides again. */
  get misconfigured(): boolean {
    return this.misconfiguredNow;
  }

  /** The engine in use (`unknown` before the first decision under auto), why, and what it reports. */
  describe(): ReturnType<Engine["describe"]> {
    return this.engine.describe();
  }

  /** Makes the engine answer (choosing it under `auto`, loading the library where needed) and says
   * which it is; rejects with the `CallError` that stops it. */
  async verify(): Promise<ReturnType<Engine["describe"]>> {
    await this.call(command.inspect("rl:{verify}:engine"));
    return this.engine.describe();
  }

  /** Sends one module command (or any other) through the engine within the deadline. Rejects with a
   * `CallError` (`DeadlineError`, `UnreachableError`, `BreakerOpenError`, `ConfigurationError`,
   * `ConflictError`, `ServerError`) or, where the call itself is wrong, a `UsageError`. */
  call(cmd: readonly string[]): Promise<unknown> {
    return this.request(cmd, same, undefined);
  }

  /**
   * `cmd` sent within the deadline, its reply turned into the promise's value by `ok`; a `CallError`
   * (no answer, an error reply) by `failed`, or rejected with it without. What `ok` or `failed` throws
   * rejects the promise. One promise and no timer per call (see `Deadlines`).
   */
  private request<T>(cmd: readonly string[], ok: (reply: unknown) => T, failed: ((e: CallError) => T) | undefined): Promise<T> {
    if (this.breaker && !this.breaker.allow()) {
      const e = new BreakerOpenError();
      return failed ? Promise.resolve(e).then(failed) : Promise.reject(e);
    }
    let sent: Promise<unknown>;
    try {
      sent = this.engine.run(cmd, this.send);
    } catch (e) {
      sent = Promise.reject(e);
    }
    return new Promise<T>((resolve, reject) => {
      const f: InFlight = { at: performance.now() + this.deadlineMs, done: false, resolve, reject, failed };
      this.deadlines.add(f);
      sent.then(
        (reply) => {
          if (f.done) return; // answered after the deadline: nobody waits for it
          this.deadlines.settle(f);
          this.answered();
          try {
            resolve(ok(reply));
          } catch (e) {
            reject(e);
          }
        },
        (e: unknown) => {
          if (f.done) return;
          this.deadlines.settle(f);
          const error = this.classified(e, cmd);
          // The usage class is the caller's: never a degraded decision.
          if (error instanceof UsageError) f.reject(error);
          else fail(f, error);
        },
      );
    });
  }

  /** What a call that got no decision ends with (`DEADLINE`: its deadline passed): the class of the
   * answer (the contract's `replies`) says the error, the breaker, the log and the counter. */
  private classified(e: unknown, cmd: readonly string[] | undefined): CallError | UsageError {
    let cls: ReplyClass;
    let error: CallError | UsageError;
    if (e instanceof RedisErrorReply) {
      cls = e instanceof EngineGaveUp ? replyClass("misconfigured") : classOfReply(e.message);
      const m = e.message;
      if (cls.name === "usage") error = new UsageError(m, codeOf(m));
      else if (cls.name === "conflict") error = new ConflictError(m, cmd ? keysOf(cmd) : []);
      else if (cls.name === "misconfigured") error = new ConfigurationError(m);
      else error = new ServerError(m);
    } else if (e === DEADLINE) {
      cls = classOfTransport("timeout");
      error = new DeadlineError(this.deadlineMs);
    } else {
      const kind = transportOf(e);
      cls = classOfTransport(kind);
      error = new UnreachableError(`connection ${kind}: ${e instanceof Error ? e.message || e.name : String(e)}`);
    }
    if (cls.breaker === "failure") this.breaker?.failure();
    else if (cls.breaker === "answered") this.heard();
    // The outage log's class is counted once per outage, when it starts (in `failed`).
    if (cls.log === "outage") this.failed(error as CallError, cls.counter);
    else this.count(cls.counter);
    if (cls.log === "once_per_cause") this.misconfiguredBy(error as ConfigurationError);
    else if (cls.log === "once_per_key") this.conflictOn(error as ConflictError);
    return error;
  }

  /** Misconfigured: the flag, and a line at error level at most once a minute per cause. */
  private misconfiguredBy(error: ConfigurationError): void {
    this.misconfiguredNow = true;
    const now = performance.now();
    const cause = causeOf(error.message);
    const last = this.causes.get(cause);
    if (last !== undefined && now - last < CAUSE_EVERY_MS) return;
    this.causes.set(cause, now);
    this.logger?.error(
      `redis-ratelimit: misconfigured (Redis answers; this is no outage): ${error.message}; ${fixOf(error.message)}; meanwhile the failure policy (${this.failure}) decides`,
    );
    this.emit("misconfigured", { error });
  }

  /** A conflict: a line at error level once per key, with the key and how to recover. */
  private conflictOn(error: ConflictError): void {
    const keys = error.keys.join(" ");
    if (this.conflicts.has(keys)) return;
    if (this.conflicts.size >= CONFLICT_KEYS) this.conflicts.clear();
    this.conflicts.add(keys);
    this.logger?.error(
      `redis-ratelimit: conflict on ${keys}: ${error.message} (another limiter's kind, or another program, wrote it); the failure policy (${this.failure}) decides there until it is gone. To recover: delete the key (DEL ${keys}), wait for it to expire (at most its limit's period), or give the limit another name`,
    );
    this.emit("conflict", { keys: error.keys, error });
  }

  private count(counter: string): void {
    this.counters[counter] = (this.counters[counter] ?? 0) + 1;
  }

  /** Redis decided: it answered, and is no longer misconfigured. */
  private answered(): void {
    this.misconfiguredNow = false;
    this.heard();
  }

  /** Redis answered (a decision, or an answer whose class's breaker is `answered`): a success to the
   * breaker (a probe closes it) and the end of an outage. */
  private heard(): void {
    this.breaker?.success();
    if (this.down) {
      this.down = false;
      const ms = Math.round(performance.now() - this.downSince);
      this.logger?.warn?.(`redis-ratelimit: Redis answers again; outage over after ${ms} ms, ${this.downDecisions} decisions made by the failure policy (${this.failure}) meanwhile`);
      this.emit("recovered", {});
    }
  }

  /** No answer: an outage starts unless one is under way (counted in `counter`). */
  private failed(error: CallError, counter: string): void {
    if (!this.down) {
      this.down = true;
      this.count(counter);
      const engine = this.engine.lastDecided;
      this.engine.forget();
      this.downSince = performance.now();
      this.downDecisions = 0;
      this.logger?.warn?.(`redis-ratelimit: Redis does not decide (an outage; engine: ${engine}): ${error.message}; checks get the failure policy's (${this.failure}) decision meanwhile`);
      this.emit("outage", { error, engine } satisfies OutageEvent);
    }
  }

  /** The `degraded` event (a decision the outage under way counts). */
  private toldDegraded(event: { decision: Decision; error: Error }): void {
    if (this.down) this.downDecisions++;
    this.emit("degraded", event);
  }

  /** The failure policy's decision over `limits`, Redis having not decided because of `error`
   * (`holder`: an acquisition's, whose leases the fallback then holds). */
  degrade(limits: readonly Limit[], error: Error, holder?: string): Decision {
    if (this.local) {
      const d = holder === undefined ? this.local.decide(limits, undefined, true, error) : this.local.acquire(limits, holder, undefined, true, error);
      this.toldDegraded({ decision: d, error });
      return d;
    }
    const limit = limits[0]?.[1].limit ?? 0;
    const allow = this.failure === "open";
    const d = new Decision(allow, limit, allow ? limit : 0, allow ? 0 : 1000, 0, 0, true, error);
    this.toldDegraded({ decision: d, error });
    return d;
  }

  private decided(limits: readonly Limit[], cmd: readonly string[], holder?: string): Promise<Decision> {
    return this.request(
      cmd,
      (reply) => {
        try {
          return Decision.fromReply(reply);
        } catch (e) {
          return this.undecided(limits, e, holder);
        }
      },
      (e) => this.degrade(limits, e, holder),
    );
  }

  private undecided(limits: readonly Limit[], e: unknown, holder: string | undefined): Decision {
    if (e instanceof CallError) return this.degrade(limits, e, holder);
    throw e;
  }

  /** `checkAll(limits)` with its command already built (`command.decide(limits)`, as the middleware
   * keeps it for a caller and route), the decision given to `then`: the same call, with neither the
   * arguments built again nor a promise more. */
  checkBuilt<T>(limits: readonly Limit[], cmd: readonly string[], then: (d: Decision) => T): Promise<T> {
    if (this.decidesLocally(limits)) return this.checkAll(limits).then(then);
    return this.request(
      cmd,
      (reply) => {
        let d: Decision;
        try {
          d = Decision.fromReply(reply);
        } catch (e) {
          d = this.undecided(limits, e, undefined);
        }
        return then(d);
      },
      (e) => then(this.degrade(limits, e)),
    );
  }

  /** One limit, `cost` units (default 1; 0 to look without taking). */
  check(key: string, policy: Policy, cost = 1): Promise<Decision> {
    return this.checkAll([[key, policy, cost]]);
  }

  /** Several limits in one atomic call: allowed when all allow, and then all are taken. */
  checkAll(limits: readonly Limit[]): Promise<Decision> {
    let cmd: string[];
    try {
      cmd = this.built(limits, command.decide(limits));
    } catch (e) {
      return this.refused(e);
    }
    if (!this.decidesLocally(limits)) return this.decided(limits, cmd);
    return this.checkHere(limits, cmd);
  }

  /** Whether a check of `limits` may be decided here: the pre-check is on, or one is batched. */
  private decidesLocally(limits: readonly Limit[]): boolean {
    if (this.denials) return true;
    if (this.closed) return false;
    for (let i = 0; i < limits.length; i++) if (limits[i]![1].batching) return true;
    return false;
  }

  /** A check through the pre-check and batched units (docs/high-volume.md). */
  private async checkHere(limits: readonly Limit[], cmd: string[]): Promise<Decision> {
    const now = this.now();
    const denied = this.denials?.check(limits, now);
    if (denied) {
      this.count("local");
      return denied;
    }
    const batched = !this.closed && limits.some((l) => l[1].batching);
    const d = batched ? await this.batched(limits, now) : await this.decided(limits, cmd);
    if (d.local) this.count("local");
    else this.denials?.remember(limits, d, now);
    return d;
  }

  /** A check of batched limits: expired units given back (not waited for), then decided with the units
   * held here (taking the next batch ahead, off the caller's path), or after the batch call in flight
   * of a key lacking units (all of a check's waits together take at most the deadline; then it asks
   * alone), or with one call (twice when a call asking extras is denied). */
  private async batched(limits: readonly Limit[], now: number): Promise<Decision> {
    const batches = (this.batches ??= new Batches(BATCHING));
    let plan: Plan;
    let waited = false;
    const waitsEnd = performance.now() + this.deadlineMs;
    for (;;) {
      plan = batches.plan(limits, now);
      this.giveBack(plan.refunds);
      if (plan.local) {
        for (const a of plan.ahead) this.takeAhead(a);
        // A check that waited for another's batch call shared that round trip: not local.
        return waited ? plan.local.with({ local: false }) : plan.local;
      }
      if (!plan.behind) break;
      waited = true;
      const left = waitsEnd - performance.now();
      if (left <= 0 || !(await landedWithin(plan.behind.landed, left))) {
        // Waited the whole deadline: this check asks alone (its own call, without extras).
        return this.decided(limits, command.decide(limits));
      }
      // Closing: units taken now would be held after close gave them back.
      if (this.closed) return this.decided(limits, command.decide(limits));
      now = this.now();
    }
    let call = plan.call;
    for (;;) {
      // The failure policy decides the whole check (its costs, not the extras asked).
      const sent = this.decided(limits, command.decide(call));
      this.pending(this.calling, sent);
      let d: Decision;
      try {
        d = await sent;
      } catch (e) {
        plan.failed();
        throw e;
      }
      const next = plan.answer(d, this.now());
      if (next instanceof Decision) return next;
      call = next;
    }
  }

  /** Sends a batch taken ahead: no decision of its own, its answer read for the units it brings (no
   * answer: nothing taken; no failure policy, no `degraded` event). */
  private takeAhead(plan: Plan): void {
    const p = this.call(command.decide(plan.call)).then(
      (reply) => void plan.answer(Decision.fromReply(reply), this.now()),
      () => plan.failed(),
    ).catch(() => plan.failed());
    this.pending(this.calling, p);
  }

  /** Sends `refunds` without making the check that found them wait; `close` waits for them. */
  private giveBack(refunds: readonly Refund[]): void {
    for (const r of refunds) this.refundHeld(r);
  }

  /** Gives held units back (RL.REFUND); resolves with how many (0: Redis did not take them). */
  private refundHeld(r: Refund): Promise<number> {
    const p = this.call(command.refund(r.key, r.policy, r.units)).then(() => r.units, () => 0);
    this.pending(this.refunding, p);
    return p;
  }

  /** Keeps `p` in `set` until it settles. */
  private pending(set: Set<Promise<unknown>>, p: Promise<unknown>): void {
    set.add(p);
    const done = () => void set.delete(p);
    p.then(done, done);
  }

  /** Units held in this process for `key` under a batched `policy` (docs/high-volume.md). */
  held(key: string, policy: Policy): number {
    return this.batches?.held(key, policy) ?? 0;
  }

  /** Gives every batched unit held here back to Redis and waits for the refunds still in flight, so a
   * process stopped cleanly leaves nothing idle; checks after it are not batched. Resolves with the
   * units given back (a refund Redis did not answer within the deadline is lost, as when a process is
   * killed: at most batch - 1 units per key). */
  async close(): Promise<number> {
    this.closed = true;
    // The calls in flight may bring units (or ask again without extras): their answers first.
    while (this.calling.size) await Promise.all([...this.calling].map((p) => p.then(ignore, ignore)));
    const given = this.batches ? await Promise.all(this.batches.drain(this.now()).map((r) => this.refundHeld(r))) : [];
    while (this.refunding.size) await Promise.all([...this.refunding]);
    return given.reduce((a, b) => a + b, 0);
  }

  /** `await using limiter = new Limiter(...)`: closed at the block's end. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** `cmd` for `limits`, refused before sending when its keys are in different hash slots on a
   * cluster client (the server would answer CROSSSLOT). */
  private built<T>(limits: readonly Limit[], cmd: T, ledger?: string): T {
    if (this.adapter.cluster && (limits.length > 1 || ledger !== undefined)) {
      const slot = slotOf(limits[0]![0]);
      const keys = ledger === undefined ? limits.map((l) => l[0]) : [ledger, ...limits.map((l) => l[0])];
      for (const key of keys) {
        if (slotOf(key) !== slot) throw new UsageError(ERRORS.render.cross_slot, codeOf(ERRORS.render.cross_slot));
      }
    }
    return cmd;
  }

  /** A call refused before sending: rejected with its `UsageError`, counted with the usage class. */
  private refused(e: unknown): Promise<never> {
    if (e instanceof UsageError) this.count(replyClass("usage").counter);
    return Promise.reject(e);
  }

  /** As many tokens as the bucket holds now, up to `max` (RL.TAKE). */
  async take(key: string, policy: Policy, max: number): Promise<Taken> {
    let cmd: string[];
    try {
      cmd = command.take(key, policy, max);
    } catch (e) {
      return this.refused(e);
    }
    try {
      return takenFromReply(await this.call(cmd));
    } catch (e) {
      if (!(e instanceof CallError)) throw e;
      if (this.local) {
        const t = this.local.take(key, policy, max, undefined, true, e);
        this.toldDegraded({ decision: t.decision, error: e });
        return t;
      }
      const decision = this.degrade([[key, policy, max]], e);
      return { decision, taken: decision.allowed ? max : 0 };
    }
  }

  /** Reserves `cost` tokens that become available within `maxWaitMs`: allowed with `retryAfterMs` the
   * wait before using them (0: now); denied (nothing taken) when they would not be there in time. */
  async reserve(key: string, policy: Policy, cost: number, maxWaitMs: number): Promise<Decision> {
    return this.reserveAll([[key, policy, cost]], maxWaitMs);
  }

  /** `reserve` over several limits: token buckets reserve, the others decide now, all in one call. */
  async reserveAll(limits: readonly Limit[], maxWaitMs: number): Promise<Decision> {
    let cmd: string[];
    try {
      cmd = this.built(limits, command.reserve(limits, maxWaitMs) ?? command.decide(limits));
    } catch (e) {
      return this.refused(e);
    }
    return this.decided(limits, cmd);
  }

  /** Waits up to `maxWaitMs` for `limits` to allow: a reservation's wait slept, a denial asked again
   * when its `retryAfterMs` is over. Resolves allowed (retryAfterMs 0) or with the last denial. */
  async wait(limits: readonly Limit[], maxWaitMs: number): Promise<Decision> {
    const giveUp = performance.now() + maxWaitMs;
    const reserving = limits.some((l) => l[1] instanceof TokenBucket);
    for (;;) {
      const left = Math.max(0, giveUp - performance.now());
      const d = await this.reserveAll(limits, left);
      if (d.degraded) return d;
      if (d.allowed) {
        if (reserving && (d.retryAfterMs ?? 0) > 0) {
          await sleep(d.retryAfterMs!);
          return d.with({ retryAfterMs: 0 });
        }
        return d;
      }
      if (d.retryAfterMs === null || left <= 0 || d.retryAfterMs > left) return d;
      const policy = limits[Math.min(d.limiting, limits.length - 1)]![1];
      let next = d.retryAfterMs;
      if (policy instanceof TokenBucket) next = Math.max(0, next - policy.periodMs);
      next += Math.random() * Math.max(next / 10, 1);
      await sleep(Math.min(Math.max(next, 1), left));
    }
  }

  /** A concurrency permit of `weight` (default 1) on `key`; with other limits, pass `[key, policy,
   * cost]` triples. `renew` (default true): renew its leases in the background while it lives. */
  async acquire(key: string, policy: Policy, weight?: number, options?: { renew?: boolean }): Promise<Permit>;
  async acquire(limits: readonly Limit[], options?: { renew?: boolean }): Promise<Permit>;
  async acquire(a: string | readonly Limit[], b?: Policy | { renew?: boolean }, c?: number, d?: { renew?: boolean }): Promise<Permit> {
    const limits: readonly Limit[] = typeof a === "string" ? [[a, b as Policy, c ?? 1]] : a;
    const options = (typeof a === "string" ? d : (b as { renew?: boolean } | undefined)) ?? {};
    const holder = randomBytes(9).toString("base64url");
    let cmd: string[];
    try {
      cmd = this.built(limits, command.acquire(limits, holder));
    } catch (e) {
      return this.refused(e);
    }
    const decision = await this.decided(limits, cmd, holder);
    const leases = limits
      .filter((l): l is readonly [string, Concurrency, number] => l[1] instanceof Concurrency)
      .map(([key, policy]) => [key, policy] as const);
    return new Permit(this, decision, holder, leases, options.renew ?? true, decision.degraded ? this.local : undefined);
  }

  /** Holds an estimate (RL.HOLD): allowed when every limit allows, then each is taken; the units of
   * token buckets, fixed windows and sliding counters are held under the hold's id until it is settled
   * (`Hold.settle`, `add`, `cancel`, or `close` / `await using`: the abandon policy, applied now).
   * Redis not answering: the failure policy decides, and the hold is `local` (its settle does nothing). */
  async hold(limits: readonly HoldLimit[], options: HoldOptions = {}): Promise<Hold> {
    const plain: Limit[] = limits.map((l) => [l[0], l[1], l[2]]);
    const id = options.id ?? randomBytes(12).toString("base64url");
    let ledger: string;
    let cmd: string[];
    let abandon: string;
    try {
      const word = abandonWord(options.abandon ?? HOLDS.abandon_default);
      if (word === undefined) throw new UsageError(`a hold's abandon policy is one of ${HOLDS.abandon.join(", ")}`);
      abandon = word;
      ledger = options.ledger ?? ledgerOf(String(limits[0]?.[0] ?? ""));
      cmd = this.built(plain, command.hold(ledger, id, options.ttlMs ?? DEFAULT_TTL_MS, abandon, plain), ledger);
    } catch (e) {
      return this.refused(e);
    }
    const decision = await this.decided(plain, cmd);
    const held = limits.filter((l) => HELD_KINDS.has(l[1].kind.name)).map((l) => l[0]);
    return new Hold(this, decision, ledger, id, limits, held, abandon);
  }

  /** A line at error level in the limiter's log (a hold's settle given up). */
  logError(message: string): void {
    this.logger?.error(message);
  }

  /** Gives `units` back to a token bucket, a fixed window or a sliding counter; false when Redis
   * did not answer (nothing given back there; under `fallback`, given back to the in-process limit). */
  async refund(key: string, policy: Policy, units: number): Promise<boolean> {
    let cmd: string[];
    try {
      cmd = command.refund(key, policy, units);
    } catch (e) {
      return this.refused(e);
    }
    try {
      await this.call(cmd);
      return true;
    } catch (e) {
      if (e instanceof CallError) {
        this.local?.refund(key, policy, units);
        return false;
      }
      throw e;
    }
  }

  /** What `key` holds, without changing it (RL.INSPECT); with the policy, what a request would meet
   * now. Rejects with a `CallError` when Redis does not answer. */
  async peek(key: string, policy?: Policy): Promise<Inspection> {
    let cmd: string[];
    try {
      cmd = command.inspect(key, policy);
    } catch (e) {
      return this.refused(e);
    }
    return inspectionFromReply(await this.call(cmd));
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Whether `landed` settles within `ms` (its timer cleared either way). */
async function landedWithin(landed: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((done) => (timer = setTimeout(() => done(false), ms)));
  try {
    return await Promise.race([landed.then(() => true as const, () => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}
