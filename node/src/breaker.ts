/** A circuit breaker, as `client/src/breaker.rs`: after `failures` failed calls in a row Redis is not
 * called for `cooldownMs`, so an outage costs no request a deadline; then one call (only one) probes,
 * and its outcome closes the breaker or opens it for another cool-down. Only an outage is a failure:
 * any answer from Redis (a decision, a misconfiguration, a conflict, a usage error; the contract's
 * class says `answered`) is a success. */
export interface BreakerOptions {
  /** Failed calls in a row that open it (default 5). */
  failures?: number;
  /** How long it stays open before one call probes, ms (default 1000). */
  cooldownMs?: number;
  /** A clock in ms (tests). */
  now?: () => number;
}

type State = "closed" | "open" | "probing";

export class Breaker {
  readonly failures: number;
  readonly cooldownMs: number;
  private readonly now: () => number;
  private state: State = "closed";
  private inARow = 0;
  private until = 0;
  /** How many times it opened. */
  opened = 0;
  /** Calls turned away while open. */
  rejected = 0;

  constructor(opts: BreakerOptions = {}) {
    this.failures = opts.failures ?? 5;
    this.cooldownMs = opts.cooldownMs ?? 1000;
    this.now = opts.now ?? (() => performance.now());
    if (!(this.failures >= 1)) throw new RangeError("breaker: failures must be at least 1");
    if (!(this.cooldownMs >= 0)) throw new RangeError("breaker: cooldownMs must be >= 0");
  }

  /** True when a call may go to Redis: closed, or the one probe after a cool-down. A probe that never
   * reports is given up after one more cool-down. */
  allow(): boolean {
    if (this.state === "closed") return true;
    const now = this.now();
    if (now >= this.until) {
      this.state = "probing";
      this.until = now + Math.max(this.cooldownMs, 1000);
      return true;
    }
    this.rejected++;
    return false;
  }

  /** Redis answered: closed. Returns true when this ended an open or probing state. */
  success(): boolean {
    const was = this.state;
    this.state = "closed";
    this.inARow = 0;
    return was !== "closed";
  }

  /** No answer: counts towards opening; a failed probe opens it again at once. Returns true when it opened now. */
  failure(): boolean {
    if (this.state === "closed") {
      this.inARow++;
      if (this.inARow < this.failures) return false;
    }
    return this.open();
  }

  private open(): boolean {
    const opening = this.state === "closed";
    if (opening) this.opened++;
    this.state = "open";
    this.until = this.now() + this.cooldownMs;
    this.inARow = 0;
    return opening;
  }

  get isOpen(): boolean {
    return this.state !== "closed";
  }
}
