/** Express (4 and 5) middleware: `app.use(rateLimit({ limiter, routes, global, ... }))`. */
import { RateLimitCore, type Outcome, type RateLimitOptions, type RequestFacts } from "./http/middleware.js";
import type { HeaderLines } from "./http/forwarded.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;

function headerLines(raw: string[]): [string, string][] {
  const out: [string, string][] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) out.push([raw[i]!, raw[i + 1]!]);
  return out;
}

/** A request's facts for the core, its header lines read only if asked for. */
class ExpressFacts implements RequestFacts {
  readonly method: string;
  readonly peer: string | undefined;
  constructor(readonly raw: Any, readonly path: string) {
    this.method = raw.method;
    this.peer = raw.socket?.remoteAddress;
  }
  get headers(): HeaderLines {
    return headerLines(this.raw.rawHeaders ?? []);
  }
}

function finish(outcome: Outcome, res: Any, next: (e?: unknown) => void): void {
  if (outcome.kind === "pass") return next();
  if (outcome.kind === "served") {
    const permit = outcome.permit;
    if (permit) {
      // Held until the response is finished or its connection closed ('close' comes after
      // 'finish' too); a caller already gone frees its slot now and its handler does not run.
      if (res.closed || res.destroyed) return void permit.release();
      res.once("close", () => void permit.release());
    }
    const h = outcome.headers;
    for (let i = 0; i < h.length; i++) res.setHeader(h[i]![0], h[i]![1]);
    return next();
  }
  const a = outcome.answer;
  res.statusCode = a.status;
  for (const [n, v] of a.headers) res.setHeader(n, v);
  res.end(a.body);
}

/** The middleware. It reads the peer from the socket (not Express' `trust proxy`): forwarding headers
 * are believed only from `trustedProxies`. */
export function rateLimit(options: RateLimitOptions): (req: Any, res: Any, next: (e?: unknown) => void) => void {
  const core = new RateLimitCore(options);
  return (req, res, next) => {
    const url = String(req.originalUrl ?? req.url ?? "/");
    const q = url.indexOf("?");
    core.handle(new ExpressFacts(req, q < 0 ? url : url.slice(0, q))).then((outcome) => finish(outcome, res, next), next);
  };
}

export type { RateLimitOptions, Route, ConcurrencyRoute } from "./http/middleware.js";
