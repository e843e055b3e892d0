/**
 * Engines: who computes the limiters on the server, and how one module command is sent to it. As
 * `client/src/engine.rs`. The module's RL.* commands, or where no module can be loaded the same
 * limiters as the Lua library, called with FCALL (Redis 7+) or EVALSHA. Every call is built as the
 * module's command; `Engine.run` sends it as the chosen engine takes it, and a call answered NOSCRIPT or
 * "Function not found" (it never ran) loads the library or the script on the node that answered (the
 * key's node) and is sent once more.
 */
import { createHash } from "node:crypto";
import { CONTRACT, LIBRARY, command as contractCommand, firstKey, groupLen, keyPositions } from "./contract.js";
import { missing, refuses } from "./errors.js";
import { SCRIPT_SOURCES } from "./assets.js";

export type EngineName = "auto" | "module" | "functions" | "scripts";

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
  if (rule.rule === "groups") {
    const out = [upper];
    let at = 0;
    for (const key of keys) {
      const n = at < args.length ? 1 + (groupLen(args[at]!, args.slice(at + 1)) ?? 3) : 0;
      out.push(key, ...args.slice(at, at + n));
      at += n;
    }
    return [...out, ...args.slice(at)];
  }
  return [upper, ...keys, ...args];
}

/** The first key of a module command (what routes it in a cluster); undefined without keys. */
export function routeOf(cmd: readonly string[]): string | undefined {
  if (cmd.length < 2) return undefined;
  if (!contractCommand(cmd[0]!)) return cmd[1]; // DEL, EXISTS, ...: their first key
  const at = firstKey(cmd[0]!);
  return at !== undefined && cmd.length > 1 + at ? cmd[1 + at] : undefined;
}

const DESCRIBE: Record<EngineName, string> = {
  auto: "not chosen yet",
  module: "the ratelimit module",
  functions: "the Lua library through FCALL",
  scripts: "the Lua library through EVALSHA scripts",
};

function refusal(engine: EngineName, e: Error): string {
  const noperm = e.message.includes("NOPERM");
  if (engine === "functions") return noperm ? "FCALL or FUNCTION LOAD refused to this user (NOPERM)" : "FCALL unknown to this server";
  return noperm ? "the module's commands refused to this user (NOPERM)" : "module not loaded";
}

/** The engine a limiter asked for, the one it uses, and why. */
export class Engine {
  chosen: Exclude<EngineName, "auto">;
  private why = "";

  constructor(readonly wanted: EngineName) {
    this.chosen = wanted === "auto" ? "module" : wanted;
  }

  describe(): { engine: Exclude<EngineName, "auto">; why: string; description: string } {
    const why = this.wanted !== "auto" ? "asked for" : this.why || "the module answered";
    return { engine: this.chosen, why, description: DESCRIBE[this.chosen] };
  }

  /** Chooses anew on the next call (after an outage: a failover may land on another server). */
  forget(): void {
    if (this.wanted === "auto") {
      this.chosen = "module";
      this.why = "";
    }
  }

  /** Sends `cmd` (a module command, or any other) as the engine in use takes it; under auto, moves to
   * the next engine where the server refuses one. Resolves to the reply; rejects with the error reply
   * (a `RedisErrorReply`) that settles it, or whatever `send` rejects with otherwise. `send` is given
   * `cmd` itself for the module (it must not keep or change it). */
  run(cmd: readonly string[], send: Send): Promise<unknown> {
    const auto = this.wanted === "auto";
    const route = routeOf(cmd);
    const engine = this.chosen;
    if (engine === "module") {
      // The engine in use answers: one send, nothing added on the way unless it refuses.
      const sent = send(cmd as string[], route);
      if (!auto) return sent;
      return sent.then(undefined, (e: unknown) => {
        if (!(e instanceof RedisErrorReply) || !refuses(e.message)) throw e;
        const call = Call.of(cmd);
        if (!call) throw e;
        if (this.chosen === "module") this.chosen = "functions";
        return this.rest(call, cmd, route, send, [refusal("module", e)], true);
      });
    }
    const call = Call.of(cmd);
    if (!call) return send(cmd as string[], route);
    return send(form(engine, call, cmd), route).then(undefined, (e: unknown) =>
      this.rest(call, cmd, route, send, [], !auto, [engine, e]),
    );
  }

  /** What follows a call the engine in use did not settle (`failed`: the engine it went to, and its
   * error): loading the library or script, or the next engine under auto. */
  private async rest(
    call: Call, cmd: readonly string[], route: string | undefined, send: Send, reasons: string[], askedAgain: boolean,
    failed?: [Exclude<EngineName, "auto">, unknown],
  ): Promise<unknown> {
    const auto = this.wanted === "auto";
    for (;;) {
      let engine: Exclude<EngineName, "auto"> = this.chosen;
      let result: unknown;
      try {
        if (failed) {
          const [was, e] = failed;
          failed = undefined;
          engine = was;
          throw e;
        }
        result = await send(form(engine, call, cmd), route);
      } catch (e) {
        if (!(e instanceof RedisErrorReply)) throw e;
        let error: RedisErrorReply | undefined = e;
        if (engine !== "module" && missing(e.message)) {
          if (!askedAgain) {
            // A server without the library may be another kind of server: ask the module again, once.
            askedAgain = true;
            reasons.length = 0;
            this.chosen = "module";
            this.why = "";
            continue;
          }
          try {
            result = await loadAndSend(engine, call, route, send);
            error = undefined;
          } catch (again) {
            if (!(again instanceof RedisErrorReply)) throw again;
            error = again;
          }
        }
        if (error) {
          if (!(auto && engine !== "scripts" && refuses(error.message))) throw error;
          reasons.push(refusal(engine, error));
          this.chosen = engine === "module" ? "functions" : "scripts";
          continue;
        }
      }
      if (reasons.length) {
        reasons.push(`using ${DESCRIBE[engine]}`);
        this.chosen = engine;
        this.why = reasons.join("; ");
      }
      return result;
    }
  }
}

function form(engine: EngineName, call: Call, cmd: readonly string[]): string[] {
  if (engine === "functions") return call.fcall();
  if (engine === "scripts") return call.evalsha();
  return cmd as string[];
}

/** `call` where its node has neither the library nor the script: EVAL (which caches the script), or
 * FUNCTION LOAD REPLACE on that node and FCALL again. */
async function loadAndSend(engine: EngineName, call: Call, route: string | undefined, send: Send): Promise<unknown> {
  if (engine === "scripts") return send(call.eval(), route);
  await send(["FUNCTION", "LOAD", "REPLACE", LIBRARY], route);
  return send(call.fcall(), route);
}
