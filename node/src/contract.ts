/**
 * The contract every client reads (`contract.json`, written by the Rust reference and shipped in this
 * package): the kinds, the commands and where their keys are, the bounds, the error texts, the
 * library's functions and its EVALSHA rule, the HTTP names and problem texts, the commands of the calls
 * beside the decisions. Nothing here restates a rule: this module reads the file and interprets its key
 * rules.
 */
import { CONTRACT_TEXT, LIBRARY_SOURCE } from "./assets.js";

export interface ParamError { expected: string; field: string; reply: string }
export interface KindSpec {
  name: string; group: string; command: string; function: string; owner: string;
  request: "cost" | "id" | "lease" | "reserve"; refunds: boolean; peeks: boolean;
  /** How the local fallback decides it: one token bucket at the instance's share, or leases. */
  fallback: "token_bucket" | "leases";
  params: { name: string; type: string; min: number; max: number; unit: string; errors: ParamError[] }[];
}
export type KeyRule =
  | { rule: "at"; index: number }
  | { rule: "every"; step: number }
  | { rule: "groups" }
  /** RL.HOLD: the ledger first, then RL.ALL's groups from argument `groups_from`. */
  | { rule: "ledger_groups"; groups_from: number }
  /** RL.SETTLE: the ledger first, then `key units` pairs from argument `pairs_from`. */
  | { rule: "ledger_pairs"; pairs_from: number }
  | { rule: "none" };
export interface CommandSpec {
  name: string; syntax: string; min_args: number; keys: KeyRule; writes: boolean; function: string | null;
  reply: Record<string, unknown>;
}
/** How batched units behave (docs/high-volume.md): the adaptive size's start, growth and share of what
 * is left, the margin before a window's end past which units are dropped rather than refunded, how
 * often a check gives back other keys' expired units, the most states and pre-check denials kept, the
 * default lease, `ahead` (a local decision leaving fewer than size / ahead units takes the next batch), the kinds that batch and how their window end is found from an answer (`none`: no
 * window; `reset`: now + reset_after; `reset_minus_window`: that minus the window), the refusals. */
export interface BatchingRules {
  start: number; grow: number; share: number; refund_margin_ms: number; sweep_ms: number; max_keys: number;
  precheck_max_keys: number; lease_ms: number; ahead: number; kinds: Record<string, "none" | "reset" | "reset_minus_window">;
  errors: { batch: string; kind: string; lease: string };
}
export type ProblemName = "concurrency_limited" | "cost_exceeds_limit" | "denied" | "misconfigured" | "rate_limited" | "unavailable";
/** Holds (RL.HOLD, RL.SETTLE): the calls' words, the abandon policies and settle modes, the bounds, the
 * default ledger's template (`{{`/`}}` a brace, `{tag}` the first key's hash tag), the error texts. */
export interface HoldRules {
  abandon: string[]; abandon_default: string; modes: string[]; ledger: string;
  max_holds: number; max_id_bytes: number; max_ttl_secs: number; ttl_default_secs: number; held_kinds: string[];
  calls: { hold: string[]; settle: string[] };
  errors: ParamError[];
}
export type CallName = "take" | "reserve_upto" | "refund" | "inspect" | "inspect_peek" | "release" | "renew";
export interface Contract {
  version: number;
  batching: BatchingRules;
  bounds: Record<string, number>;
  kinds: KindSpec[];
  commands: CommandSpec[];
  request_forms: Record<string, { args: string[]; option: { word: string; values: number } | null }>;
  errors: {
    format: string; too_large: string; out_of_range: string; syntax: string; state: string;
    duplicate_key: string; wrong_type: string;
    render: { lease_weight: string; log_cost: string; empty_key: string; cross_slot: string };
    requests: ParamError[];
  };
  library: {
    name: string; source: string; source_sha1: string; version: string;
    functions: { name: string; command: string | null; read_only: boolean; evalsha_sha1: string }[];
    evalsha: { scripts: string; how: string };
  };
  http: {
    headers: Record<"content_type" | "degraded" | "limit" | "policy" | "remaining" | "reset" | "retry_after" | "state", string>;
    problem_types: Record<ProblemName, string>;
    degraded_value: string;
    caller: {
      escapes: Record<string, string>; forms: string[]; ipv6_prefix_default: number; key: string; max_part_bytes: number;
      /** What follows the kind in a caller's key part: the id as it is, escaped, or hashed. */
      markers: Record<"plain" | "escaped" | "hashed", string>;
    };
    /** An HTTP layer's or adapter's key of a limit: `{tag}:{name}:{owner}`. */
    limit_key: string;
    forwarded: { max_hops: number; max_node_bytes: number };
    structured: { name_drops: string[]; policy: string; state: string };
    /** Each problem body's title and detail (its `{placeholders}` filled by `fill`), by its type's name. */
    problems: Record<ProblemName, { title: string; detail: string }>;
    /** What a detail's `{what}` calls a limit. */
    problem_what: Record<"rate" | "concurrency", string>;
    /** The LLM headers (OpenAI's): `name` a template of `{field}` (each of `fields`) and `{unit}` (each
     * of `units`, requests then tokens); `duration` how their reset is written; `then` what follows them. */
    llm: { name: string; fields: string[]; units: string[]; duration: string; then: string };
  };
  /** The commands a client sends beside its decisions, as words with `{placeholders}` (`call`). */
  calls: Record<CallName, string[]>;
  holds: HoldRules;
  /** The in-process limiter's bound: past `max_keys`, expired state goes first, then everything. */
  fallback: { max_keys: number };
}

export const CONTRACT: Contract = JSON.parse(CONTRACT_TEXT) as Contract;
/** The library's one source, as FUNCTION LOAD takes it (the package's copy of lua/ratelimit.lua). */
export const LIBRARY: string = LIBRARY_SOURCE;

/** The largest whole number (u64), exactly: JSON numbers beyond 2^53 lose digits in JSON.parse. */
export const MAX_WHOLE: bigint = BigInt(/"max_whole":\s*(\d+)/.exec(CONTRACT_TEXT)![1]!);
export const BOUNDS = CONTRACT.bounds;
export const ERRORS = CONTRACT.errors;
export const HTTP = CONTRACT.http;
export const BATCHING = CONTRACT.batching;
export const HOLDS = CONTRACT.holds;

/** `template` with each `{placeholder}` that `values` names replaced, in one pass (a value is never read
 * as a template: a limit may be named `{cost}`). */
export function fill(template: string, values: Readonly<Record<string, string | number>>): string {
  return template.replace(/\{(\w+)\}/g, (whole, name: string) => (Object.hasOwn(values, name) ? String(values[name]) : whole));
}

/** The command of the contract's call `name`, each `{placeholder}` word replaced by its value. */
export function call(name: CallName, values: Readonly<Record<string, string>>): string[] {
  return CONTRACT.calls[name].map((word) => {
    if (!word.startsWith("{")) return word;
    const value = values[word.slice(1, -1)];
    if (value === undefined) throw new Error(`no value for ${word} in the call ${name}`);
    return value;
  });
}

/** A word of the contract's list `list` (a hold's abandon policy or settle mode), as the contract has it. */
function holdWord(list: readonly string[], word: string): string {
  const found = list.find((w) => w.toUpperCase() === word.toUpperCase());
  if (found === undefined) throw new Error(`the contract's holds have no ${word}`);
  return found;
}

/** A settle's modes: `final` (the actual, once) and `partial` (the usage so far). */
export const SETTLE_MODE = { final: holdWord(HOLDS.modes, "FINAL"), partial: holdWord(HOLDS.modes, "PARTIAL") } as const;

/** A hold's abandon policies: `charge` (the default: a hold left unsettled stays charged) and `return`
 * (its unused units go back). */
export const ABANDON = { charge: holdWord(HOLDS.abandon, "CHARGE"), return: holdWord(HOLDS.abandon, "RETURN") } as const;

/** How long a hold lives unsettled unless given another ttl, ms (the contract's `ttl_default_secs`). */
export const HOLD_TTL_DEFAULT_MS: number = HOLDS.ttl_default_secs * 1000;

/** The abandon policy named `word` (any case) as the contract spells it; undefined: none of its. */
export function abandonWord(word: string): string | undefined {
  return HOLDS.abandon.find((w) => w.toUpperCase() === word.toUpperCase());
}

/** The kinds whose units a hold holds (and a settle settles). */
export const HELD_KINDS: ReadonlySet<string> = new Set(HOLDS.held_kinds);

/** `RL.HOLD ledger id ttl abandon` or `RL.SETTLE ledger id mode`: the contract's words, placeholders
 * filled (the groups or pairs follow). */
export function holdCall(name: "hold" | "settle", values: Readonly<Record<string, string>>): string[] {
  return HOLDS.calls[name].map((word) => {
    if (!word.startsWith("{")) return word;
    const value = values[word.slice(1, -1)];
    if (value === undefined) throw new Error(`no value for ${word} in the hold call ${name}`);
    return value;
  });
}

/** The default ledger of a hold whose first key is `key`: the contract's template (`{{` and `}}` are
 * braces) with `{tag}` the key's hash tag (between its first `{` and the next `}`, when not empty),
 * else the whole key, so the ledger shares the limits' slot. */
export function ledgerOf(key: string): string {
  const open = key.indexOf("{");
  const close = open < 0 ? -1 : key.indexOf("}", open + 1);
  const tag = close > open + 1 ? key.slice(open + 1, close) : key;
  return HOLDS.ledger.replace(/\{\{|\}\}|\{(\w+)\}/g, (whole, name: string | undefined) => {
    if (name === undefined) return whole[0]!;
    if (name !== "tag") throw new Error(`the ledger template names {${name}}`);
    return tag;
  });
}

const KINDS = new Map(CONTRACT.kinds.map((k) => [k.name, k]));
const BY_GROUP = new Map(CONTRACT.kinds.map((k) => [k.group, k]));
const COMMANDS = new Map(CONTRACT.commands.map((c) => [c.name, c]));

/** The command deciding limits of any kinds in one call (RL.ALL): the one whose keys are its groups'. */
export const ALL_COMMAND: string = (() => {
  const all = CONTRACT.commands.find((c) => c.keys.rule === "groups");
  if (!all) throw new Error("the contract has no command with groups");
  return all.name;
})();

/** Each module command the library implements, and its function (RL.TOKEN: rl_token). */
export const LIBRARY_FUNCTIONS: ReadonlyMap<string, string> = new Map(
  CONTRACT.commands.filter((c) => c.function).map((c) => [c.name, c.function as string]),
);

/** The option word of a request form that has one (`lease`: WEIGHT; `id`: DEDUP). */
export function requestOption(form: string): string {
  const option = CONTRACT.request_forms[form]?.option;
  if (!option) throw new Error(`the contract's request form ${form} has no option`);
  return option.word;
}

export function kind(name: string): KindSpec {
  const k = KINDS.get(name);
  if (!k) throw new Error(`the contract has no kind ${name}`);
  return k;
}

export function command(name: string): CommandSpec | undefined {
  return COMMANDS.get(name) ?? COMMANDS.get(name.toUpperCase());
}

/** What a kind's parameter must be: its `index`-th error text, in the order core checks them. */
export function paramError(kindName: string, param: string, index = 0): string {
  const p = kind(kindName).params.find((x) => x.name === param);
  const e = p?.errors[index];
  if (!e) throw new Error(`the contract has no error ${index} for ${kindName}.${param}`);
  return e.expected;
}

/** What a request's field (cost, id, weight, max_wait, max) must be. */
export function requestError(field: string): string {
  const e = ERRORS.requests.find((x) => x.field === field);
  if (!e) throw new Error(`the contract has no request field ${field}`);
  return e.expected;
}

/** The key of the limit `name` of a caller (`tag`: `rl:{user:42}`; `prefix:` where an adapter has no
 * caller tag) for a policy of the kind `kindName`: the contract's `http.limit_key`, ending with the
 * kind's owner, so a change of a limit's kind starts afresh on new keys while a change of its numbers
 * carries on. */
export function limitKey(tag: string, name: string, kindName: string): string {
  const parts: Record<string, string> = { tag, name, owner: kind(kindName).owner };
  // One pass, each placeholder replaced by its text as it is (`$&` in a name is not a pattern).
  return HTTP.limit_key.replace(/\{(tag|name|owner)\}/g, (_, p: string) => parts[p]!);
}

/** Where a command's first key is among its arguments after its name (what routes it); undefined: none. */
export function firstKey(name: string): number | undefined {
  const rule = command(name)?.keys;
  if (!rule) return undefined;
  if (rule.rule === "at") return rule.index;
  if (rule.rule === "every" || rule.rule === "groups" || rule.rule === "ledger_groups" || rule.rule === "ledger_pairs") return 0;
  return undefined;
}

function requestLen(form: string, rest: readonly string[]): number {
  const spec = CONTRACT.request_forms[form]!;
  const option = spec.option;
  if (option && rest.length > 1 && rest[1]!.toUpperCase() === option.word) return 2 + option.values;
  return spec.args.length;
}

/** How many arguments an RL.ALL group of `group` takes after its key and kind name; undefined: no kind. */
export function groupLen(group: string, rest: readonly string[]): number | undefined {
  const k = BY_GROUP.get(group.toUpperCase());
  if (!k) return undefined;
  return 2 + requestLen(k.request, rest.slice(2));
}

/** Where a command's keys are among its arguments (after its name), by the contract's rule. */
export function keyPositions(name: string, args: readonly string[]): number[] {
  const spec = command(name);
  if (!spec) return [];
  const rule = spec.keys;
  if (rule.rule === "at") return rule.index < args.length ? [rule.index] : [];
  if (rule.rule === "every") {
    const out: number[] = [];
    for (let i = 0; i < args.length; i += rule.step) out.push(i);
    return out;
  }
  if (rule.rule === "groups") return groupKeys(args, 0);
  if (rule.rule === "ledger_groups") return args.length ? [0, ...groupKeys(args, rule.groups_from)] : [];
  if (rule.rule === "ledger_pairs") {
    const keys = args.length ? [0] : [];
    for (let i = rule.pairs_from; i < args.length; i += 2) keys.push(i);
    return keys;
  }
  return [];
}

/** Where RL.ALL's groups' keys are among `args`, the first group at `from`. */
function groupKeys(args: readonly string[], from: number): number[] {
  const keys: number[] = [];
  let at = from;
  while (at + 1 < args.length) {
    keys.push(at);
    const n = groupLen(args[at + 1]!, args.slice(at + 2));
    if (n === undefined) break;
    at += 2 + n;
  }
  return keys;
}
