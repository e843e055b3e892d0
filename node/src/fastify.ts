/** A Fastify plugin: `await app.register(rateLimitPlugin, { limiter, routes, global, ... })`. It
 * hooks `onRequest` on the instance it is registered on (wrapped with fastify-plugin semantics: the
 * hook covers the whole application when registered at the root). */
import { RateLimitCore, type RateLimitOptions } from "./http/middleware.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;

export async function rateLimitPlugin(fastify: Any, options: RateLimitOptions): Promise<void> {
  const core = new RateLimitCore(options);
  fastify.addHook("onRequest", async (request: Any, reply: Any) => {
    const raw = request.raw;
    const path = String(raw.url ?? "/").split("?")[0]!;
    const headers = (): [string, string][] => {
      const lines: [string, string][] = [];
      const rh: string[] = raw.rawHeaders ?? [];
      for (let i = 0; i + 1 < rh.length; i += 2) lines.push([rh[i]!, rh[i + 1]!]);
      return lines;
    };
    // The header lines are read only when the caller or a trusted proxy's forwarding needs them.
    const outcome = await core.handle({ method: raw.method, path, peer: raw.socket?.remoteAddress, get headers() { return headers(); }, raw: request });
    if (outcome.kind === "served") {
      const permit = outcome.permit;
      if (permit) {
        // Held until the response is finished or its connection closed (the raw response's 'close'
        // comes after 'finish' too); a caller already gone frees its slot now.
        const res = reply.raw;
        if (res.closed || res.destroyed) void permit.release();
        else res.once("close", () => void permit.release());
      }
      for (const [n, v] of outcome.headers) reply.header(n, v);
    } else if (outcome.kind === "answer") {
      const a = outcome.answer;
      reply.code(a.status);
      for (const [n, v] of a.headers) reply.header(n, v);
      // The body as it is, byte for byte: no serializer.
      return reply.send(Buffer.from(a.body, "utf8"));
    }
  });
}
// Not encapsulated: the hook applies to the whole app (what fastify-plugin's skip-override does).
(rateLimitPlugin as Any)[Symbol.for("skip-override")] = true;
(rateLimitPlugin as Any)[Symbol.for("fastify.display-name")] = "redis-ratelimit";

export type { RateLimitOptions, Route, ConcurrencyRoute } from "./http/middleware.js";
