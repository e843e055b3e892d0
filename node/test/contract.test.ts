// The contract's vectors (contract/vectors/*.json, written by the Rust reference): every case this
// package can run, run. A case skipped is listed in SKIPPED with its reason. Also: the package's copies
// of the contract and the library are the repository's, and its EVALSHA scripts have the contract's SHA-1s.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./servers.ts";
import { assertOutcome, callOf, cases, policyOf, settle, VECTORS, type Any } from "./vectors.ts";
import {
  Call, CONTRACT, Decision, Engine, EngineGaveUp, Limiter, PolicyError, RedisErrorReply, TokenBucket, UsageError, classOfReply,
  classOfTransport, commands, moduleCommand, script, type Adapter, type Limit, type Send,
} from "../src/index.ts";
import { LIBRARY_FUNCTIONS, limitKey } from "../src/contract.ts";
import { LocalLimiter } from "../src/fallback.ts";
import { assets } from "../scripts/embed.mjs";

const NODE = join(ROOT, "node");

/** Vector files, or parts of them, this package does not run, and why. */
export const SKIPPED: Record<string, string> = {};
// volume.json: in volume.test.ts (its skipped cases listed there).
const RUN = ["policies", "commands", "replies", "callers", "forwarded", "http", "fallback", "errors", "engines", "volume", "llm_headers"];

test("every vector file is run or listed as skipped", () => {
  const files = readdirSync(VECTORS).filter((f) => f.endsWith(".json")).map((f) => f.replace(/\.json$/, ""));
  for (const f of files) assert.ok(RUN.includes(f) || f in SKIPPED, `vector file ${f} neither run nor skipped`);
});

test("the package's contract, library and scripts are the repository's, and the built-in copy is theirs", () => {
  // The copies scripts/embed.mjs makes (not checked in): every script of lua/scripts/ and no other.
  const sync = "stale: run `node scripts/embed.mjs` in node/";
  assert.equal(readFileSync(join(NODE, "contract.json"), "utf8"), readFileSync(join(ROOT, "contract", "contract.json"), "utf8"), sync);
  assert.equal(readFileSync(join(NODE, "lua", "ratelimit.lua"), "utf8"), readFileSync(join(ROOT, "lua", "ratelimit.lua"), "utf8"), sync);
  const scripts = readdirSync(join(ROOT, "lua", "scripts")).sort();
  assert.deepEqual(readdirSync(join(NODE, "lua", "scripts")).sort(), scripts, sync);
  for (const f of scripts) {
    assert.equal(readFileSync(join(NODE, "lua", "scripts", f), "utf8"), readFileSync(join(ROOT, "lua", "scripts", f), "utf8"), `${f}: ${sync}`);
  }
  assert.equal(readFileSync(join(NODE, "src", "assets.ts"), "utf8"), assets(), sync);
});

test("every command and function of the contract is known, the EVALSHA scripts have its SHA-1s", () => {
  const fns = CONTRACT.commands.filter((c) => c.function).map((c) => c.name).sort();
  assert.deepEqual([...LIBRARY_FUNCTIONS.keys()].sort(), fns);
  for (const f of CONTRACT.library.functions) assert.equal(script(f.name).sha, f.evalsha_sha1, f.name);
});

test("policies.json", () => {
  let n = 0;
  for (const { input, output } of cases("policies")) {
    n++;
    let policy;
    try {
      policy = policyOf(input);
    } catch (e) {
      assert.ok(e instanceof PolicyError, String(e));
      assert.ok(output.error, `refused ${JSON.stringify(input, big)}: ${e.message}`);
      assert.deepEqual([e.field, e.reason], [output.error.field, output.error.expected], JSON.stringify(input, big));
      continue;
    }
    assert.ok(!output.error, `accepted ${JSON.stringify(input, big)}`);
    assert.deepEqual([...policy.params], output.params, JSON.stringify(input, big));
    assert.equal(policy.limitExact, BigInt(output.limit));
    assert.equal(policy.periodNs, BigInt(output.period_ns), JSON.stringify(input, big));
  }
  assert.ok(n > 100);
});

function big(_k: string, v: unknown): unknown {
  return typeof v === "bigint" ? `${v}n` : v;
}

test("commands.json", () => {
  const next = commands.requestIds.next;
  commands.requestIds.next = () => "{request_id}";
  try {
    for (const { input, output } of cases("commands")) {
      if (input.call === "cost") {
        costCase(input.cost, output);
        continue;
      }
      const limits: Limit[] = input.limits.map((l: Any) => [l.key, policyOf(l.policy), l.cost] as const);
      const holder: string = input.holder ?? "";
      let built: string[];
      try {
        const [key, policy, cost] = limits[0] ?? [];
        switch (input.call) {
          case "decide": built = commands.decide(limits); break;
          case "acquire": built = commands.acquire(limits, holder); break;
          case "reserve": built = commands.reserve(limits, input.max_wait_ms) ?? commands.decide(limits); break;
          case "refund": built = commands.refund(key!, policy!, cost!); break;
          case "reserve_batch": built = commands.batch(key!, policy!, cost!, input.max, input.max_wait_ms); break;
          case "inspect": built = commands.inspect(key!, policy!); break;
          case "release": built = commands.release(key!, holder); break;
          case "renew": built = commands.renew(key!, policy!.periodMs, holder); break;
          default: throw new Error(input.call);
        }
      } catch (e) {
        assert.ok(e instanceof UsageError, String(e));
        if (output.usage) {
          assert.deepEqual({ code: e.code, message: e.message }, output.usage, JSON.stringify(input));
          continue;
        }
        assert.ok(output.error, `refused ${JSON.stringify(input)}: ${e.message}`);
        // core's render errors are the contract's words; the others name each language's own calls.
        if (Object.values(CONTRACT.errors.render).includes(output.error)) assert.equal(e.message, output.error);
        continue;
      }
      const what = JSON.stringify(input);
      assert.ok(!output.error && !output.usage, `built ${built} for ${what}`);
      assert.deepEqual(built, output.module, what);
      const call = Call.of(built);
      assert.deepEqual(call?.fcall() ?? null, output.fcall, what);
      assert.deepEqual(call?.evalsha() ?? null, output.evalsha, what);
      if (call) assert.deepEqual(moduleCommand(built[0]!, call.keys, call.args), output.module, what);
    }
  } finally {
    commands.requestIds.next = next;
  }
});

/** A cost as a caller writes it (a web `cost=` parameter): a whole number's text is a number (a bigint
 * past 2^53), a decimal's a number, anything else (`1e3`, ``) stays text, which is no cost. */
function costCase(text: string, output: Any): void {
  const value: unknown = /^-?\d+$/.test(text) ? (Number.isSafeInteger(Number(text)) ? Number(text) : BigInt(text)) : /^-?\d+\.\d+$/.test(text) ? Number(text) : text;
  let got: string;
  try {
    got = commands.costText(value);
  } catch (e) {
    assert.ok(e instanceof UsageError, String(e));
    assert.ok(output.usage, `refused ${text}: ${e.message}`);
    assert.deepEqual({ code: e.code, message: e.message }, output.usage, text);
    return;
  }
  assert.ok(!output.usage, `accepted ${text}`);
  assert.equal(got, String(output.cost), text);
}

test("replies.json", () => {
  for (const { input, output } of cases("replies")) {
    let d: Decision;
    try {
      d = Decision.fromReply(input.reply);
    } catch {
      assert.ok(output.error, JSON.stringify(input));
      continue;
    }
    assert.ok(!output.error, JSON.stringify(input));
    assert.deepEqual(
      [d.allowed, d.limit, d.remaining, d.limiting, d.retryAfterMs, d.resetAfterMs, d.retryAfterSecs(), d.resetAfterSecs(), d.neverFits],
      [output.allowed, output.limit, output.remaining, output.limiting, output.retry_after_ms, output.reset_after_ms,
        output.retry_after_secs, output.reset_after_secs, output.never_fits],
      JSON.stringify(input),
    );
  }
});

import {
  Caller, callerTag, groupIp, parseIp, formatIp, TrustedProxies, addHeaders, denied, concurrencyLimited, unavailable, llmHeaders, type Budget,
} from "../src/http/index.ts";

test("callers.json", () => {
  for (const { input, output } of cases("callers")) {
    let caller: Caller;
    if (input.caller === "principal") caller = Caller.principal(input.id);
    else if (input.caller === "tenant") caller = Caller.tenant(input.id);
    else if (input.caller === "ip") caller = Caller.ip(groupIp(parseIp(input.ip)!, input.ipv6_prefix));
    else caller = Caller.unknown();
    const what = JSON.stringify(input).slice(0, 100);
    assert.equal(caller.keyPart(), output.key_part, what);
    assert.equal(callerTag(input.prefix, caller), output.tag, what);
    assert.equal(caller.toString(), output.display, what);
    if (output.limit_key !== undefined) assert.equal(limitKey(output.tag, input.name, policyOf(input.policy).kind.name), output.limit_key, what);
  }
});

test("forwarded.json", () => {
  for (const { input, output } of cases("forwarded")) {
    const trusted = new TrustedProxies(input.trusted_proxies);
    const headers = input.headers.map((h: Any) => [h.name, Buffer.from(h.value_hex, "hex")] as const);
    const peer = input.peer === null ? undefined : parseIp(input.peer);
    const client = trusted.clientIp(peer, headers);
    assert.equal(client ? formatIp(client) : null, output.client_ip, JSON.stringify(input));
  }
});

test("http.json: headers and bodies byte for byte", () => {
  for (const { input, output } of cases("http")) {
    const s = input.decision;
    const d = new Decision(s.allowed, s.limit, s.remaining, s.retry_after_ms, s.reset_after_ms, s.limiting, s.degraded);
    const lim = { name: input.limit.name, windowSecs: input.limit.window_secs, cost: input.limit.cost, rate: input.limit.rate };
    let status = 200, body = "", headers: [string, string][] = [];
    if (input.answer === "served") addHeaders(headers, d, lim, input.structured);
    else {
      const a = input.answer === "denied" ? denied(d, lim, input.structured)
        : input.answer === "concurrency_limited" ? concurrencyLimited(d, lim)
          : unavailable(d, lim, input.structured, input.status, input.misconfigured);
      ({ status, body, headers } = a);
    }
    const what = JSON.stringify(input);
    assert.equal(status, output.status, what);
    assert.deepEqual(headers.map(([n, v]) => [n, v]).sort((a, b) => (a[0]! < b[0]! ? -1 : a[0]! > b[0]! ? 1 : 0)), output.headers, what);
    assert.equal(body, output.body, what);
  }
});

test("llm_headers.json: the LLM headers of two optional budgets, in order", () => {
  const budget = (b: Any): Budget | null => b && { limit: b.limit, remaining: b.remaining, resetMs: b.reset_ms, windowSecs: b.window_secs };
  let n = 0;
  for (const { input, output } of cases("llm_headers")) {
    assert.deepEqual(llmHeaders(budget(input.requests), budget(input.tokens)), output, JSON.stringify(input));
    n++;
  }
  assert.ok(n >= 5);
});

test("fallback.json: the in-process fallback's timed sequences, at each instance's share", () => {
  const fields = (d: Decision) => ({
    allowed: d.allowed, limit: d.limit, limiting: d.limiting, remaining: d.remaining,
    reset_after_ms: d.resetAfterMs, retry_after_ms: d.retryAfterMs,
  });
  let n = 0;
  for (const { input, output } of cases("fallback")) {
    const scenario = input.scenario;
    const t0 = BigInt(input.t0_ns);
    const local = new LocalLimiter(scenario.instances);
    const policies = scenario.policies.map(policyOf);
    const got: Any[] = [];
    for (const step of scenario.steps) {
      const now = t0 + BigInt(step.at_ms) * 1_000_000n;
      const limits: Limit[] = step.limits.map((l: Any) => [l.key, policies[l.policy], l.cost] as const);
      const [key, policy, cost] = limits[0]!;
      switch (step.op) {
        case "decide": got.push({ decision: fields(local.decide(limits, now)) }); break;
        case "acquire": got.push({ decision: fields(local.acquire(limits, step.id, now)) }); break;
        case "release": got.push({ done: local.release(key, step.id, now) }); break;
        case "renew": got.push({ done: local.renew(key, policy.periodMs, step.id, now) }); break;
        case "take": {
          const t = local.take(key, policy, cost, now);
          got.push({ decision: fields(t.decision), taken: t.taken });
          break;
        }
        case "refund": local.refund(key, policy, cost, now); got.push({}); break;
        default: throw new Error(step.op);
      }
    }
    assert.deepEqual(got, output.steps, JSON.stringify(scenario.steps[0]).slice(0, 100));
    n++;
  }
  assert.ok(n >= 10);
});

// An adapter that answers every command as `answer()` says at the time (a vector's error reply, or a
// transport failure as ioredis and node-redis report one): the vectors test the outcome of an answer,
// not a server.
function answering(answer: () => Any): Adapter {
  const send = (): Promise<unknown> => {
    const input = answer();
    if (input.reply !== undefined) return Promise.reject(new RedisErrorReply(input.reply));
    switch (input.transport) {
      case "timeout": return new Promise(() => {});
      case "refused": return Promise.reject(Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" }));
      case "reset": return Promise.reject(Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }));
      case "closed": return Promise.reject(new Error("Connection is closed."));
      default: throw new Error(`no transport ${input.transport}`);
    }
  };
  return { name: "vector", cluster: false, send };
}

/** An outage between the cases' calls (a reset connection). */
const RESET = { transport: "reset" };

/** A limiter answered by `answer()`, with a breaker of `failures` on a clock the test moves, its lines
 * and events recorded. */
function vectorLimiter(failure: string, answer: () => Any, failures = 3) {
  const clock = { ms: 0 };
  const lines: string[] = [];
  const events: Record<string, number> = { outage: 0, recovered: 0, misconfigured: 0, conflict: 0, degraded: 0 };
  const conflictKeys: string[][] = [];
  const rl = new Limiter(answering(answer), {
    failure: failure as "open" | "closed", engine: "module", deadlineMs: 20,
    breaker: { failures, cooldownMs: 1000, now: () => clock.ms },
    logger: { error: (m) => void lines.push(m) },
  });
  for (const e of Object.keys(events)) rl.on(e, (ev: Any) => {
    events[e]!++;
    if (e === "conflict") conflictKeys.push([...ev.keys]);
  });
  return { rl, clock, lines, events, conflictKeys };
}

test("errors.json: each answer's class and outcome, its breaker effect, counter and log", async () => {
  const classes = new Set<string>();
  let n = 0;
  for (const { input, output } of cases("errors")) {
    const what = JSON.stringify(input);
    const [key, policy, cost] = callOf(input.call);
    const cls = input.reply !== undefined ? classOfReply(input.reply) : classOfTransport(input.transport);
    assert.deepEqual(
      { class: cls.name, breaker: cls.breaker, log: cls.log, counter: cls.counter },
      { class: output.class, breaker: output.breaker, log: output.log, counter: output.counter },
      what,
    );
    classes.add(cls.name);

    // The outcome, the counter named by the vector up by one (no other), the log.
    {
      const { rl, lines, events, conflictKeys } = vectorLimiter(input.failure, () => input);
      const before = { ...rl.counters };
      assertOutcome(await settle(rl.check(key, policy, cost)), input, output, what);
      const moved = Object.keys(rl.counters).filter((c) => rl.counters[c] !== before[c]);
      assert.deepEqual(moved, [output.counter], `${what}: counters ${JSON.stringify(rl.counters)}`);
      assert.equal(rl.counters[output.counter], 1, what);
      assert.equal(rl.misconfigured, output.class === "misconfigured", what);
      assert.equal(events.degraded, output.raise ? 0 : 1, what);
      // Once more: the log is once per outage, per cause, per key (the counters count calls, the
      // outage counter outages).
      assertOutcome(await settle(rl.check(key, policy, cost)), input, output, what);
      assert.equal(rl.counters[output.counter], output.log === "outage" ? 1 : 2, what);
      const log = { lines: lines.length, outage: events.outage, misconfigured: events.misconfigured, conflict: events.conflict };
      const want = { lines: 0, outage: 0, misconfigured: 0, conflict: 0 };
      if (output.log === "outage") want.outage = 1;
      else if (output.log === "once_per_cause") Object.assign(want, { lines: 1, misconfigured: 1 });
      else if (output.log === "once_per_key") Object.assign(want, { lines: 1, conflict: 1 });
      else assert.equal(output.log, "none", what);
      assert.deepEqual(log, want, `${what}: ${lines.join(" | ")}`);
      if (output.log === "once_per_cause") assert.ok(lines[0]!.includes(input.reply), `${what}: ${lines[0]}`);
      if (output.log === "once_per_key") {
        assert.deepEqual(conflictKeys, [[key]], what);
        assert.ok(lines[0]!.includes(`conflict on ${key}:`), `${what}: ${lines[0]}`);
      }
    }

    // The breaker (3 failures open it): after 2 outages, this answer. `failure`: the third failure in
    // a row, open. `answered`: a success as a decision is: the outage ends, the count starts again,
    // and 2 more outages leave it closed.
    {
      let answer: Any = RESET;
      const { rl, events } = vectorLimiter(input.failure, () => answer);
      for (let i = 0; i < 2; i++) await rl.check(key, policy, cost);
      assert.equal(rl.breaker!.isOpen, false, what);
      answer = input;
      assertOutcome(await settle(rl.check(key, policy, cost)), input, output, what);
      answer = RESET;
      if (output.breaker === "failure") {
        assert.equal(rl.breaker!.isOpen, true, `${what}: the third failure opens the breaker`);
        assert.equal(events.recovered, 0, what);
      } else {
        assert.equal(output.breaker, "answered", what);
        assert.equal(rl.breaker!.isOpen, false, `${what}: an answer leaves the breaker closed`);
        assert.equal(events.recovered, 1, `${what}: an answer ends the outage`);
        for (let i = 0; i < 2; i++) await rl.check(key, policy, cost);
        assert.equal(rl.breaker!.isOpen, false, `${what}: the failures in a row started again after the answer`);
        await rl.check(key, policy, cost);
        assert.equal(rl.breaker!.isOpen, true, what);
      }
    }

    // The probe after a cool-down meets this answer: `answered` closes the breaker, `failure` opens it
    // again.
    {
      let answer: Any = RESET;
      const { rl, clock, events } = vectorLimiter(input.failure, () => answer);
      for (let i = 0; i < 3; i++) await rl.check(key, policy, cost);
      assert.equal(rl.breaker!.isOpen, true, what);
      answer = input;
      const turnedAway = await rl.check(key, policy, cost);
      assert.equal(turnedAway.error?.name, "BreakerOpenError", what);
      clock.ms += 1000;
      assertOutcome(await settle(rl.check(key, policy, cost)), input, output, what);
      assert.equal(rl.breaker!.isOpen, output.breaker === "failure", `${what}: the probe`);
      assert.equal(events.recovered, output.breaker === "answered" ? 1 : 0, what);
    }
    n++;
  }
  assert.equal(n, cases("errors").length);
  assert.deepEqual([...classes].sort(), CONTRACT_CLASSES, "every class has vectors");
});

const CONTRACT_CLASSES = ["conflict", "misconfigured", "outage", "usage"];

/** The error reply each steering answer of engines.json stands for, as a server writes it. */
const ANSWERS: Record<string, string> = {
  unknown_command: "ERR unknown command 'RL.TOKEN', with args beginning with: 'k' ",
  noperm: "NOPERM User app has no permissions to run the 'rl.token' command",
  function_missing: "ERR Function not found",
  noscript: "NOSCRIPT No matching script. Please use EVAL.",
  error: "ERR the key holds a value that is not this limiter's state",
};

/** What a command is to the engine machine. */
function sentOf(args: string[]): string {
  const name = args[0]!.toUpperCase();
  if (name === "FCALL") return "fcall";
  if (name === "FUNCTION") return "function_load";
  if (name === "EVALSHA") return "evalsha";
  if (name === "EVAL") return "eval";
  return "module";
}

test("engines.json: the engine machine's commands, outcome, state and report for each call", async () => {
  const cmd = commands.decide([["rl:{e}:k", new TokenBucket({ capacity: 10, perSecond: 5 }), 1]]);
  let n = 0;
  for (const { input, output } of cases("engines")) {
    const engine = new Engine(input.wanted);
    assert.equal(engine.reports, input.wanted === "auto" ? "not yet known" : engine.reports);
    for (let i = 0; i < input.calls.length; i++) {
      const answers: string[] = [...input.calls[i]];
      const sent: string[] = [];
      const send: Send = (args) => {
        sent.push(sentOf(args));
        const a = answers.shift();
        if (a === "ok") return Promise.resolve(sentOf(args) === "function_load" ? "rl" : [1, 10, 9, 0, 200]);
        if (a === "outage") return Promise.reject(Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }));
        return Promise.reject(new RedisErrorReply(ANSWERS[a!]!));
      };
      const outcome = await engine.run(cmd, send).then(
        () => "decided",
        (e: unknown) => (e instanceof EngineGaveUp ? "misconfigured" : e instanceof RedisErrorReply ? "error" : "outage"),
      );
      const want = output.calls[i];
      const what = `${JSON.stringify(input)} call ${i}`;
      assert.deepEqual(
        { sent, outcome, state: engine.describe().engine, reports: engine.reports },
        { sent: want.sent, outcome: want.outcome, state: want.state, reports: want.reports },
        what,
      );
      n++;
    }
  }
  assert.ok(n >= 15);
});

test("a caller's id or a limit's name holding `$&` is written as it is (not a replacement pattern)", () => {
  assert.equal(callerTag("rl", Caller.principal("a$&b")), "rl:{user:a$&b}");
  assert.equal(limitKey("rl:{user:a$&b}", "x$'", "token_bucket"), "rl:{user:a$&b}:x$':token_bucket");
});
