/** Express (4 and 5) middleware: `app.use(rateLimit({ limiter, routes, global, ... }))`. */
import { RateLimitCore, type RateLimitOptions } from "./http/middleware.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;

function headerLines(raw: string[]): [string, string][] {
  const out: [string, string][] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) out.push([raw[i]!, raw[i + 1]!]);
  return out;
}

/** The middleware. It reads the peer from the socket (not Express' `trust proxy`): forwarding headers
 * are believed only from `trustedProxies`. */
export function rateLimit(options: RateLimitOptions): (req: Any, res: Any, next: (e?: unknown) => void) => void {
  const core = new RateLimitCore(options);
  return (req, res, next) => {
    const path = String(req.originalUrl ?? req.url ?? "/").split("?")[0]!;
    core
      .handle({ method: req.method, path, peer: req.socket?.remoteAddress, get headers() { return headerLines(req.rawHeaders ?? []); }, raw: req })
      .then((outcome) => {
        if (outcome.kind === "pass") return next();
        if (outcome.kind === "served") {
          const permit = outcome.permit;
          if (permit) {
            // Held until the response is finished or its connection closed ('close' comes after
            // 'finish' too); a caller already gone frees its slot now and its handler does not run.
            if (res.closed || res.destroyed) return void permit.release();
            res.once("close", () => void permit.release());
          }
          for (const [n, v] of outcome.headers) res.setHeader(n, v);
          return next();
        }
        const a = outcome.answer;
        res.statusCode = a.status;
        for (const [n, v] of a.headers) res.setHeader(n, v);
        res.end(a.body);
      }, next);
  };
}

export type { RateLimitOptions, Route, ConcurrencyRoute } from "./http/middleware.js";
