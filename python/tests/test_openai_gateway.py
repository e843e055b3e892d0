"""The OpenAI-compatible gateway (contrib/openai_gateway.py) on a module server, served by uvicorn on a
free port and called over real HTTP by httpx, in front of `FakeUpstream` (in this process): the LLM
headers' values, tokens charged at the usage (not the estimate), streams settled from their last
chunk's usage and cut when the budget is gone, 429 when an estimate does not fit."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from redis_ratelimit import AsyncLimiter, FailurePolicy, FixedWindow, Limiter
from redis_ratelimit.contrib.openai_gateway import (PATH, FakeUpstream, OpenAIGateway, estimate, keys_of, prompt_tokens,
                                                    rough_tokens)
from redis_ratelimit.contract import HOLDS
from redis_ratelimit.web import RateLimitConfig, RateLimitMiddleware, Route
from redis_ratelimit.web.llm import budget_of_inspection
from servers import HOST, LONG_DEADLINE, Server

RPM = FixedWindow(limit=5, window=60)
TPM = FixedWindow(limit=1_000, window=60)
KEY = "sk-test"
AUTH = {"authorization": f"Bearer {KEY}"}
DURATION = re.compile(r"^(\d+h)?(\d+m)?(\d+(\.\d{1,3})?s|\d+ms)$")


def chat(max_tokens: int | None = 100, **more: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "fake", "messages": [{"role": "user", "content": "Say hello to the gateway."}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return {**body, **more}


def gateway(server: Server, upstream: FakeUpstream, tokens: FixedWindow = TPM, **options: Any) -> OpenAIGateway:
    limiter = AsyncLimiter(aioredis.Redis(host=HOST, port=server.port), FailurePolicy.closed(), deadline=LONG_DEADLINE)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream), base_url="http://model")
    return OpenAIGateway(limiter, client, requests=RPM, tokens=tokens, **options)


def remaining_tokens(server: Server, policy: FixedWindow = TPM) -> int:
    return budget_of_inspection(Limiter(server.client(), FailurePolicy.closed()).peek(keys_of(KEY)[1], policy), policy).remaining


def events(text: str) -> list[Any]:
    return [json.loads(line[6:]) if line[6:] != "[DONE]" else "[DONE]"
            for line in text.split("\n") if line.startswith("data: ")]


def test_headers_and_tokens_charged_at_the_usage(module_server: Server, serve: Any) -> None:
    upstream = FakeUpstream(words=12)
    client = serve(gateway(module_server, upstream))
    r = client.post(PATH, headers=AUTH, json=chat(100))
    assert r.status_code == 200, r.text
    used = r.json()["usage"]["total_tokens"]
    held = estimate(chat(100))
    assert used == 3 + 5 + 12 and held > used + 50, "the usage is far below the estimate"
    h = r.headers
    assert (h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]) == ("5", "4")
    assert (h["x-ratelimit-limit-tokens"], h["x-ratelimit-remaining-tokens"]) == ("1000", str(1000 - used))
    assert DURATION.match(h["x-ratelimit-reset-requests"]) and DURATION.match(h["x-ratelimit-reset-tokens"])
    assert h["ratelimit-policy"] == '"requests";q=5;w=60, "tokens";q=1000;w=60'
    assert re.fullmatch(rf'"requests";r=4;t=(59|60), "tokens";r={1000 - used};t=(59|60)', h["ratelimit"])
    assert remaining_tokens(module_server) == 1000 - used
    second = client.post(PATH, headers=AUTH, json=chat(100))
    assert second.headers["x-ratelimit-remaining-tokens"] == str(1000 - 2 * used)
    assert second.headers["x-ratelimit-remaining-requests"] == "3"


def test_a_stream_settles_its_usage(module_server: Server, serve: Any) -> None:
    client = serve(gateway(module_server, FakeUpstream(words=30)))
    r = client.post(PATH, headers=AUTH, json=chat(200, stream=True, stream_options={"include_usage": True}))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    got = events(r.text)
    assert got[-1] == "[DONE]"
    used = got[-2]["usage"]["total_tokens"]
    assert used == 3 + 5 + 30
    # The headers left with the stream's start: the estimate held then.
    assert r.headers["x-ratelimit-remaining-tokens"] == str(1000 - estimate(chat(200)))
    assert remaining_tokens(module_server) == 1000 - used
    # Not asked for: the usage chunk is not forwarded, and the stream is settled all the same.
    r = client.post(PATH, headers=AUTH, json=chat(200, stream=True))
    got = events(r.text)
    assert got[-1] == "[DONE]" and all("usage" not in e for e in got[:-1])
    assert remaining_tokens(module_server) == 1000 - 2 * used


def test_a_stream_is_cut_when_the_budget_is_gone(module_server: Server, serve: Any) -> None:
    tpm = FixedWindow(limit=100, window=60)
    upstream = FakeUpstream(words=1_000)
    client = serve(gateway(module_server, upstream, tokens=tpm, default_max_tokens=10))
    with client.stream("POST", PATH, headers=AUTH, json=chat(None, stream=True)) as r:
        assert r.status_code == 200
        text = r.read().decode()
    got = events(text)
    assert "[DONE]" not in got
    assert got[-1]["error"]["type"] == "tokens" and got[-1]["error"]["code"] == "rate_limit_exceeded"
    words = len(got) - 1
    assert 10 <= words < 100, "cut past the hold, once the budget was gone, long before the model's end"
    assert remaining_tokens(module_server, tpm) == 0
    # The budget is gone: the next request is refused before the upstream is called.
    calls = upstream.calls
    r = client.post(PATH, headers=AUTH, json=chat(10))
    assert r.status_code == 429 and upstream.calls == calls


def test_429_when_the_estimate_does_not_fit(module_server: Server, serve: Any) -> None:
    upstream = FakeUpstream(words=12)
    client = serve(gateway(module_server, upstream))
    never = client.post(PATH, headers=AUTH, json=chat(5_000))
    assert never.status_code == 429 and "retry-after" not in never.headers
    assert never.json()["error"]["type"] == "tokens" and "can never be allowed" in never.json()["error"]["message"]
    h = never.headers
    assert (h["x-ratelimit-remaining-tokens"], h["x-ratelimit-remaining-requests"]) == ("1000", "5"), "nothing taken"
    assert upstream.calls == 0
    ok = client.post(PATH, headers=AUTH, json=chat(900))
    assert ok.status_code == 200
    left = 1000 - ok.json()["usage"]["total_tokens"]
    later = client.post(PATH, headers=AUTH, json=chat(left))  # its prompt on top: more than is left
    assert later.status_code == 429 and 1 <= int(later.headers["retry-after"]) <= 60
    assert later.headers["x-ratelimit-remaining-tokens"] == str(left)
    assert later.headers["x-ratelimit-remaining-requests"] == "4"
    assert upstream.calls == 1


def test_the_request_limit_and_an_upstream_failure(module_server: Server, serve: Any) -> None:
    client = serve(gateway(module_server, FakeUpstream(words=1)))
    failed = client.post(PATH, headers=AUTH, json=chat(50, model="fail"))
    assert failed.status_code == 500 and failed.headers["x-ratelimit-remaining-tokens"] == "1000", "given back"
    assert failed.headers["x-ratelimit-remaining-requests"] == "4", "a request is a request"
    for _ in range(4):
        assert client.post(PATH, headers=AUTH, json=chat(1)).status_code == 200
    refused = client.post(PATH, headers=AUTH, json=chat(1))
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "requests"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0" and "retry-after" in refused.headers
    assert client.post(PATH, json=chat(1)).status_code == 401


def test_behind_the_middleware(module_server: Server, serve: Any) -> None:
    """The package's ASGI middleware in front (a per-IP limit, structured fields off): both sets of
    headers on one response."""
    limiter = AsyncLimiter(aioredis.Redis(host=HOST, port=module_server.port), FailurePolicy.open())
    config = RateLimitConfig(limiter, routes=[Route("per-ip", PATH, FixedWindow(limit=2, window=60))])
    client = serve(RateLimitMiddleware(gateway(module_server, FakeUpstream()), config))
    r = client.post(PATH, headers=AUTH, json=chat(10))
    assert r.status_code == 200
    assert (r.headers["ratelimit-limit"], r.headers["ratelimit-remaining"]) == ("2", "1")
    assert r.headers["ratelimit-policy"] == '"requests";q=5;w=60, "tokens";q=1000;w=60'
    client.post(PATH, headers=AUTH, json=chat(10))
    assert client.post(PATH, headers=AUTH, json=chat(10)).status_code == 429


def test_a_caller_gone_mid_stream_leaves_the_hold_to_its_abandon_policy(module_server: Server, serve: Any) -> None:
    """The caller reads a few chunks and goes away while the model still works: the gateway ends the
    upstream call and leaves the hold unsettled, so its abandon policy applies (here RETURN: what the
    chunks so far used stays charged, the rest of the estimate comes back; never a cancel)."""
    upstream = FakeUpstream(words=5)
    model = serve(upstream)
    limiter = AsyncLimiter(aioredis.Redis(host=HOST, port=module_server.port), FailurePolicy.closed(),
                           deadline=LONG_DEADLINE)
    app = OpenAIGateway(limiter, httpx.AsyncClient(base_url=str(model.base_url)), requests=RPM, tokens=TPM,
                        abandon=HOLDS["abandon"][1])
    client = serve(app)
    body = chat(200, stream=True, model="hang")
    words: list[str] = []
    with client.stream("POST", PATH, headers=AUTH, json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                content = json.loads(line[6:])["choices"][0]["delta"].get("content")
                if content:
                    words.append(content)
                if len(words) == 5:
                    break  # and leave: the connection is closed
    held = estimate(body)
    running = prompt_tokens(body) + sum(rough_tokens(w) for w in words)
    for _ in range(1000):  # until the gateway noticed (not a timing assertion: a bound on the wait)
        if remaining_tokens(module_server) != 1000 - held and upstream.gone.is_set():
            break
        time.sleep(0.01)
    assert upstream.gone.is_set(), "the upstream call was ended"
    assert remaining_tokens(module_server) == 1000 - running, "the chunks' count kept, the rest returned"
