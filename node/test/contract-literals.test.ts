// No contract literal is re-typed in the package: the header names (the LLM headers' too), the problem types, the problem bodies'
// titles and details, the error texts the contract holds, the caller key's markers, every command's name
// (the kinds' commands and the `commands` table's, RL.ALL too), the calls' and request forms' words and
// the bounds' digits are read from the contract (src/contract.ts), never written out in another module. A
// string or template literal (not a comment) anywhere else in src/ that holds one (or is one, for a short
// word such as UPTO or WEIGHT), or a number that is one of the bounds, fails this test, naming the file
// and line.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join, relative } from "node:path";
import ts from "typescript";
import { ROOT } from "./servers.ts";
import type { Any } from "./vectors.ts";

const NODE = join(ROOT, "node");
const SRC = join(NODE, "src");
/** The modules that read the contract (and so may name its members). Generated ones (`GENERATED` in
 * their first line, as src/assets.ts) are skipped too. */
const READERS = new Set(["contract.ts"]);

const CONTRACT: Any = JSON.parse(readFileSync(join(NODE, "contract.json"), "utf8"));

/** Every contract value a module could re-type: long enough to mean something on its own. */
function literals(): string[] {
  const http = CONTRACT.http;
  const found: string[] = Object.entries(http.headers as Record<string, string>).filter(([k]) => k !== "state").map(([, v]) => v);
  found.push(...Object.values(http.problem_types as Record<string, string>));
  // A contract from before http.caller.markers: the markers are what its forms write between
  // "{kind}" and the id ("{kind}.esc:{escaped id}").
  const markers: string[] = http.caller.markers
    ? Object.values(http.caller.markers as Record<string, string>)
    : (http.caller.forms as string[]).filter((f) => f.startsWith("{kind}")).map((f) => f.slice("{kind}".length).split("{")[0]!);
  found.push(...markers.filter((m) => m.length > 1));
  const errors = CONTRACT.errors;
  found.push(...Object.values(errors.render as Record<string, string>));
  found.push(...["duplicate_key", "syntax", "state", "wrong_type"].map((k) => errors[k] as string));
  for (const kind of CONTRACT.kinds) for (const p of kind.params) for (const e of p.errors) found.push(e.reply as string);
  found.push(...Object.values(CONTRACT.batching.errors as Record<string, string>));
  // A problem detail's fixed parts, between its placeholders and clauses ("' could not be checked").
  for (const p of Object.values((http.problems ?? {}) as Record<string, { detail: string }>)) {
    found.push(...p.detail.split(/\{\w+\}|[:;]/).map((part) => part.trim()).filter((part) => part.length >= 10));
  }
  // Holds: their error texts and the default ledger's fixed part (`rl:holds:`).
  const holds = CONTRACT.holds;
  if (holds) {
    found.push(...(holds.errors as { reply: string }[]).map((e) => e.reply));
    found.push(...(holds.ledger as string).split(/\{+\w*\}+/).filter((part) => part.length >= 5));
  }
  // The LLM headers (http.llm): every name its template makes and the template's fixed parts
  // (`x-ratelimit-`). Its fields (limit, remaining, reset) are not looked for: they are the structured
  // fields' placeholders too; its units are whole words (wholeWords).
  const llm = http.llm as { name: string; fields: string[]; units: string[] } | undefined;
  if (llm) {
    found.push(...llm.name.split(/\{\w+\}/).filter((part) => part.length >= 5));
    for (const unit of llm.units) for (const field of llm.fields) found.push(llm.name.replace("{field}", field).replace("{unit}", unit));
  }
  found.push(...callWords().filter((w) => w.length >= 5));
  found.push(...commandNames().filter((w) => w.length >= 5));
  return [...new Set(found.filter((f) => f.length >= 5))].sort();
}

/** The calls' fixed words: command names and option words (`UPTO`), the holds' calls' too. */
function callWords(): string[] {
  const calls = [...Object.values((CONTRACT.calls ?? {}) as Record<string, string[]>), ...Object.values((CONTRACT.holds?.calls ?? {}) as Record<string, string[]>)];
  return calls.flat().filter((w) => !w.startsWith("{"));
}

/** Every command the contract names: each kind's (RL.TOKEN) and the commands table's (RL.ALL, RL.TOP, the
 * dialects). */
function commandNames(): string[] {
  const kinds = (CONTRACT.kinds as { command: string }[]).map((k) => k.command);
  return [...new Set([...kinds, ...(CONTRACT.commands as { name: string }[]).map((c) => c.name)])].sort();
}

/** Contract values too short or too common to look for inside a text, so a literal that is one of them,
 * whole, is re-typed: a call's option word (`UPTO`), a request form's (`WEIGHT`), a short command name
 * (`GCRA`), a problem's title, what a detail calls a limit. */
function wholeWords(): string[] {
  const http = CONTRACT.http;
  const found = [...callWords(), ...commandNames()].filter((w) => w.length < 5);
  // A request form's option word (WEIGHT, DEDUP).
  for (const form of Object.values(CONTRACT.request_forms as Record<string, { option: { word: string } | null }>)) {
    if (form.option) found.push(form.option.word);
  }
  // A hold's abandon policies (CHARGE, RETURN) and settle modes (FINAL, PARTIAL).
  if (CONTRACT.holds) found.push(...(CONTRACT.holds.abandon as string[]), ...(CONTRACT.holds.modes as string[]));
  found.push(...Object.values((http.problems ?? {}) as Record<string, { title: string }>).map((p) => p.title));
  found.push(...Object.values((http.problem_what ?? {}) as Record<string, string>));
  // The LLM headers' units (requests, tokens): a policy's name in RateLimit-Policy.
  found.push(...((http.llm?.units ?? []) as string[]));
  return [...new Set(found)].sort();
}

/** The bounds a module could re-type as a number (those no unit conversion shares; a hold's longest ttl,
 * and its default ttl in seconds and in ms). A contract from before fallback.max_keys lacks that one. */
function bounds(): bigint[] {
  // (A hold's other bounds, 256 id bytes and 10000 holds, are numbers the slot table and the conflict
  // log's bound share.)
  const ttl = CONTRACT.holds?.ttl_default_secs as number | undefined;
  const values = [CONTRACT.bounds.max_horizon_secs, CONTRACT.fallback?.max_keys, CONTRACT.bounds.max_lease_limit, CONTRACT.holds?.max_ttl_secs,
    ttl, ttl === undefined ? undefined : ttl * 1000];
  return [...new Set(values.filter((v): v is number => typeof v === "number"))].map(BigInt);
}

/** A literal's value as a number, or null: `100_000`, `0x186a0`, `100_000n`. */
function numberOf(text: string): bigint | null {
  const digits = text.replace(/_/g, "").replace(/n$/, "");
  try {
    return BigInt(digits);
  } catch {
    return null; // a fraction or an exponent: no bound is written that way
  }
}

/** The re-typed literals of a module's source, as `file:line: ...`. Comments and JSDoc are no nodes: prose
 * may name the contract's values. */
function retyped(file: string, text: string, words: string[], numbers: bigint[], whole: string[] = wholeWords()): string[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const where = (node: ts.Node) => `${file}:${source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1}`;
  const visit = (node: ts.Node): void => {
    if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node) || ts.isTemplateHead(node)
      || ts.isTemplateMiddle(node) || ts.isTemplateTail(node)) {
      const lower = node.text.toLowerCase();
      for (const w of words) {
        if (lower.includes(w.toLowerCase())) found.push(`${where(node)}: ${node.getText(source).slice(0, 80)} holds ${JSON.stringify(w)}`);
      }
      if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) {
        if (whole.some((w) => lower === w.toLowerCase())) found.push(`${where(node)}: ${node.getText(source)} is a contract word`);
      }
    } else if (ts.isNumericLiteral(node) || ts.isBigIntLiteral(node)) {
      const value = numberOf(node.getText(source));
      if (value !== null && numbers.includes(value)) found.push(`${where(node)}: the bound ${node.getText(source)}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** The package's source: every .ts file under src/ but the readers' and generated ones. */
function sources(dir = SRC): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) found.push(...sources(path));
    else if (entry.name.endsWith(".ts") && !(dir === SRC && READERS.has(entry.name))
      && !readFileSync(path, "utf8").split("\n", 1)[0]!.includes("GENERATED")) found.push(path);
  }
  return found.sort();
}

test("no contract literal is re-typed outside src/contract.ts", () => {
  const words = literals();
  const numbers = bounds();
  assert.ok(words.length >= 20 && numbers.length >= 2, `the contract gave ${words.length} literals and ${numbers.length} bounds`);
  const files = sources();
  assert.ok(files.length >= 10, `only ${files.length} source files found`);
  const found = files.flatMap((path) => retyped(relative(SRC, path), readFileSync(path, "utf8"), words, numbers));
  assert.deepEqual(found, [], "read these from the contract (src/contract.ts):\n" + found.join("\n"));
});

test("the guard sees a re-typed literal, and not prose", () => {
  const bad = [
    "/** Writes ratelimit-remaining in prose, and 100_000. */",
    'export const NAME = "RateLimit-Remaining";',
    "export const MAX = 100_000;",
    "// x-ratelimit-degraded in a comment",
    "export const part = (kind: string, id: string) => `${kind}.sha256:${id}`;",
    "export const BIG = 3_000_000_000n;",
    'export const cmd = ["RL.TAKE", "k", "UPTO"];',
    'export const title = "Too Many Requests";',
    "export const detail = (name: string, s: number) => `rate limit '${name}' exceeded: retry in ${s} s`;",
    'export const all = ["RL.ALL", "k"];',
    'export const peek = ["rl.token", "k", "1", "1", "0"];',
    'export const dialect = "GCRA";',
    'export const lease = ["h", "WEIGHT", "2"];',
    'export const settle = ["RL.SETTLE", "l", "id", "PARTIAL"];',
    "export const ledger = (tag: string) => `rl:holds:{${tag}}`;",
    'export const abandon = "return";',
    'export const error = "ERR invalid id: must be 1 to 256 bytes";',
    'export const llm = "X-RateLimit-Remaining-Tokens";',
    'export const unit = "tokens";',
    "export const llmName = (f: string, u: string) => `x-ratelimit-${f}-${u}`;",
    "export const DEFAULT_TTL_MS = 300_000;",
  ].join("\n");
  const found = retyped("bad.ts", bad, literals(), bounds());
  assert.deepEqual(found.map((f) => f.split(": ")[0]),
    ["bad.ts:2", "bad.ts:3", "bad.ts:5", "bad.ts:6", "bad.ts:7", "bad.ts:7", "bad.ts:8", "bad.ts:9", "bad.ts:9", "bad.ts:10", "bad.ts:11",
      "bad.ts:12", "bad.ts:13", "bad.ts:14", "bad.ts:14", "bad.ts:15", "bad.ts:16", "bad.ts:17", "bad.ts:18", "bad.ts:18", "bad.ts:18", "bad.ts:19",
      "bad.ts:20", "bad.ts:21"], found.join("\n"));
});
