/**
 * The engine machine: how a call finds its engine (the module, the library through FCALL, or through
 * EVALSHA scripts) from the answers it gets. The contract's `engines` table (states, the answers that
 * steer, transitions), interpreted here as it is: nothing of it is re-typed. See docs/errors.md.
 */
import { CONTRACT } from "./contract.js";
import { classOfReply, matches, type Rule } from "./replyClass.js";

/** What a limiter asked for. */
export type Wanted = "auto" | "module" | "fcall" | "evalsha";
/** A command the machine sends. */
export type Sent = "module" | "fcall" | "function_load" | "evalsha" | "eval";
/** An answer: one of the contract's steering answers (`unknown_command`, `noperm`, `function_missing`,
 * `noscript`), `ok` (not an error), `outage` (the reply classes' outage, or no reply), `error`. */
export type Answer = string;
/** What follows a step: another command, or the call's end. */
export type Then = { send: Sent } | { done: "decided" | "outage" | "misconfigured" | "error" };

interface Transition {
  sent: Sent[];
  answers: Answer[];
  wanted: Wanted[];
  next: string;
  then: string;
}
interface Engines {
  states: { name: string; sends: Sent; reports: string }[];
  start: Record<Wanted, string>;
  answers: (Rule & { answer: Answer })[];
  max_sends: number;
  transitions: Transition[];
}

const ENGINES = (CONTRACT as unknown as { engines: Engines }).engines;
const STATES = new Map(ENGINES.states.map((s) => [s.name, s]));
export const MAX_SENDS = ENGINES.max_sends;

/** The state a limiter asking for `wanted` starts in (and goes back to after an outage). */
export function start(wanted: Wanted): string {
  return ENGINES.start[wanted];
}

/** The command a state sends first. */
export function sends(state: string): Sent {
  return STATES.get(state)!.sends;
}

/** What `engine` says in a state: `not yet known`, `the ratelimit module`, ... */
export function reports(state: string): string {
  return STATES.get(state)!.reports;
}

/** The answer an error reply is (its whole text, code first). */
export function answerOf(reply: string): Answer {
  if (classOfReply(reply).name === "outage") return "outage";
  for (const a of ENGINES.answers) if (matches(reply, a)) return a.answer;
  return "error";
}

function thenOf(text: string): Then {
  const [verb, what] = text.split(":") as [string, string];
  return verb === "send" ? { send: what as Sent } : { done: what as "decided" };
}

const STEPS = new Map<string, readonly [string, Then]>();

/** One step: in `state`, `sent` got `answer` (the call's `sendsSoFar`-th command): the next state and
 * what follows. The first transition whose `sent`, `answers` and `wanted` hold them decides; a call
 * that would send more than `max_sends` commands ends as misconfigured. */
export function step(wanted: Wanted, state: string, sent: Sent, answer: Answer, sendsSoFar: number): readonly [string, Then] {
  const id = `${wanted} ${state} ${sent} ${answer}`;
  let found = STEPS.get(id);
  if (!found) {
    const t = ENGINES.transitions.find((x) => x.sent.includes(sent) && x.answers.includes(answer) && x.wanted.includes(wanted));
    if (!t) throw new Error(`the contract's engine machine has no transition for ${id}`);
    const next = t.next === "same" ? state : t.next === "start" ? start(wanted) : t.next;
    found = [next, thenOf(t.then)] as const;
    STEPS.set(id, found);
  }
  if ("send" in found[1] && sendsSoFar >= MAX_SENDS) return [found[0], { done: "misconfigured" }];
  return found;
}
