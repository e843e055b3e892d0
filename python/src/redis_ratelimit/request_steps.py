"""What permits and waits share: a raw request sent through ``Limiter.call`` (the engine, the deadline,
the breaker), and steps (generators yielding requests, receiving replies) run by a sync or an async
driver, so the logic is written once."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, NamedTuple, TypeVar

from .decision import Decision
from .engine import Arg, key_positions

__all__ = ["Request", "Steps", "guarded", "guarded_async", "run_steps", "run_steps_async", "decision_of"]

T = TypeVar("T")


class Request(NamedTuple):
    """``RL.X keys args``, as ``Limiter.call`` takes it."""

    command: str
    keys: list[Any]
    args: list[Any]

    @staticmethod
    def of(command: Sequence[Arg]) -> Request:
        """A module command (``command.py``'s form: name, then arguments with the keys among them)."""
        name, rest = str(command[0]), list(command[1:])
        at = set(key_positions(name.upper(), rest))
        keys = [w for i, w in enumerate(rest) if i in at]
        return Request(name, keys, [w for i, w in enumerate(rest) if i not in at])


Steps = Generator[Request, Any, T]


def guarded(limiter: Any, request: Request) -> Any:
    """``limiter.call(...)`` (the engine, the deadline, the breaker), raising CallError."""
    return limiter.call(request.command, request.keys, request.args)


async def guarded_async(limiter: Any, request: Request) -> Any:
    """``guarded`` on an AsyncLimiter."""
    return await limiter.call(request.command, request.keys, request.args)


def run_steps(limiter: Any, steps: Steps[T]) -> T:
    """Sends each request of `steps` and returns what they return; a CallError ends them."""
    try:
        request = next(steps)
        while True:
            request = steps.send(guarded(limiter, request))
    except StopIteration as done:
        result: T = done.value
        return result


async def run_steps_async(limiter: Any, steps: Steps[T]) -> T:
    """``run_steps`` on an AsyncLimiter."""
    try:
        request = next(steps)
        while True:
            request = steps.send(await guarded_async(limiter, request))
    except StopIteration as done:
        result: T = done.value
        return result


def decision_of(reply: Any) -> Decision:
    """An RL.* reply as a Decision (ReplyError, a CallError, when it is none)."""
    return Decision.from_reply(reply)
