// examples/llm-gateway.ts on a real redis-server with the module, over real HTTP (node:http servers for
// the gateway and the fake upstream, fetch for the client): the LLM headers on every answer, the token
// budget charged at the upstream's usage (not the estimate), 429 with the headers when a hold does not fit.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import type { Server as HttpServer } from "node:http";
import { Redis } from "ioredis";
import { LONG_DEADLINE_MS, Server } from "./servers.ts";
import { FixedWindow, Limiter, http } from "../src/index.ts";
import { chatGateway, estimate, fakeUpstream, keysOf, listen, type ChatRequest } from "../examples/llm-gateway.ts";

let server: Server;
let redis: Redis;
let limiter: Limiter;
const closing: HttpServer[] = [];

before(async () => {
  server = await Server.start({ module: true });
  redis = new Redis(server.port, "127.0.0.1");
  redis.on("error", () => {});
  limiter = new Limiter(redis, { failure: "closed", deadlineMs: LONG_DEADLINE_MS });
  assert.equal((await limiter.verify()).engine, "module");
});
after(async () => {
  for (const s of closing) s.close();
  redis.disconnect();
  await server.close();
});

const requests = new FixedWindow({ limit: 5, windowMs: 3_600_000 });
const tokens = new FixedWindow({ limit: 1_000, windowMs: 3_600_000 });

/** A gateway (5 requests and 1,000 tokens an hour) in front of a fresh fake upstream. */
async function gateway(opts: { requests?: FixedWindow } = {}) {
  const fake = fakeUpstream();
  const up = await listen(fake);
  const gw = await listen(chatGateway({ limiter, upstream: up.url, requests: opts.requests ?? requests, tokens }));
  closing.push(up.server, gw.server);
  return { url: gw.url, fake };
}

let n = 0;
const apiKey = () => `sk-test-${++n}-${process.pid}`;

function chat(maxTokens: number, model = "fake"): ChatRequest {
  return { model, max_tokens: maxTokens, messages: [{ role: "user", content: "Say hello to the gateway, please." }] };
}

interface Answer {
  status: number;
  h: Headers;
  usage?: { total_tokens: number };
  error?: { type: string; code: string | null; message: string };
}

async function post(url: string, key: string, body: ChatRequest): Promise<Answer> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as Omit<Answer, "status" | "h">;
  return { status: res.status, h: res.headers, ...json };
}

const DURATION = /^(0s|[1-9]\d{0,2}ms|(\d+h)?(\d+m)?\d+(\.\d{1,3})?s)$/;

/** The LLM headers of an answer, in the renderer's order (names from the renderer itself). */
function llm(h: Headers): Record<string, string | null> {
  const names = http.llmHeaders({ limit: 1, remaining: 1, resetMs: 0, windowSecs: 1 }, { limit: 1, remaining: 1, resetMs: 0, windowSecs: 1 }).map(([name]) => name);
  assert.equal(names.length, 8);
  return Object.fromEntries(names.map((name) => [name, h.get(name)]));
}

test("an answer carries both units' headers; the tokens left drop by the usage, not the estimate", async () => {
  const { url, fake } = await gateway();
  const key = apiKey();
  const body = chat(300);
  const held = estimate(body);

  const first = await post(url, key, body);
  assert.equal(first.status, 200, JSON.stringify(first));
  const used = first.usage!.total_tokens;
  assert.ok(used > 0 && used < held, `used ${used}, held ${held}`);
  const h = llm(first.h);
  assert.equal(h["x-ratelimit-limit-requests"], "5");
  assert.equal(h["x-ratelimit-remaining-requests"], "4");
  assert.equal(h["x-ratelimit-limit-tokens"], "1000");
  assert.equal(h["x-ratelimit-remaining-tokens"], String(1000 - used), `charged the usage (${used}), not the estimate (${held})`);
  assert.match(h["x-ratelimit-reset-requests"]!, DURATION);
  assert.match(h["x-ratelimit-reset-tokens"]!, DURATION);
  assert.equal(h["ratelimit-policy"], '"requests";q=5;w=3600, "tokens";q=1000;w=3600');
  assert.match(h["ratelimit"]!, new RegExp(`^"requests";r=4;t=\\d+, "tokens";r=${1000 - used};t=\\d+$`));
  // What Redis holds says the same.
  const k = keysOf(key);
  assert.equal((await limiter.peek(k.tokens, tokens)).remaining, 1000 - used);
  assert.equal((await limiter.peek(k.requests, requests)).remaining, 4);

  const second = await post(url, key, body);
  assert.equal(second.status, 200);
  assert.equal(second.h.get("x-ratelimit-remaining-tokens"), String(1000 - used - second.usage!.total_tokens));
  assert.equal(second.h.get("x-ratelimit-remaining-requests"), "3");
  assert.equal(fake.calls, 2);
});

test("429 with the headers once the estimate does not fit; nothing taken, the upstream not called", async () => {
  const { url, fake } = await gateway();
  const key = apiKey();
  const first = await post(url, key, chat(300));
  assert.equal(first.status, 200);
  const left = 1000 - first.usage!.total_tokens;

  // Fits the limit, not what is left: 429, Retry-After, the error's type names the unit.
  const big = chat(970);
  assert.ok(estimate(big) > left && estimate(big) <= 1000);
  const denied = await post(url, key, big);
  assert.equal(denied.status, 429);
  assert.equal(denied.error?.type, "tokens");
  assert.equal(denied.error?.code, "rate_limit_exceeded");
  assert.ok(Number(denied.h.get("retry-after")) >= 1, `retry-after ${denied.h.get("retry-after")}`);
  const h = llm(denied.h);
  assert.equal(h["x-ratelimit-remaining-tokens"], String(left), "a denied hold takes nothing");
  assert.equal(h["x-ratelimit-remaining-requests"], "4", "nor the request");
  assert.equal(h["x-ratelimit-limit-tokens"], "1000");
  assert.match(h["x-ratelimit-reset-tokens"]!, DURATION);
  assert.match(h["ratelimit"]!, new RegExp(`"tokens";r=${left};t=\\d+$`));
  assert.equal(fake.calls, 1, "the upstream is not called");

  // Never fits (above the limit itself): 429 without Retry-After.
  const never = await post(url, key, chat(5_000));
  assert.equal(never.status, 429);
  assert.equal(never.h.get("retry-after"), null);
  assert.match(never.error!.message, /never be allowed/);
  assert.equal(never.h.get("x-ratelimit-remaining-tokens"), String(left));

  // A small one still fits.
  const small = await post(url, key, chat(100));
  assert.equal(small.status, 200);
  assert.equal(small.h.get("x-ratelimit-remaining-tokens"), String(left - small.usage!.total_tokens));
  assert.equal(small.h.get("x-ratelimit-remaining-requests"), "3");
});

test("the request limit is taken exactly: past it, 429 naming requests", async () => {
  const { url } = await gateway({ requests: new FixedWindow({ limit: 2, windowMs: 3_600_000 }) });
  const key = apiKey();
  for (const left of ["1", "0"]) {
    const a = await post(url, key, chat(10));
    assert.equal(a.status, 200);
    assert.equal(a.h.get("x-ratelimit-remaining-requests"), left);
  }
  const third = await post(url, key, chat(10));
  assert.equal(third.status, 429);
  assert.equal(third.error?.type, "requests");
  assert.equal(third.h.get("x-ratelimit-remaining-requests"), "0");
  assert.equal(third.h.get("x-ratelimit-limit-requests"), "2");
  assert.ok(Number(third.h.get("retry-after")) >= 1);
});

test("an upstream error uses no tokens: the hold is cancelled, the request (exact) stays counted", async () => {
  const { url } = await gateway();
  const key = apiKey();
  const failed = await post(url, key, chat(300, "fail"));
  assert.equal(failed.status, 500);
  assert.equal(failed.h.get("x-ratelimit-remaining-tokens"), "1000");
  assert.equal(failed.h.get("x-ratelimit-remaining-requests"), "4", "an exact limit is never named in a settle");
});
