/**
 * What an answer that is not a decision means: the contract's reply classes (`replies`), read from the
 * shipped contract and interpreted here, never re-typed. An error reply is sorted by its code (its first
 * word) and the start of the text after it; a transport failure (no answer in time, refused, reset,
 * closed) by the contract's `transport` table. See docs/errors.md.
 */
import { CONTRACT } from "./contract.js";

export type ClassName = "outage" | "misconfigured" | "conflict" | "usage";
export type Transport = "timeout" | "refused" | "reset" | "closed";

/** One class and what a client does with it. */
export interface ReplyClass {
  name: ClassName;
  /** `failure_policy`: the failure policy decides (degraded); `raise`: the caller gets the error. */
  decision: "failure_policy" | "raise";
  degraded: boolean;
  /** `failure`: counts against Redis; `answered`: Redis answered, a success as a decision is (ends a
   * probe, resets the failures in a row). */
  breaker: "failure" | "answered" | "none";
  log: "outage" | "once_per_cause" | "once_per_key" | "none";
  /** The counter it adds to (`Limiter.counters`): once per call, or for the outage log once per
   * outage (when it starts). */
  counter: string;
}

/** A rule: an error reply whose code is `code` and whose text after it starts with `starts` (any: null). */
export interface Rule {
  code: string;
  starts: string | null;
}

interface Replies {
  classes: ReplyClass[];
  rules: (Rule & { class: ClassName })[];
  transport: Record<Transport, ClassName>;
  otherwise: ClassName;
}

const REPLIES = (CONTRACT as unknown as { replies: Replies }).replies;
const CLASSES = new Map(REPLIES.classes.map((c) => [c.name, c]));

/** The contract's class named `name`. */
export function replyClass(name: ClassName): ReplyClass {
  const c = CLASSES.get(name);
  if (!c) throw new Error(`the contract has no reply class ${name}`);
  return c;
}

/** Every class's counter name, each once (the keys of `Limiter.counters`). */
export const COUNTERS: readonly string[] = [...new Set(REPLIES.classes.map((c) => c.counter))];

/** An error reply's code (its first word): `ERR`, `WRONGTYPE`, `CROSSSLOT`, ... */
export function codeOf(reply: string): string {
  const space = reply.indexOf(" ");
  return space < 0 ? reply : reply.slice(0, space);
}

/** Whether `reply` matches `rule`: its code, and the start of the text after the code and one space,
 * compared ignoring case. */
export function matches(reply: string, rule: Rule): boolean {
  const code = codeOf(reply);
  if (code !== rule.code) return false;
  if (rule.starts === null) return true;
  const text = reply.slice(code.length + 1, code.length + 1 + rule.starts.length);
  return text.toLowerCase() === rule.starts.toLowerCase();
}

/** The class of an error reply (its whole text, code first): the first rule that matches, else the
 * contract's `otherwise`. */
export function classOfReply(reply: string): ReplyClass {
  for (const rule of REPLIES.rules) if (matches(reply, rule)) return replyClass(rule.class);
  return replyClass(REPLIES.otherwise);
}

/** What a reply is "about", for logging it once per cause: the rule it matched (`ERR unknown command`,
 * `NOPERM`), or its code where no rule knows it; not its whole text, which names keys and arguments. */
export function causeOf(reply: string): string {
  const rule = REPLIES.rules.find((r) => matches(reply, r));
  return rule ? (rule.starts === null ? rule.code : `${rule.code} ${rule.starts}`) : codeOf(reply);
}

/** The class of a transport failure. */
export function classOfTransport(t: Transport): ReplyClass {
  return replyClass(REPLIES.transport[t]);
}

/** What kind of transport failure a client's error is, for ioredis and node-redis alike: a refused
 * connection (ECONNREFUSED), a reset one (ECONNRESET, EPIPE, node-redis' "Socket closed unexpectedly"),
 * else a closed client or connection (ioredis' "Connection is closed.", its offline queue or retries
 * given up; node-redis' "The client is closed"). */
export function transportOf(e: unknown): Transport {
  const err = e as { code?: unknown; name?: unknown; message?: unknown; errors?: unknown } | undefined;
  const code = typeof err?.code === "string" ? err.code : "";
  const text = `${String(err?.name ?? "")} ${String(err?.message ?? e)}`;
  if (code === "ECONNREFUSED" || text.includes("ECONNREFUSED")) return "refused";
  if (Array.isArray(err?.errors) && err.errors.some((x) => transportOf(x) === "refused")) return "refused";
  if (code === "ECONNRESET" || code === "EPIPE" || /ECONNRESET|EPIPE|SocketClosedUnexpectedly|Socket closed unexpectedly/.test(text)) return "reset";
  return "closed";
}
