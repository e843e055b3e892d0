/** What the middleware tells the caller: `RateLimit-*` headers on every limited response, and for a
 * denial a 429 with `Retry-After` and an RFC 9457 problem body (403 for the deny list). Byte for byte
 * the Rust layer's answers (`client/src/http/response.rs`): compact JSON with sorted keys. Every name
 * and problem type is the contract's. */
import { HTTP, fill, type ProblemName } from "../contract.js";
import type { Decision } from "../decision.js";

const H = HTTP.headers;
const T = HTTP.problem_types;

/** The limit a decision describes, for headers and problem bodies. */
export interface Described {
  name: string;
  windowSecs: number;
  cost: number;
  /** A rate policy (a concurrency limit has no RateLimit-* fields). */
  rate: boolean;
  /** The policy's limit as `RateLimit-Limit` writes it, when known beforehand. */
  limitText?: string;
}

export interface Answer {
  status: number;
  headers: [string, string][];
  body: string;
}

/** JSON as serde_json writes a `json!` object: keys sorted, no spaces, UTF-8 as it is. */
export function problemBody(body: Record<string, unknown>): string {
  const sorted: Record<string, unknown> = {};
  for (const k of Object.keys(body).sort()) sorted[k] = body[k];
  return JSON.stringify(sorted);
}

function put(headers: [string, string][], name: string, value: string): void {
  for (let i = headers.length - 1; i >= 0; i--) if (headers[i]![0].toLowerCase() === name) headers.splice(i, 1);
  headers.push([name, value]);
}

const isHeaderText = (s: string): boolean => /^[\t\x20-\x7e]*$/.test(s);

function structuredName(name: string): string {
  let out = name;
  for (const drop of HTTP.structured.name_drops) out = out.split(drop).join("");
  return out;
}

/** Adds the rate limit headers of `d`. A degraded decision's remaining and reset are unknown: left out. */
export function addHeaders(headers: [string, string][], d: Decision, limit: Described, structured: boolean): void {
  if (!limit.rate) {
    if (d.degraded) put(headers, H.degraded, HTTP.degraded_value);
    return;
  }
  put(headers, H.limit, String(d.limit));
  if (!d.degraded) {
    put(headers, H.remaining, String(d.remaining));
    put(headers, H.reset, String(d.resetAfterSecs()));
  }
  if (structured) {
    const name = structuredName(limit.name);
    if (isHeaderText(name)) {
      put(headers, H.policy, HTTP.structured.policy.replace("{name}", name).replace("{limit}", String(d.limit)).replace("{window_secs}", String(limit.windowSecs)));
      if (!d.degraded) {
        put(headers, H.state, HTTP.structured.state.replace("{name}", name).replace("{remaining}", String(d.remaining)).replace("{reset_secs}", String(d.resetAfterSecs())));
      }
    }
  }
  if (d.degraded) put(headers, H.degraded, HTTP.degraded_value);
}

/** `body` with the problem's type, title and detail (the contract's texts, the detail's placeholders filled). */
function described(body: Record<string, unknown>, name: ProblemName, values: Record<string, string | number> = {}): Record<string, unknown> {
  const texts = HTTP.problems[name];
  return Object.assign(body, { type: T[name], title: texts.title, detail: fill(texts.detail, values) });
}

function problem(status: number, body: Record<string, unknown>, headers: [string, string][] = []): Answer {
  headers.unshift(["content-type", H.content_type]);
  return { status, headers, body: problemBody(body) };
}

/** The 429 of a rate limit: `Retry-After` when it can ever be allowed; its own type when it never can. */
export function denied(d: Decision, limit: Described, structured: boolean): Answer {
  const body: Record<string, unknown> = { status: 429, limit: limit.name, quota: d.limit };
  if (!d.degraded) body["remaining"] = d.remaining;
  const headers: [string, string][] = [];
  const secs = d.retryAfterSecs();
  if (secs !== null) {
    described(body, "rate_limited", { name: limit.name, retry_after_secs: secs });
    body["retry_after_seconds"] = secs;
    headers.push([H.retry_after, String(secs)]);
  } else {
    described(body, "cost_exceeds_limit", { name: limit.name, cost: limit.cost, limit: d.limit });
    body["cost"] = limit.cost;
  }
  const answer = problem(429, body, headers);
  addHeaders(answer.headers, d, limit, structured);
  return answer;
}

/** A caller on the deny list: 403, nothing to wait for. */
export function forbidden(): Answer {
  return problem(403, described({ status: 403 }, "denied"));
}

/** Redis could not decide and the failure policy is closed. */
export function unavailable(d: Decision, limit: Described, structured: boolean, status: number, misconfigured: boolean): Answer {
  const secs = d.retryAfterSecs() ?? 1;
  const what = HTTP.problem_what[limit.rate ? "rate" : "concurrency"];
  const body = { status, limit: limit.name, retry_after_seconds: secs };
  const answer = problem(status, described(body, misconfigured ? "misconfigured" : "unavailable", { what, name: limit.name, retry_after_secs: secs }),
    [[H.retry_after, String(secs)]]);
  addHeaders(answer.headers, d, limit, structured);
  return answer;
}

/** The 429 of a concurrency limit: so many requests in flight already. No RateLimit-* fields. */
export function concurrencyLimited(d: Decision, limit: Described): Answer {
  const secs = d.retryAfterSecs() ?? 1;
  const headers: [string, string][] = [[H.retry_after, String(secs)]];
  if (d.degraded) headers.push([H.degraded, HTTP.degraded_value]);
  const body = { status: 429, limit: limit.name, in_flight_limit: d.limit, retry_after_seconds: secs };
  return problem(429, described(body, "concurrency_limited", { name: limit.name, limit: d.limit, retry_after_secs: secs }), headers);
}
