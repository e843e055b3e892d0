/** The package's errors: a policy that cannot be built, a call that cannot be built, and why Redis
 * gave no decision (a `CallError` per cause). */

/** A policy refused when built, in the module's words: `token_bucket: invalid capacity: must be a whole number >= 1`. */
export class PolicyError extends Error {
  override name = "PolicyError";
  constructor(readonly kind: string, readonly field: string, readonly reason: string) {
    super(`${kind}: invalid ${field}: ${reason}`);
  }
}

/** A call that cannot be built whatever Redis says (a programming error): thrown, never degraded. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** Why Redis gave no decision; `check` turns it into the failure policy's degraded decision. */
export class CallError extends Error {
  override name = "CallError";
}

/** No answer within the deadline. */
export class DeadlineError extends CallError {
  override name = "DeadlineError";
  constructor(readonly deadlineMs: number) {
    super(`no answer from Redis within the deadline (${deadlineMs} ms)`);
  }
}

/** The connection failed: refused, reset, closed, the client's own queue gave up. */
export class UnreachableError extends CallError {
  override name = "UnreachableError";
}

/** The circuit breaker is open: Redis is not called until its cool-down ends. */
export class BreakerOpenError extends CallError {
  override name = "BreakerOpenError";
  constructor() {
    super("the circuit breaker is open: Redis is not called until the cool-down ends");
  }
}

/** Redis answered with an error reply (`ERR ...`, `WRONGTYPE ...`). */
export class ServerError extends CallError {
  override name = "ServerError";
}

/** Redis answered that the limiter cannot work with it as configured: no engine's command is known
 * (module not loaded, FCALL/EVALSHA unknown) or this user may not run it (NOPERM). */
export class ConfigurationError extends ServerError {
  override name = "ConfigurationError";
}

/** A reply that is not what the command answers. */
export class ReplyError extends CallError {
  override name = "ReplyError";
}

/** An error reply saying this engine cannot work for this user here: unknown command, NOPERM. */
export function refuses(message: string): boolean {
  return message.includes("unknown command") || message.includes("NOPERM");
}

/** NOSCRIPT or "Function not found": the library or the script is not on this node; it never ran. */
export function missing(message: string): boolean {
  return message.includes("NOSCRIPT") || message.toLowerCase().includes("function not found");
}
