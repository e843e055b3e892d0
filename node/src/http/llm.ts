/** The rate limit headers LLM clients read (OpenAI's, which LiteLLM and the SDKs' retry logic read):
 * `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the reset in Go's duration form (`850ms`,
 * `1.5s`, `6m0s`), and beside them the IETF draft's `RateLimit-Policy` and `RateLimit` with a policy per
 * unit. For a gateway in front of an LLM: one budget for its request limit, one for its token budget
 * (a hold's). Every name is the contract's (`http.llm`); the Rust reference is `client/src/http/llm.rs`. */
import { HTTP, fill } from "../contract.js";
import type { Decision, Inspection } from "../decision.js";
import type { Policy } from "../policy.js";

/** One unit's state: its limit, what is left, ms until it is whole again, and its window in whole
 * seconds (`RateLimit-Policy`'s `w`). */
export interface Budget {
  limit: number;
  remaining: number;
  resetMs: number;
  windowSecs: number;
}

const LLM = HTTP.llm;
if (LLM.units.length !== 2 || LLM.fields.length !== 3 || !LLM.name.includes("{field}") || !LLM.name.includes("{unit}")) {
  throw new Error("redis-ratelimit: the contract's http.llm is not two units of three fields");
}
/** NAMES[u][f]: the header of the contract's unit `u` and field `f` (limit, remaining, reset). */
const NAMES: readonly (readonly string[])[] = LLM.units.map((unit) => LLM.fields.map((field) => fill(LLM.name, { field, unit })));

/** A policy's window in whole seconds, at least 1 (as the middleware's `RateLimit-Policy` writes it). */
function windowSecs(p: Policy): number {
  return Math.max(1, Number(p.periodNs / 1_000_000_000n));
}

/** The budget a decision of `policy` describes (what a hold, a check or a settle replied). */
export function budgetOf(d: Decision, policy: Policy): Budget {
  return { limit: d.limit, remaining: d.remaining, resetMs: d.resetAfterMs, windowSecs: windowSecs(policy) };
}

/** The budget a `limiter.peek(key, policy)` read: a key that does not exist is a whole budget. */
export function budgetOfInspection(inspection: Inspection, policy: Policy): Budget {
  const b: Budget = { limit: policy.limit, remaining: policy.limit, resetMs: 0, windowSecs: windowSecs(policy) };
  if (inspection.exists) {
    b.remaining = Math.min(inspection.remaining ?? b.limit, b.limit);
    b.resetMs = inspection.resetAfterMs ?? 0;
  }
  return b;
}

/** A reset as these headers write it (OpenAI's, Go's form), from ms (rounded up to whole ms; 0 when not
 * positive): `0s`, `850ms`, `1s`, `1.5s`, `6m0s`, `1h2m3.4s`; seconds with up to three decimals. */
export function llmDuration(ms: number): string {
  const whole = Math.max(0, Math.ceil(ms));
  if (whole === 0) return "0s";
  if (whole < 1000) return `${whole}ms`;
  const h = Math.floor(whole / 3_600_000), m = Math.floor(whole / 60_000) % 60, rest = whole % 60_000;
  const s = rest % 1000 === 0
    ? String(rest / 1000)
    : `${Math.floor(rest / 1000)}.${String(rest % 1000).padStart(3, "0")}`.replace(/0+$/, "");
  if (h > 0) return `${h}h${m}m${s}s`;
  if (m > 0) return `${m}m${s}s`;
  return `${s}s`;
}

/** The headers of the units given (`requests`, `tokens`: null or undefined leaves a unit out), in the
 * contract's order: the three of each unit (limit, remaining, reset), requests first, then
 * `RateLimit-Policy` and `RateLimit` listing each unit's policy, named by its unit. None when neither is given. */
export function llmHeaders(requests?: Budget | null, tokens?: Budget | null): [string, string][] {
  const out: [string, string][] = [];
  const policies: string[] = [], states: string[] = [];
  [requests, tokens].forEach((b, u) => {
    if (!b) return;
    const resetMs = Math.max(0, Math.ceil(b.resetMs));
    const values = [String(b.limit), String(b.remaining), llmDuration(resetMs)];
    NAMES[u]!.forEach((name, f) => out.push([name, values[f]!]));
    const name = LLM.units[u]!;
    policies.push(fill(HTTP.structured.policy, { name, limit: b.limit, window_secs: b.windowSecs }));
    states.push(fill(HTTP.structured.state, { name, remaining: b.remaining, reset_secs: Math.ceil(resetMs / 1000) }));
  });
  if (policies.length > 0) out.push([HTTP.headers.policy, policies.join(", ")], [HTTP.headers.state, states.join(", ")]);
  return out;
}

/** What `res.setHeader` takes: a node:http response, Express's, Fastify's raw reply. */
export interface HeaderSink {
  setHeader(name: string, value: string): unknown;
}

/** Sets `llmHeaders(requests, tokens)` on `res`, each replacing what it held under that name. */
export function setLlmHeaders(res: HeaderSink, requests?: Budget | null, tokens?: Budget | null): void {
  for (const [name, value] of llmHeaders(requests, tokens)) res.setHeader(name, value);
}
