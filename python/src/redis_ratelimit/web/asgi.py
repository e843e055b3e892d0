"""The ASGI middleware: pure ASGI (not Starlette's `BaseHTTPMiddleware`, which buffers responses and
breaks streaming), for Starlette, FastAPI or any ASGI app. The Rust tower layer's behaviour
(`client/src/http/`): plan the request, check it against Redis, answer a denial by itself, or let it
through and add the `RateLimit-*` fields to the response when it starts; a request's concurrency slots
are held until its response body has been sent (or the app gave up). A WebSocket connection is checked
when it opens: denied, it gets the 429 (where the server supports the denial-response extension) or a
close before the handshake (a 403); allowed, the fields ride on its accept, and its slots are held
while it is open.

    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, config=RateLimitConfig(limiter, routes=[...]))
    # or, to put the fields on the 500s of unhandled errors too: app = RateLimitMiddleware(app, config)
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, MutableMapping

from .check import Denied, Served, enforce
from .config import CONFIG_SCOPE, RateLimitConfig, record
from .denial import Denial
from .plan import Allowlisted, Refused, plan
from .response import RATELIMIT_LIMIT, RETRY_AFTER, Answer, add_headers, forbidden, put

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_BODY_END = ("http.response.body", "http.response.pathsend")


class RateLimitMiddleware:
    """Rate limits for an ASGI app, as `config` says (a `RateLimitConfig`, checked when made)."""

    def __init__(self, app: ASGIApp, config: RateLimitConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            return await self.app(scope, receive, send)
        scope[CONFIG_SCOPE] = self.config  # what a FastAPI dependency inside inherits (fastapi.py)
        step = plan(self.config, scope)
        if step is None:
            return await self.app(scope, receive, send)
        if isinstance(step, Allowlisted):
            record(self.config, step.route_name, step.route_name, "allowlisted")
            return await self.app(scope, receive, send)
        if isinstance(step, Refused):
            record(self.config, step.route_name, step.route_name, "denylisted")
            return await _answer(forbidden(), None, scope, receive, send)
        verdict = await enforce(self.config, step)
        if isinstance(verdict, Denied):
            return await self._deny(verdict.denial, scope, receive, send)
        if kind == "websocket":
            return await self._websocket(verdict, scope, receive, send)
        return await self._serve(verdict, scope, receive, send)

    async def _serve(self, served: Served, scope: Scope, receive: Receive, send: Send) -> None:
        headers, permits = served.headers, served.permits
        if headers is None and not permits:
            return await self.app(scope, receive, send)

        async def decorate(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start" and headers is not None:
                fields = list(message.get("headers") or ())
                # A response that describes its own limit (a FastAPI dependency's) keeps its fields.
                if not any(k.lower() == RATELIMIT_LIMIT for k, _ in fields):
                    headers.add_to(fields)
                    message = dict(message)
                    message["headers"] = fields
            await send(message)
            # Sent: the slot is free before the connection is (kept alive, it may idle for long).
            if permits and kind in _BODY_END and not message.get("more_body", False):
                await served.release()

        try:
            await self.app(scope, receive, decorate)
        finally:
            await served.release()

    async def _websocket(self, served: Served, scope: Scope, receive: Receive, send: Send) -> None:
        headers = served.headers

        async def decorate(message: Message) -> None:
            if message["type"] == "websocket.accept" and headers is not None:
                message = dict(message)
                fields = list(message.get("headers") or ())
                headers.add_to(fields)
                message["headers"] = fields
            await send(message)

        try:
            await self.app(scope, receive, decorate if headers is not None else send)
        finally:
            await served.release()

    async def _deny(self, denial: Denial, scope: Scope, receive: Receive, send: Send) -> None:
        hook = self.config.on_denial
        if hook is None:
            return await _answer(denial.default_response(), None, scope, receive, send)
        return await _answer(hook(denial), denial, scope, receive, send)


async def _answer(app: ASGIApp | Answer, denial: Denial | None, scope: Scope, receive: Receive, send: Send) -> None:
    """Sends the middleware's own answer (or the application's, with the rate limit headers and, when
    it has none and waiting helps, `Retry-After`). A WebSocket gets it as the denial response where
    the server supports that extension, else a close before the handshake (a 403)."""

    async def with_fields(message: Message) -> None:
        if denial is not None and message["type"] in ("http.response.start", "websocket.http.response.start"):
            message = dict(message)
            fields = list(message.get("headers") or ())
            add_headers(fields, denial.decision, denial.described(), denial.structured)
            secs = denial.retry_after_secs()
            if secs is not None and not any(k.lower() == RETRY_AFTER for k, _ in fields):
                put(fields, RETRY_AFTER, str(secs).encode())
            message["headers"] = fields
        await send(message)

    if scope["type"] == "http":
        return await app(scope, receive, with_fields)
    first = await receive()
    if first.get("type") != "websocket.connect":
        return
    if "websocket.http.response" not in (scope.get("extensions") or {}):
        return await send({"type": "websocket.close", "code": 1008})

    async def as_denial_response(message: Message) -> None:
        kind = message["type"]
        if kind.startswith("http.response."):
            message = dict(message)
            message["type"] = "websocket." + kind
        await with_fields(message)

    return await app(scope, receive, as_denial_response)
