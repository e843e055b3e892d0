/** The package's errors: a policy that cannot be built, a call that cannot be built, and why Redis
 * gave no decision (a `CallError` per cause). */

/** A policy refused when built, in the module's words: `token_bucket: invalid capacity: must be a whole number >= 1`. */
export class PolicyError extends Error {
  override name = "PolicyError";
  constructor(readonly kind: string, readonly field: string, readonly reason: string) {
    super(`${kind}: invalid ${field}: ${reason}`);
  }
}

/** The caller's own mistake (the contract's `usage` class): a call refused before sending (a missing
 * or empty key, the same key twice, a cost out of bounds, keys in different hash slots on a cluster)
 * or an answer saying the call is wrong (`CROSSSLOT`, `ERR invalid ...`, `ERR syntax error`). Thrown or
 * rejected, never a degraded decision, never counted by the breaker. `code` is the reply's code
 * (`ERR`, `CROSSSLOT`); `message` the reply as Redis writes it, code first, where there is one. */
export class UsageError extends Error {
  override name = "UsageError";
  constructor(message: string, readonly code = "ERR") {
    super(message);
  }
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

/** Redis answered that the limiter cannot work with it as configured (the contract's `misconfigured`
 * class): no engine's command is known (module not loaded, FCALL/EVALSHA unknown), this user may not
 * run it (NOPERM, NOAUTH), or an error reply no rule knows. */
export class ConfigurationError extends ServerError {
  override name = "ConfigurationError";
}

/** Redis answered that the key holds another limiter's state or another type (the contract's
 * `conflict` class): a limit whose kind changed on a key named by hand, or a key another program
 * writes. `keys`: the call's keys. */
export class ConflictError extends ServerError {
  override name = "ConflictError";
  constructor(message: string, readonly keys: readonly string[]) {
    super(message);
  }
}

/** A reply that is not what the command answers. */
export class ReplyError extends CallError {
  override name = "ReplyError";
}
