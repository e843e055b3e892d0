"""What permits and waits share: a raw request, sent through the limiter's breaker (``guarded``,
``guarded_async``), and a reply read as a Decision."""

from __future__ import annotations

from typing import Any, NamedTuple

from .decision import Decision
from .errors import CallError

__all__ = ["Request", "guarded", "guarded_async", "decision_of"]


class Request(NamedTuple):
    """``RL.X keys args``, as ``Limiter.call`` takes it."""

    command: str
    keys: list[str]
    args: list[Any]


def guarded(limiter: Any, request: Request) -> Any:
    """``limiter.call(...)`` (the engine, the deadline, the breaker), raising CallError."""
    return limiter.call(request.command, request.keys, request.args)


async def guarded_async(limiter: Any, request: Request) -> Any:
    """``guarded`` on an AsyncLimiter."""
    return await limiter.call(request.command, request.keys, request.args)


def decision_of(reply: Any) -> Decision:
    """An RL.* reply as a Decision (ReplyError, a CallError, when it is none)."""
    return Decision.from_reply(reply)
