/**
 * Engines: who computes the limiters on the server, and how one module command is sent to it. As
 * `client/src/engine.rs`. The module's RL.* commands, or where no module can be loaded the same
 * limiters as the Lua library, called with FCALL (Redis 7+) or EVALSHA. Every call is built as the
 * module's command; `Engine.run` sends it as the engine in use takes it and follows the contract's
 * engine machine on the answers that steer (an unknown or refused command, "Function not found",
 * NOSCRIPT): the next engine under auto, the library loaded on the node that answered, the script sent
 * with EVAL.
 */
import { createHash } from "node:crypto";
import { CONTRACT, LIBRARY, command as contractCommand, firstKey, groupLen, keyPositions } from "./contract.js";
import { answerOf, reports, sends, start, step, type Sent, type Wanted } from "./engineMachine.js";
import { SCRIPT_SOURCES } from "./assets.js";

/** `auto`, or one engine: `module`, `fcall` (also `functions`), `evalsha` (also `scripts`). */
export type EngineName = "auto" | "module" | "fcall" | "evalsha" | "functions" | "scripts";

/** An error reply from Redis, as an adapter reports it (whatever client it wraps). */
export class RedisErrorReply extends Error {
  override name = "RedisErrorReply";
}

/** Sends one command to the node of `route` (a key), or any node when undefined. */
export type Send = (args: string[], route: string | undefined) => Promise<unknown>;

/**
 * The EVALSHA script of the library function `fn`: a generated file (the repository's
 * lua/scripts/<function>.lua, at the contract's `library.evalsha.scripts`), embedded and sent as it is.
 */
export function scriptSource(fn: string): string {
  const code = SCRIPT_SOURCES[fn];
  if (code === undefined) throw new Error(`redis-ratelimit: no EVALSHA script for ${fn} in the package`);
  return code;
}

const SCRIPTS = new Map<string, { code: string; sha: string }>();
export function script(fn: string): { code: string; sha: string } {
  let s = SCRIPTS.get(fn);
  if (!s) {
    const code = scriptSource(fn);
    s = { code, sha: createHash("sha1").update(code, "utf8").digest("hex") };
    SCRIPTS.set(fn, s);
  }
  return s;
}

/** A library function's call: its name, keys and other arguments, in the command's order. */
export class Call {
  constructor(readonly fn: string, readonly keys: string[], readonly args: string[]) {}

  /** The library's form of a module command; undefined for any other command (sent as it is). */
  static of(cmd: readonly string[]): Call | undefined {
    if (cmd.length === 0) return undefined;
    const spec = contractCommand(cmd[0]!);
    const fn = spec?.function;
    if (!spec || !fn) return undefined;
    const rule = spec.keys;
    if (rule.rule === "at") {
      // One key (RL.FIXED, RL.SLIDE, ...): built without the general rule's lists.
      const at = 1 + rule.index;
      if (at >= cmd.length) return new Call(fn, [], cmd.slice(1));
      const args: string[] = [];
      for (let i = 1; i < cmd.length; i++) if (i !== at) args.push(cmd[i]!);
      return new Call(fn, [cmd[at]!], args);
    }
    const rest = cmd.slice(1);
    const at = new Set(keyPositions(spec.name, rest));
    return new Call(fn, rest.filter((_, i) => at.has(i)), rest.filter((_, i) => !at.has(i)));
  }

  fcall(): string[] {
    return ["FCALL", this.fn, String(this.keys.length), ...this.keys, ...this.args];
  }
  evalsha(): string[] {
    return ["EVALSHA", script(this.fn).sha, String(this.keys.length), ...this.keys, ...this.args];
  }
  eval(): string[] {
    return ["EVAL", script(this.fn).code, String(this.keys.length), ...this.keys, ...this.args];
  }
}

/** The module's form of a call given as its keys and other arguments (FCALL's order). */
export function moduleCommand(name: string, keys: readonly string[], args: readonly string[]): string[] {
  const upper = name.toUpperCase();
  const rule = contractCommand(upper)?.keys ?? { rule: "at" as const, index: 0 };
  if (rule.rule === "at" && keys.length === 1) {
    return [upper, ...args.slice(0, rule.index), ...keys, ...args.slice(rule.index)];
  }
  if (rule.rule === "every") {
    const out = [upper];
    const step = rule.step - 1;
    keys.forEach((key, i) => out.push(key, ...args.slice(step * i, step * i + step)));
    return out;
  }
  if (rule.rule === "groups") return [upper, ...groupsOf(keys, args)];
  if (rule.rule === "ledger_groups" && keys.length) {
    const fixed = rule.groups_from - 1;
    return [upper, keys[0]!, ...args.slice(0, fixed), ...groupsOf(keys.slice(1), args.slice(fixed))];
  }
  if (rule.rule === "ledger_pairs" && keys.length) {
    const fixed = rule.pairs_from - 1;
    const out = [upper, keys[0]!, ...args.slice(0, fixed)];
    keys.slice(1).forEach((key, i) => out.push(key, ...args.slice(fixed + i, fixed + i + 1)));
    return [...out, ...args.slice(fixed + keys.length - 1)];
  }
  return [upper, ...keys, ...args];
}

/** RL.ALL's groups from their keys and the other arguments (FCALL's order), then what is left over. */
function groupsOf(keys: readonly string[], args: readonly string[]): string[] {
  const out: string[] = [];
  let at = 0;
  for (const key of keys) {
    const n = at < args.length ? 1 + (groupLen(args[at]!, args.slice(at + 1)) ?? 3) : 0;
    out.push(key, ...args.slice(at, at + n));
    at += n;
  }
  return [...out, ...args.slice(at)];
}

/** The first key of a module command (what routes it in a cluster); undefined without keys. */
export function routeOf(cmd: readonly string[]): string | undefined {
  if (cmd.length < 2) return undefined;
  if (!contractCommand(cmd[0]!)) return cmd[1]; // DEL, EXISTS, ...: their first key
  const at = firstKey(cmd[0]!);
  return at !== undefined && cmd.length > 1 + at ? cmd[1 + at] : undefined;
}

/** The keys of a module command (a library function's keys), or its first argument for any other. */
export function keysOf(cmd: readonly string[]): string[] {
  const call = Call.of(cmd);
  if (call) return call.keys;
  return cmd.length > 1 ? [cmd[1]!] : [];
}

/** An engine name of the contract's machine for what a limiter asked for (the older names `functions`
 * and `scripts` are FCALL's and EVALSHA's). */
function wantedOf(name: EngineName): Wanted {
  if (name === "functions") return "fcall";
  if (name === "scripts") return "evalsha";
  return name;
}

/** The machine gave up on a call (no engine answers, or the library went missing again and again):
 * the call ends as `misconfigured`, whatever the last reply was. */
export class EngineGaveUp extends RedisErrorReply {
  override name = "EngineGaveUp";
}

/** Why the machine left the engine `sent` went to, for `describe()`. */
function reason(sent: Sent, answer: string): string {
  if (sent === "module") return answer === "noperm" ? "the module's commands refused to this user (NOPERM)" : "module not loaded";
  return answer === "noperm" ? "FCALL or FUNCTION LOAD refused to this user (NOPERM)" : "FCALL unknown to this server";
}

/** Library loads on one node: the one in flight, and when the last one ended (an epoch of `Engine`). */
interface Loads {
  inflight: Promise<unknown> | undefined;
  ended: number;
}

/**
 * The engine a limiter asked for, the one in use, and why: the contract's engine machine
 * (`engineMachine.ts`), one state per limiter. A call starts in the state the limiter is in, sends what
 * that state sends and steps through the table with each answer; its last state becomes the limiter's.
 * At most one `FUNCTION LOAD` per node at a time: calls that find the library missing while a load is
 * in flight there wait for it, then send their own FCALL.
 */
export class Engine {
  readonly wanted: Wanted;
  private state: string;
  private why = "";
  private decidedBy: string;
  /** Loads that ended so far, all nodes: a call that sent its FCALL before a load on its node ended
   * finds the library there and sends again without loading. */
  private epoch = 0;
  private readonly loads = new Map<string, Loads>();
  /** Per state, what it sends and where an `ok` to it leads (the machine's step, looked up once). */
  private readonly okSteps = new Map<string, { sent: Sent; next: string; decided: boolean; reports: string }>();

  /** `nodeOf`: the node a key is on (a cluster), for one load per node; one node without it. */
  constructor(wanted: EngineName, private readonly nodeOf: (route: string | undefined) => string = () => "") {
    this.wanted = wantedOf(wanted);
    this.state = start(this.wanted);
    this.decidedBy = reports(this.state);
  }

  /** The machine's state (`unknown` until a call decided under auto, then the engine in use: `module`,
   * `fcall`, `evalsha`), why, and what it reports (`not yet known`, `the ratelimit module`, ...). */
  describe(): { engine: string; why: string; description: string } {
    const why = this.wanted !== "auto" ? "asked for" : this.state === "unknown" ? "no call has been decided yet" : this.why || "the module answered";
    return { engine: this.state, why, description: reports(this.state) };
  }

  /** What `engine` reports now. */
  get reports(): string {
    return reports(this.state);
  }

  /** What the engine that decided last reports (`not yet known` before any): what an outage names,
   * since the machine goes back to its start at the outage's first answer. */
  get lastDecided(): string {
    return this.decidedBy;
  }

  /** Back to the start (after an outage: a failover may land on another kind of server). */
  forget(): void {
    this.move(start(this.wanted), []);
  }

  private move(state: string, reasons: string[]): void {
    if (state === this.state) return;
    this.state = state;
    this.why = reasons.length ? [...reasons, `using ${reports(state)}`].join("; ") : "";
  }

  /** Sends `cmd` (a module command, or any other) as the engine in use takes it, stepping through the
   * machine on each answer. Resolves to the reply; rejects with the error reply (a `RedisErrorReply`;
   * an `EngineGaveUp` where the machine gave up) or whatever `send` rejects with otherwise. `send` is
   * given `cmd` itself for the module (it must not keep or change it). */
  run(cmd: readonly string[], send: Send): Promise<unknown> {
    const route = routeOf(cmd);
    if (cmd.length === 0 || !contractCommand(cmd[0]!)?.function) return send(cmd as string[], route);
    const state = this.state;
    const ok = this.okStep(state);
    const sent = ok.sent;
    const seen = this.epoch;
    const call = sent === "module" ? undefined : Call.of(cmd)!;
    return send(call ? form(sent, call) : (cmd as string[]), route).then(
      (reply) => {
        if (ok.decided) {
          if (this.state !== ok.next) this.move(ok.next, []);
          this.decidedBy = ok.reports;
          return reply;
        }
        const [next, then] = step(this.wanted, state, sent, "ok", 1);
        if ("send" in then) return this.drive(cmd, route, send, next, then.send, 2, seen, []);
        this.move(next, []);
        throw new EngineGaveUp(`ERR no engine answers: ${sent} answered, and the engine machine gave up`);
      },
      (e: unknown) => this.answered(cmd, route, send, state, sent, 1, seen, [], e),
    );
  }

  private okStep(state: string): { sent: Sent; next: string; decided: boolean; reports: string } {
    let o = this.okSteps.get(state);
    if (!o) {
      const sent = sends(state);
      const [next, then] = step(this.wanted, state, sent, "ok", 1);
      o = { sent, next, decided: "done" in then && then.done === "decided", reports: reports(next) };
      this.okSteps.set(state, o);
    }
    return o;
  }

  /** A command of the call (its `n`-th) was answered with the error `e`: the machine's next step. */
  private answered(
    cmd: readonly string[], route: string | undefined, send: Send, state: string, sent: Sent, n: number, seen: number,
    reasons: string[], e: unknown,
  ): Promise<unknown> {
    const answer = e instanceof RedisErrorReply ? answerOf(e.message) : "outage";
    const [next, then] = step(this.wanted, state, sent, answer, n);
    if (next !== state && next !== "unknown" && next !== "module") reasons.push(reason(sent, answer));
    if ("send" in then) return this.drive(cmd, route, send, next, then.send, n + 1, seen, reasons);
    this.move(next, reasons);
    if (then.done === "misconfigured") {
      return Promise.reject(e instanceof RedisErrorReply && !(e instanceof EngineGaveUp) ? new EngineGaveUp(e.message) : e);
    }
    return Promise.reject(e);
  }

  /** The rest of a call from its `n`-th command, `sent`, in `state`. */
  private async drive(
    cmd: readonly string[], route: string | undefined, send: Send, state: string, sent: Sent, n: number, seen: number,
    reasons: string[],
  ): Promise<unknown> {
    const call = Call.of(cmd)!;
    for (;;) {
      let reply: unknown;
      try {
        if (sent === "function_load") {
          reply = await this.load(route, send, seen);
        } else {
          seen = this.epoch;
          reply = await send(form(sent, call, cmd), route);
        }
      } catch (e) {
        return this.answered(cmd, route, send, state, sent, n, seen, reasons, e);
      }
      const [next, then] = step(this.wanted, state, sent, "ok", n);
      state = next;
      if ("done" in then) {
        this.move(state, reasons);
        if (then.done === "decided") {
          this.decidedBy = reports(state);
          return reply;
        }
        throw new EngineGaveUp(`ERR no engine answers: the library went missing again after ${n} commands`);
      }
      sent = then.send;
      n++;
    }
  }

  /** FUNCTION LOAD REPLACE on the node of `route`, at most one at a time there: a call that finds one
   * in flight waits for it; one that sent its FCALL before a load there ended (`seen`) loads nothing. */
  private load(route: string | undefined, send: Send, seen: number): Promise<unknown> {
    const node = this.nodeOf(route);
    let loads = this.loads.get(node);
    if (!loads) this.loads.set(node, (loads = { inflight: undefined, ended: -1 }));
    if (loads.inflight) return loads.inflight;
    if (loads.ended >= seen) return Promise.resolve("OK");
    const l = loads;
    const done = (): void => {
      l.inflight = undefined;
      l.ended = this.epoch++;
    };
    l.inflight = send(["FUNCTION", "LOAD", "REPLACE", LIBRARY], route).then(
      (v) => (done(), v),
      (e: unknown) => {
        done();
        throw e;
      },
    );
    return l.inflight;
  }
}

/** The command `sent` stands for, for `call` (`cmd`: the module's form). */
function form(sent: Sent, call: Call, cmd?: readonly string[]): string[] {
  if (sent === "fcall") return call.fcall();
  if (sent === "evalsha") return call.evalsha();
  if (sent === "eval") return call.eval();
  return (cmd ?? call.fcall()) as string[];
}
