"""An OpenAI-compatible gateway in front of an LLM, on this package's token budgets: an ASGI app serving
``POST /v1/chat/completions`` (``pip install httpx``: it calls the upstream with it). Each request takes
one request of the caller's request limit exactly and holds an estimate of its tokens (a rough count of
the prompt + ``max_tokens``) with `AsyncLimiter.hold`, in one atomic call; the upstream's ``usage``
settles the hold, so the caller is charged what the model used, not the estimate. A stream
(``"stream": true``) is asked for its usage (``stream_options.include_usage``), reports its running
count with ``hold.add`` at each chunk, is cut when ``add`` says the budget is gone, and settles at its
end. An upstream error (or no answer) before any token gives the hold back (``hold.cancel()``); a
caller that goes away mid-stream ends the upstream call and leaves the hold unsettled, so its abandon
policy applies when its scope is left (`abandon`: CHARGE, the default, keeps max(estimate, the running
count): tokens the upstream billed are never given back). Every answer carries the headers OpenAI's clients read (``x-ratelimit-{limit,remaining,reset}-
{requests,tokens}``, ``RateLimit-Policy``, ``RateLimit``: `redis_ratelimit.web.llm`); a request whose
estimate does not fit gets a 429 with them and ``Retry-After``.

    upstream = httpx.AsyncClient(base_url="https://api.openai.com", headers={"authorization": "Bearer sk-..."})
    app = OpenAIGateway(AsyncLimiter(redis.asyncio.Redis(), FailurePolicy.closed()), upstream,
                        requests=FixedWindow(limit=60, window=60), tokens=FixedWindow(limit=100_000, window=60))
    # uvicorn module:app; callers send their own key: Authorization: Bearer <key>

It is an ASGI app like any: `redis_ratelimit.web.RateLimitMiddleware` in front of it adds per-IP or
per-route limits (``structured=False`` there: the ``RateLimit-Policy`` and ``RateLimit`` fields are the
gateway's). ``python -m redis_ratelimit.contrib.openai_gateway`` sends a few requests to it in front of
`FakeUpstream` (a stand-in for the model, in this process) on ``REDIS_URL`` and prints what they met.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any, Awaitable, Callable, MutableMapping, Optional

import httpx

from ..aio import AsyncLimiter
from ..contract import HTTP
from ..hold import DEFAULT_TTL, AsyncHold
from ..policy import Policy
from ..web.caller import Caller, caller_tag
from ..web.llm import NAMES, UNITS, Budget, add_llm_headers, budget_of_inspection

__all__ = ["OpenAIGateway", "FakeUpstream", "estimate", "prompt_tokens", "rough_tokens", "keys_of", "PATH"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The path the gateway serves and calls upstream.
PATH = "/v1/chat/completions"
#: The largest request body read.
MAX_BODY = 4 << 20
_REQUESTS, _TOKENS = UNITS
_RETRY_AFTER = HTTP["headers"]["retry_after"].encode()
_JSON = (b"content-type", b"application/json")
_SSE = (b"content-type", b"text/event-stream")
_BEARER = re.compile(r"^Bearer\s+(\S+)$", re.IGNORECASE)


def rough_tokens(text: str) -> int:
    """A rough count of a text's tokens: about 4 characters a token (OpenAI's rule of thumb)."""
    return math.ceil(len(text) / 4)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # parts: [{"type": "text", "text": ...}, ...]
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
    return ""


def prompt_tokens(chat: Mapping[str, Any]) -> int:
    """A rough count of a request's prompt: 4 a message for its framing, its text's `rough_tokens`, 3 for
    the reply's priming. A tokenizer would be closer; the settle corrects what it missed."""
    messages = chat.get("messages") or []
    return 3 + sum(4 + rough_tokens(_text(m.get("content"))) for m in messages if isinstance(m, Mapping))


def estimate(chat: Mapping[str, Any], default_max_tokens: int = 256) -> int:
    """What a request holds: its prompt's rough count + its ``max_completion_tokens`` or ``max_tokens``
    (or `default_max_tokens`)."""
    most = chat.get("max_completion_tokens") or chat.get("max_tokens") or default_max_tokens
    return prompt_tokens(chat) + max(0, int(most))


def keys_of(api_key: str, prefix: str = "rl") -> tuple[str, str]:
    """A caller's request and token keys, under its tag (``rl:{user:<key>}``): both and the hold's
    ledger share one hash tag (one cluster slot)."""
    tag = caller_tag(prefix, Caller.principal(api_key))
    return f"{tag}:llm-requests", f"{tag}:llm-tokens"


def _api_key(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"authorization":
            m = _BEARER.match(value.decode("latin-1"))
            return m[1] if m else None
    return None


def _error(status: int, type_: str, message: str, code: str | None = None) -> bytes:
    """An error body as OpenAI's API writes one."""
    return json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}}).encode()


async def _read(receive: Receive) -> bytes | None:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > MAX_BODY:
            return None
        if not message.get("more_body", False):
            return bytes(body)


class OpenAIGateway:
    """``POST /v1/chat/completions`` in front of `upstream` (an httpx client whose base URL is an
    OpenAI-compatible API), each caller (``Authorization: Bearer <key>``) limited to `requests` a window
    (charged exactly) and `tokens` (held at the estimate, settled at the usage): a fixed window or a
    sliding counter reads as OpenAI's per-minute limits do; a token bucket works too. `abandon` is the
    holds' abandon policy (default CHARGE), applied to a hold left unsettled (a caller gone mid-stream)."""

    def __init__(self, limiter: AsyncLimiter, upstream: httpx.AsyncClient, *, requests: Policy, tokens: Policy,
                 default_max_tokens: int = 256, prefix: str = "rl", ttl: float = DEFAULT_TTL,
                 abandon: str | None = None) -> None:
        self.limiter = limiter
        self.upstream = upstream
        self.requests = requests
        self.tokens = tokens
        self.default_max_tokens = default_max_tokens
        self.prefix = prefix
        self.ttl = ttl
        self.abandon = abandon

    async def budgets(self, keys: tuple[str, str]) -> tuple[Optional[Budget], Optional[Budget]]:
        """Both units as they stand now (RL.INSPECT, read-only); a unit Redis cannot read now is None."""

        async def read(key: str, policy: Policy) -> Optional[Budget]:
            try:
                return budget_of_inspection(await self.limiter.peek(key, policy), policy)
            except Exception:
                return None

        requests, tokens = await asyncio.gather(read(keys[0], self.requests), read(keys[1], self.tokens))
        return requests, tokens

    async def _headers(self, keys: tuple[str, str], hold: AsyncHold | None, *extra: tuple[bytes, bytes]
                       ) -> list[tuple[bytes, bytes]]:
        headers = list(extra)
        if hold is None or not hold.local:
            add_llm_headers(headers, *(await self.budgets(keys)))
        return headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        answer = _Answer(send)
        if scope["path"] != PATH:
            return await answer(404, [_JSON], _error(404, "invalid_request_error", f"no such path: {scope['path']}"))
        if scope["method"] != "POST":
            return await answer(405, [_JSON, (b"allow", b"POST")], _error(405, "invalid_request_error", "use POST"))
        api_key = _api_key(scope)
        if api_key is None:
            return await answer(401, [_JSON], _error(401, "invalid_request_error",
                                                     "no API key (Authorization: Bearer ...)", "invalid_api_key"))
        body = await _read(receive)
        if body is None:
            return await answer(413, [_JSON], _error(413, "invalid_request_error", "the request body is too large"))
        try:
            chat = json.loads(body)
            if not isinstance(chat, dict):
                raise ValueError("not an object")
        except ValueError as e:
            return await answer(400, [_JSON], _error(400, "invalid_request_error",
                                                     f"the body is not a chat completion request: {e}"))
        keys = keys_of(api_key, self.prefix)
        held = estimate(chat, self.default_max_tokens)
        async with self.limiter.hold([(keys[1], self.tokens, held)], exact=[(keys[0], self.requests, 1)],
                                     ttl=self.ttl, abandon=self.abandon) as hold:
            if not hold:
                return await self._denied(answer, hold, keys, held)
            if chat.get("stream"):
                return await self._stream(answer, receive, hold, keys, chat)
            try:
                reply = await self.upstream.post(PATH, json=chat)
            except httpx.HTTPError as e:
                await hold.cancel()  # the upstream never answered: nothing was used
                return await answer(502, await self._headers(keys, hold, _JSON),
                                    _error(502, "server_error", f"the upstream did not answer: {e}"))
            if reply.is_success:
                # The unused part of the estimate goes back; no usage: the estimate stays charged.
                await hold.settle(_total(_json(reply.content)) or held)
            else:
                await hold.cancel()  # an upstream error uses no tokens
            content_type = reply.headers.get("content-type", "application/json").encode()
            headers = await self._headers(keys, hold, (b"content-type", content_type))
            await answer(reply.status_code, headers, reply.content)

    async def _denied(self, answer: _Answer, hold: AsyncHold, keys: tuple[str, str], held: int) -> None:
        """A hold not allowed: 429 with the LLM headers (a denied hold took nothing: they show what is
        left), ``Retry-After`` when the request can fit later, an OpenAI-style error whose type names the
        unit that refused it. Redis not deciding (the failure policy's denial) is a 503."""
        d = hold.decision
        if hold.local:
            return await answer(503, [_JSON, (_RETRY_AFTER, b"1")],
                                _error(503, "server_error", "the rate limiter is unavailable: retry shortly"))
        headers = await self._headers(keys, hold, _JSON)
        tokens = d.limiting == 0  # the held limit comes first in the hold's call, the exact one after
        secs = d.retry_after_secs()
        if tokens:
            message = f"token budget exceeded: this request holds {held} tokens (its prompt + max_tokens), " \
                      f"{d.remaining} are left"
        else:
            message = f"request limit exceeded: {d.limit} requests allowed"
        if secs is not None:
            headers.append((_RETRY_AFTER, str(secs).encode()))
            message += f"; retry in {secs} s"
        else:
            message = f"this request holds {held} tokens and the token limit is {d.limit}: it can never be " \
                      "allowed; lower max_tokens"
        await answer(429, headers, _error(429, _TOKENS if tokens else _REQUESTS, message, "rate_limit_exceeded"))

    async def _stream(self, answer: _Answer, receive: Receive, hold: AsyncHold, keys: tuple[str, str],
                      chat: dict[str, Any]) -> None:
        """The stream, its usage asked for (``stream_options.include_usage``: the last chunk carries it;
        forwarded only when the caller asked too). Each chunk's text counted and reported (``hold.add``,
        a running total from the prompt's rough count); ``add`` saying the budget is gone ends the stream
        with an error event; the usage settles it (or the running count, when none came). An upstream
        error before the stream started gives the hold back. A caller that goes away mid-stream (its
        ``http.disconnect``) ends the upstream call, and the hold is left unsettled: the scope's exit
        applies its abandon policy (CHARGE, the default: max(estimate, the running count), nothing the
        upstream billed goes back)."""
        given = chat.get("stream_options")
        options: dict[str, Any] = given if isinstance(given, dict) else {}
        wanted = bool(options.get("include_usage"))
        upstream_chat = {**chat, "stream_options": {**options, "include_usage": True}}
        running = prompt_tokens(chat)
        usage: int | None = None
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            async with self.upstream.stream("POST", PATH, json=upstream_chat) as reply:
                if not reply.is_success:
                    content = await reply.aread()
                    await hold.cancel()
                    content_type = reply.headers.get("content-type", "application/json").encode()
                    return await answer(reply.status_code, await self._headers(keys, hold, (b"content-type", content_type)),
                                        content)
                await answer.start(200, await self._headers(keys, hold, _SSE, (b"cache-control", b"no-cache")))
                async for data in _until(gone, _events(reply.aiter_lines())):
                    chunk = _json(data.encode()) if data != "[DONE]" else None
                    if isinstance(chunk, dict):
                        if _total(chunk) is not None:
                            usage = _total(chunk)
                            if not wanted and not chunk.get("choices"):
                                continue  # the usage chunk the caller did not ask for
                        text = "".join(_text((c.get("delta") or {}).get("content"))
                                       for c in chunk.get("choices") or () if isinstance(c, dict))
                        if text:
                            running += rough_tokens(text)
                            if usage is None and await hold.add(running):
                                await answer.body(f"data: {json.dumps(_cut(running))}\n\n".encode())
                                break
                    await answer.body(f"data: {data}\n\n".encode())
        except _CallerGone:
            return  # unsettled: the hold's scope applies its abandon policy (nothing billed goes back)
        except httpx.HTTPError as e:
            if not answer.started:
                await hold.cancel()  # no stream: nothing was used
                return await answer(502, await self._headers(keys, hold, _JSON),
                                    _error(502, "server_error", f"the upstream did not answer: {e}"))
        finally:
            gone.cancel()
        await hold.settle(usage if usage is not None else running)
        if answer.started:
            await answer.body(b"", more=False)


def _cut(running: int) -> dict[str, Any]:
    return {"error": {"message": f"token budget exceeded mid-stream after about {running} tokens: the stream was "
                                 "cut", "type": _TOKENS, "param": None, "code": "rate_limit_exceeded"}}


class _CallerGone(Exception):
    """The caller went away mid-stream."""


async def _until(gone: asyncio.Future[Any], items: AsyncIterator[str]) -> AsyncIterator[str]:
    """`items`, each raced against `gone`: `_CallerGone` once the caller went away (the item awaited
    then, an upstream read, cancelled)."""
    it = items.__aiter__()
    while True:
        item: asyncio.Future[Any] = asyncio.ensure_future(it.__anext__())
        await asyncio.wait({item, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not item.done():
            item.cancel()
            raise _CallerGone
        try:
            value = item.result()
        except StopAsyncIteration:
            return
        yield value


async def _disconnected(receive: Receive) -> None:
    """Until the caller goes away (the request's body was read: what comes next is its disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The data of each server-sent event (one ``data:`` line each, as OpenAI's streams write them)."""
    async for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return None


def _total(body: Any) -> int | None:
    """``usage.total_tokens`` of a response or a chunk, when it is a whole number >= 0."""
    usage = body.get("usage") if isinstance(body, dict) else None
    total = usage.get("total_tokens") if isinstance(usage, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) and total >= 0 else None


class _Answer:
    """The response, as one message (``await answer(status, headers, body)``) or streamed."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        await self.start(status, headers)
        await self.body(body, more=False)

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.started = True
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def body(self, body: bytes, more: bool = True) -> None:
        await self._send({"type": "http.response.body", "body": body, "more_body": more})


class FakeUpstream:
    """Stands for the model (an ASGI app, for demos and tests): an OpenAI-style chat completion whose
    usage counts the prompt's words (+ 3 a message: its own tokenizer, not the gateway's estimate) and
    `words` words of reply, one a token, at most ``max_tokens``; streamed (``stream: true``) a word a
    chunk, the usage in a last chunk when ``stream_options.include_usage`` asks. The model ``fail``
    answers 500; the model ``hang`` streams its words, then nothing until its caller goes away (`gone`
    is set then). `calls` counts the requests it answered."""

    def __init__(self, words: int = 12) -> None:
        self.words = words
        self.calls = 0
        self.gone = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.calls += 1
        answer = _Answer(send)
        chat = _json(await _read(receive) or b"")
        if not isinstance(chat, dict):
            return await answer(400, [_JSON], _error(400, "invalid_request_error", "not JSON"))
        if chat.get("model") == "fail":
            return await answer(500, [_JSON], _error(500, "server_error", "the model failed"))
        prompt = sum(3 + len(_text(m.get("content")).split()) for m in chat.get("messages") or ())
        most = chat.get("max_completion_tokens") or chat.get("max_tokens")
        words = [f"word{i}" for i in range(min(self.words, most or self.words))]
        usage = {"prompt_tokens": prompt, "completion_tokens": len(words), "total_tokens": prompt + len(words)}
        head = {"id": f"chatcmpl-fake-{self.calls}", "created": 0, "model": chat.get("model")}
        if not chat.get("stream"):
            message = {"role": "assistant", "content": " ".join(words)}
            body = {**head, "object": "chat.completion", "usage": usage,
                    "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}
            return await answer(200, [_JSON], json.dumps(body).encode())
        await answer.start(200, [_SSE])
        head["object"] = "chat.completion.chunk"
        for i, word in enumerate(words):
            delta = {"content": (" " if i else "") + word}
            await answer.body(f"data: {json.dumps({**head, 'choices': [{'index': 0, 'delta': delta}]})}\n\n".encode())
        done = {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        await answer.body(f"data: {json.dumps(done)}\n\n".encode())
        if chat.get("model") == "hang":
            while (await receive())["type"] != "http.disconnect":
                pass
            self.gone.set()
            return
        if (chat.get("stream_options") or {}).get("include_usage"):
            await answer.body(f"data: {json.dumps({**head, 'choices': [], 'usage': usage})}\n\n".encode())
        await answer.body(b"data: [DONE]\n\n", more=False)


async def _demo() -> None:  # pragma: no cover: python -m redis_ratelimit.contrib.openai_gateway
    import os
    import secrets

    import redis.asyncio

    from ..failure_policy import FailurePolicy
    from ..policy import FixedWindow

    limiter = AsyncLimiter(redis.asyncio.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")),
                           FailurePolicy.closed())
    upstream = httpx.AsyncClient(transport=httpx.ASGITransport(app=FakeUpstream()), base_url="http://model")
    app = OpenAIGateway(limiter, upstream, requests=FixedWindow(limit=5, window=60),
                        tokens=FixedWindow(limit=1_000, window=60))
    api_key = f"sk-demo-{secrets.token_hex(6)}"  # whole budgets each run
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client:
        for i, max_tokens in enumerate([250, 250, 900, 5_000, 100], 1):
            r = await client.post(PATH, headers={"authorization": f"Bearer {api_key}"}, json={
                "model": "fake", "max_tokens": max_tokens, "messages": [{"role": "user", "content": "Say hello."}]})
            body = r.json()
            what = f"used {body['usage']['total_tokens']} tokens" if "usage" in body else f"refused ({body['error']['type']})"
            left = {unit: r.headers.get(NAMES[unit]["remaining"]) for unit in UNITS}
            print(f"request {i} (max_tokens {max_tokens}): {r.status_code}, {what}; requests left {left[_REQUESTS]}, "
                  f"tokens left {left[_TOKENS]} of {r.headers.get(NAMES[_TOKENS]['limit'])}")


if __name__ == "__main__":  # pragma: no cover
    asyncio.run(_demo())
