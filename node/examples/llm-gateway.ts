// An OpenAI-compatible gateway in front of an LLM, on this package's token budgets (node:http, no
// framework): each POST /v1/chat/completions takes one request of the caller's request limit exactly
// and holds an estimate of its tokens (a rough count of the prompt + max_tokens) with `limiter.hold`,
// in one atomic call; the upstream's answer settles the hold with `usage.total_tokens`, so the caller
// is charged what the model used, not the estimate. Every answer carries the headers OpenAI's clients
// read (x-ratelimit-{limit,remaining,reset}-{requests,tokens}, RateLimit-Policy, RateLimit:
// `http.setLlmHeaders`), and a request whose estimate does not fit gets 429 with them.
//
//   cd node && node scripts/embed.mjs && REDIS_URL=redis://127.0.0.1:6379 node --import tsx examples/llm-gateway.ts
//
// (a server with the module, or a stock one: the library is loaded by itself) runs a fake local
// upstream and the gateway, sends a few requests and prints what they met. With LISTEN set (a port, say
// 8080) it serves the gateway there instead, in front of UPSTREAM (an OpenAI-compatible base URL; default
// the fake one). test/llm-gateway.test.ts runs it on a module server over real HTTP.
import { createServer, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import { pathToFileURL } from "node:url";
import { Redis } from "ioredis";
// In an application: from "redis-ratelimit".
import { CONTRACT, FixedWindow, Limiter, http as rl, type Decision, type Policy } from "../src/index.ts";

export interface GatewayOptions {
  limiter: Limiter;
  /** The OpenAI-compatible API's base URL (its /v1/chat/completions is called). */
  upstream: string;
  /** Each caller's request limit (charged exactly, 1 a request) and token budget (held at the
   * estimate, settled at the usage). A fixed window or a sliding counter reads as OpenAI's per-minute
   * limits do; a token bucket works too. */
  requests: Policy;
  tokens: Policy;
  /** The estimate's completion part when a request names no max_tokens (default 256). */
  defaultMaxTokens?: number;
  /** What every key starts with (default `rl`): `<prefix>:{user:<api key>}:llm-tokens`, ... */
  prefix?: string;
  /** How long a hold lives unsettled, ms (default the package's, 5 minutes). */
  holdTtlMs?: number;
}

/** What the gateway reads of a request; the upstream gets the body as sent. */
export interface ChatRequest {
  model?: string;
  messages?: { role?: string; content?: string | { type?: string; text?: string }[] }[];
  max_tokens?: number;
  max_completion_tokens?: number;
  stream?: boolean;
}

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** A rough count of a prompt's tokens: about 4 characters a token, plus a few a message for its
 * framing (OpenAI's rule of thumb). A tokenizer would be closer; the settle corrects what it missed. */
export function promptTokens(req: ChatRequest): number {
  let n = 3;
  for (const m of req.messages ?? []) {
    const text = typeof m.content === "string" ? m.content : (m.content ?? []).map((p) => p.text ?? "").join("");
    n += 4 + Math.ceil(text.length / 4);
  }
  return n;
}

/** What a request holds: its prompt's rough count + its max_tokens (or the default). */
export function estimate(req: ChatRequest, defaultMaxTokens = 256): number {
  return promptTokens(req) + (req.max_completion_tokens ?? req.max_tokens ?? defaultMaxTokens);
}

/** A caller's request and token keys: under the caller's tag (`rl:{user:<key>}`), so both and the
 * hold's ledger share one hash tag (one cluster slot). */
export function keysOf(apiKey: string, prefix = "rl"): { requests: string; tokens: string } {
  const tag = rl.callerTag(prefix, rl.Caller.principal(apiKey));
  return { requests: `${tag}:llm-requests`, tokens: `${tag}:llm-tokens` };
}

/** An error as OpenAI's API writes one. */
function openAIError(res: ServerResponse, status: number, type: string, message: string): void {
  res.statusCode = status;
  res.setHeader("content-type", "application/json");
  res.end(JSON.stringify({ error: { message, type, param: null, code: status === 429 ? "rate_limit_exceeded" : null } }));
}

async function readBody(req: IncomingMessage, max = 4 << 20): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > max) return null;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/** The /v1/chat/completions handler. */
export function chatGateway(o: GatewayOptions): RequestListener {
  const upstream = o.upstream.replace(/\/$/, "") + "/v1/chat/completions";
  const retryAfter = CONTRACT.http.headers.retry_after;
  const [requestsUnit, tokensUnit] = CONTRACT.http.llm.units as [string, string];

  /** The LLM headers of both units as they stand now (RL.INSPECT, read-only: after this request's
   * hold and settle). A unit Redis cannot read now is left out. */
  const setHeaders = async (res: ServerResponse, keys: { requests: string; tokens: string }) => {
    const read = (key: string, p: Policy) => o.limiter.peek(key, p).then((i) => rl.budgetOfInspection(i, p), () => null);
    const [requests, tokens] = await Promise.all([read(keys.requests, o.requests), read(keys.tokens, o.tokens)]);
    rl.setLlmHeaders(res, requests, tokens);
  };

  /** A hold not allowed: 429 with the LLM headers (a denied hold took nothing: they show what is
   * left), Retry-After when the request can fit later, an OpenAI-style error whose type names the unit
   * that refused it. Redis not deciding (the failure policy's denial) is 503. */
  const denied = async (res: ServerResponse, d: Decision, keys: { requests: string; tokens: string }, held: number) => {
    if (d.degraded) {
      res.setHeader(retryAfter, "1");
      return openAIError(res, 503, "server_error", "the rate limiter is unavailable: retry shortly");
    }
    await setHeaders(res, keys);
    const unit = d.limiting === 0 ? requestsUnit : tokensUnit;
    let message = d.limiting === 0
      ? `request limit exceeded: ${d.limit} requests allowed`
      : `token budget exceeded: this request holds ${held} tokens (its prompt + max_tokens), ${d.remaining} are left`;
    const secs = d.retryAfterSecs();
    if (secs !== null) {
      res.setHeader(retryAfter, String(secs));
      message += `; retry in ${secs} s`;
    } else {
      message = `this request holds ${held} tokens and the token limit is ${d.limit}: it can never be allowed; lower max_tokens`;
    }
    openAIError(res, 429, unit, message);
  };

  const serve = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (req.method !== "POST") {
      res.setHeader("allow", "POST");
      return openAIError(res, 405, "invalid_request_error", "use POST");
    }
    const apiKey = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
    if (!apiKey) return openAIError(res, 401, "invalid_request_error", "no API key (Authorization: Bearer ...)");
    const body = await readBody(req);
    if (body === null) return openAIError(res, 413, "invalid_request_error", "the request body is too large");
    let chat: ChatRequest;
    try {
      chat = JSON.parse(body.toString("utf8")) as ChatRequest;
      if (typeof chat !== "object" || chat === null) throw new Error("not an object");
    } catch (e) {
      return openAIError(res, 400, "invalid_request_error", `the body is not a chat completion request: ${(e as Error).message}`);
    }
    if (chat.stream) {
      // A stream's usage comes in its last chunk (stream_options.include_usage): hold.add with the
      // running total as chunks come, hold.settle at the end. Not in this example.
      return openAIError(res, 400, "invalid_request_error", "this gateway does not stream");
    }
    const keys = keysOf(apiKey, o.prefix);
    const held = estimate(chat, o.defaultMaxTokens);
    const hold = await o.limiter.hold([
      [keys.requests, o.requests, 1, "exact"], // a request is a request: charged, never settled
      [keys.tokens, o.tokens, held], // the most it can cost, settled at the usage
    ], { ...(o.holdTtlMs !== undefined && { ttlMs: o.holdTtlMs }) });
    if (!hold.allowed) return denied(res, hold.decision, keys, held);
    try {
      let answer: Response;
      let text: string;
      try {
        answer = await fetch(upstream, { method: "POST", headers: { "content-type": "application/json" }, body });
        text = await answer.text();
      } catch (e) {
        await hold.cancel(); // the upstream never answered: no token was used (the request stays counted)
        if (!hold.local) await setHeaders(res, keys);
        return openAIError(res, 502, "server_error", `the upstream did not answer: ${(e as Error).message}`);
      }
      if (!answer.ok) {
        await hold.cancel(); // an upstream error uses no tokens: all held back (the request stays counted)
      } else {
        let usage: Partial<Usage> | undefined;
        try {
          usage = (JSON.parse(text) as { usage?: Partial<Usage> }).usage;
        } catch {}
        const used = usage?.total_tokens;
        // The unused part of the estimate goes back; no usage: the estimate stays charged.
        await hold.settle(typeof used === "number" && Number.isInteger(used) && used > 0 ? used : held);
      }
      if (!hold.local) await setHeaders(res, keys);
      res.statusCode = answer.status;
      res.setHeader("content-type", answer.headers.get("content-type") ?? "application/json");
      res.end(text);
    } finally {
      // Settled or cancelled: nothing. A throw before either (the client went away mid-call): the
      // hold's abandon policy, now: CHARGE (the default) keeps the estimate charged, since the upstream
      // may have billed it; only an explicit cancel gives tokens back.
      await hold.close();
    }
  };

  return (req, res) => {
    serve(req, res).catch((e: unknown) => {
      if (!res.headersSent) openAIError(res, 500, "server_error", String(e));
      else res.destroy();
    });
  };
}

const FAKE_REPLY = "Hello! I am a fake model, and this is my whole answer.";

/** Stands for the model: an OpenAI-style chat completion whose usage counts the prompt's words (plus 3
 * a message: its own tokenizer, not the gateway's estimate) and a fixed reply of at most max_tokens
 * tokens. The model `fail` answers 500. `calls` counts what it answered. */
export function fakeUpstream(): RequestListener & { calls: number } {
  const handler = Object.assign((req: IncomingMessage, res: ServerResponse) => void answer(req, res).catch(() => res.destroy()), { calls: 0 });
  async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
    handler.calls++;
    const body = await readBody(req);
    let chat: ChatRequest;
    try {
      chat = JSON.parse(String(body)) as ChatRequest;
    } catch (e) {
      return openAIError(res, 400, "invalid_request_error", (e as Error).message);
    }
    if (chat.model === "fail") return openAIError(res, 500, "server_error", "the model failed");
    const words = (s: string) => s.split(/\s+/).filter(Boolean);
    const prompt = (chat.messages ?? []).reduce((n, m) => n + 3 + words(typeof m.content === "string" ? m.content : "").length, 0);
    const reply = words(FAKE_REPLY);
    let completion = reply.length + 2;
    let content = FAKE_REPLY;
    if (chat.max_tokens !== undefined && chat.max_tokens < completion) {
      completion = chat.max_tokens;
      content = reply.slice(0, completion).join(" ");
    }
    const usage: Usage = { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({
      id: `chatcmpl-fake-${handler.calls}`, object: "chat.completion", created: Math.floor(Date.now() / 1000), model: chat.model,
      choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content } }],
      usage,
    }));
  }
  return handler;
}

/** `handler` served on 127.0.0.1 at `port` (default: a free one); resolves its base URL. */
export async function listen(handler: RequestListener, port = 0): Promise<{ server: Server; url: string }> {
  const server = createServer(handler);
  await new Promise<void>((ok, fail) => server.once("error", fail).listen(port, "127.0.0.1", ok));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

async function main(): Promise<void> {
  const redis = new Redis(process.env["REDIS_URL"] ?? "redis://127.0.0.1:6379");
  const limiter = new Limiter(redis, { failure: "closed" });
  console.log("engine:", (await limiter.verify()).engine);
  const fake = await listen(fakeUpstream());
  const gateway = chatGateway({
    limiter, upstream: process.env["UPSTREAM"] ?? fake.url,
    requests: new FixedWindow({ limit: 5, windowMs: 60_000 }), // 5 requests a minute
    tokens: new FixedWindow({ limit: 1_000, windowMs: 60_000 }), // 1,000 tokens a minute
  });
  if (process.env["LISTEN"]) {
    const { url } = await listen(gateway, Number(process.env["LISTEN"]));
    console.log(`gateway on ${url}/v1/chat/completions`);
    return;
  }
  const { server, url } = await listen(gateway);
  // A fresh API key per run, so that each run starts with whole budgets.
  const apiKey = `sk-demo-${randomBytes(6).toString("hex")}`;
  for (const [i, maxTokens] of [300, 300, 950, 5_000, 100].entries()) {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "fake", max_tokens: maxTokens, messages: [{ role: "user", content: "Say hello to the gateway, please." }] }),
    });
    const answer = (await res.json()) as { usage?: Usage; error?: { type: string } };
    const h = res.headers;
    let what = answer.usage ? `used ${answer.usage.total_tokens} tokens` : `refused (${answer.error?.type})`;
    if (h.get("retry-after")) what += `, retry after ${h.get("retry-after")} s`;
    console.log(`request ${i + 1} (max_tokens ${maxTokens}): ${res.status}, ${what}; requests left ${h.get("x-ratelimit-remaining-requests")}, `
      + `tokens left ${h.get("x-ratelimit-remaining-tokens")} of ${h.get("x-ratelimit-limit-tokens")}`);
  }
  server.close();
  fake.server.close();
  redis.disconnect();
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
}
