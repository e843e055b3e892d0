"""The package's errors: an invalid policy (refused when built), a call that cannot be built (a
programming error), and why Redis gave no answer (a `CallError` per cause). One place turns redis-py's
exceptions into them (`from_redis`)."""

from __future__ import annotations

import redis

__all__ = [
    "PolicyError",
    "UsageError",
    "CallError",
    "DeadlineError",
    "UnreachableError",
    "BreakerOpenError",
    "ServerError",
    "ConfigurationError",
    "ReplyError",
]


class PolicyError(ValueError):
    """A policy that cannot be built; names the kind and the field, in the module's words:
    ``token_bucket: invalid capacity: must be a whole number >= 1``."""

    def __init__(self, kind: str, field: str, reason: str) -> None:
        super().__init__(f"{kind}: invalid {field}: {reason}")
        self.kind = kind
        self.field = field
        self.reason = reason


class UsageError(ValueError):
    """A call that cannot be built whatever Redis says (no limits, a sliding log with a cost other
    than 1, a concurrency limit in a check, a refund of a kind that takes none): raised, never left to
    the failure policy."""


class CallError(Exception):
    """Why Redis gave no decision. A limiter's `check` turns it into the failure policy's degraded
    decision; the `*_strict` methods and `call` raise it."""


class DeadlineError(CallError):
    """No answer within the deadline (connect included)."""

    def __init__(self, deadline: float) -> None:
        super().__init__(f"no answer from Redis within the deadline ({deadline:g} s)")
        self.deadline = deadline


class UnreachableError(CallError):
    """The connection failed: refused, reset, closed."""


class BreakerOpenError(CallError):
    """The circuit breaker is open: Redis is not called until its cool-down ends."""

    def __init__(self) -> None:
        super().__init__("the circuit breaker is open: Redis is not called until the cool-down ends")


class ServerError(CallError):
    """Redis answered with an error reply (``ERR ...``, ``WRONGTYPE ...``)."""


class ConfigurationError(ServerError):
    """Redis answered that the limiter cannot work with it as configured: no engine's command is known
    (module not loaded and FCALL/EVALSHA unknown) or this user may not run it (NOPERM)."""


class ReplyError(CallError):
    """A reply that is not what the command answers."""


def refuses(error: BaseException) -> bool:
    """An error reply saying this engine cannot work for this user here: unknown command, NOPERM."""
    text = str(error)
    return isinstance(error, redis.exceptions.NoPermissionError) or "unknown command" in text or "NOPERM" in text


def from_redis(error: BaseException, deadline: float, timed_out: bool) -> CallError:
    """The `CallError` for an exception a call ended with (`timed_out`: the deadline had passed)."""
    if isinstance(error, CallError):
        return error
    if isinstance(error, redis.exceptions.ResponseError):  # Redis answered, whenever it did
        cls = ConfigurationError if refuses(error) else ServerError
        return cls(str(error))
    if timed_out or isinstance(error, redis.exceptions.TimeoutError):
        return DeadlineError(deadline)
    if isinstance(error, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)):
        return UnreachableError(str(error) or type(error).__name__)
    if isinstance(error, redis.exceptions.RedisError):
        return UnreachableError(f"{type(error).__name__}: {error}")
    raise error
