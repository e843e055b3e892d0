"""The package's errors: an invalid policy (refused when built), a call that cannot be built (a
programming error), and why Redis gave no answer (a `CallError` per cause). One place turns redis-py's
exceptions into them (`from_redis`)."""

from __future__ import annotations

import redis

from .reply_class import ReplyClass, class_of_reply, class_of_transport, reply_text

__all__ = [
    "PolicyError",
    "UsageError",
    "CallError",
    "DeadlineError",
    "UnreachableError",
    "BreakerOpenError",
    "ServerError",
    "ConfigurationError",
    "ConflictError",
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
    """The caller's own mistake: a call that cannot be right whatever Redis holds (a missing or empty
    key, a key twice in one call, a cost that is no whole number in bounds, keys of one call in several
    cluster slots, a sliding log with a cost other than 1, ...), refused before sending where it can be
    known, or so answered by Redis (``ERR invalid ...``, ``CROSSSLOT``). Raised to the caller, never
    left to the failure policy: ``code`` is the error reply's code (``ERR``, ``CROSSSLOT``) and
    ``message`` its text, the same in every language's client."""

    def __init__(self, message: str, code: str = "ERR") -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def of_reply(cls, reply: str) -> UsageError:
        """The error for the error reply `reply` (``CODE text``: its code, the reply whole), or for a
        text of the contract's that names no code (``ERR``, as the module's own refusals)."""
        code = reply.partition(" ")[0]
        return cls(reply, code if code.isupper() and code.isalpha() else "ERR")


class CallError(Exception):
    """Why Redis gave no decision. A limiter's `check` turns it into the failure policy's degraded
    decision; the `*_strict` methods and `call` raise it. ``reply_class`` says which class of answer it
    is (docs/errors.md): an outage, a misconfiguration, a conflicting key."""

    @property
    def reply_class(self) -> ReplyClass:
        return ReplyClass.OUTAGE


class DeadlineError(CallError):
    """No answer within the deadline (connect included): the transport failure ``timeout``."""

    transport = "timeout"

    def __init__(self, deadline: float) -> None:
        super().__init__(f"no answer from Redis within the deadline ({deadline:g} s)")
        self.deadline = deadline

    @property
    def reply_class(self) -> ReplyClass:
        return class_of_transport(self.transport)


class UnreachableError(CallError):
    """The connection failed: ``transport`` says how (``refused``, ``reset``, ``closed``)."""

    def __init__(self, message: str, transport: str = "closed") -> None:
        super().__init__(message)
        self.transport = transport

    @property
    def reply_class(self) -> ReplyClass:
        return class_of_transport(self.transport)


class BreakerOpenError(CallError):
    """The circuit breaker is open: Redis is not called until its cool-down ends."""

    def __init__(self) -> None:
        super().__init__("the circuit breaker is open: Redis is not called until the cool-down ends")


class ServerError(CallError):
    """Redis answered with an error reply (``reply``: ``CODE text`` as the server wrote it; ``code``
    its first word). Its class is the contract's rules' (`reply_class`): `ConfigurationError` and
    `ConflictError` are the misconfigured and conflicting ones; an outage (``LOADING``, ``READONLY``,
    ``MASTERDOWN``, ...) is a plain ServerError."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply
        self.code = reply.partition(" ")[0]

    @property
    def reply_class(self) -> ReplyClass:
        return class_of_reply(self.reply)

    @staticmethod
    def of_reply(reply: str) -> ServerError:
        """The error for `reply`, of its class's type (a usage reply is a ServerError here: the
        limiter raises it as UsageError)."""
        cls = class_of_reply(reply)
        if cls is ReplyClass.MISCONFIGURED:
            return ConfigurationError(reply)
        if cls is ReplyClass.CONFLICT:
            return ConflictError(reply)
        return ServerError(reply)


class ConfigurationError(ServerError):
    """Redis answered that the limiter cannot work with it as configured: no engine's command is known
    (module not loaded and FCALL/EVALSHA unknown), this user may not run it (NOPERM), or a reply no
    rule knows."""

    @property
    def reply_class(self) -> ReplyClass:
        return ReplyClass.MISCONFIGURED


class ConflictError(ServerError):
    """The key holds another limiter's state or another type (a limit whose kind changed under the
    same key, a key named twice by hand): the failure policy decides for it until the key expires or
    is deleted."""

    @property
    def reply_class(self) -> ReplyClass:
        return ReplyClass.CONFLICT


class ReplyError(CallError):
    """A reply that is not what the command answers."""

    @property
    def reply_class(self) -> ReplyClass:
        return ReplyClass.MISCONFIGURED


def from_redis(error: BaseException, deadline: float, timed_out: bool) -> CallError:
    """The `CallError` for an exception a call ended with (`timed_out`: the deadline had passed)."""
    if isinstance(error, CallError):
        return error
    reply = reply_text(error)
    if reply is not None:  # Redis answered, whenever it did (LOADING and NOAUTH too: redis-py raises
        return ServerError.of_reply(reply)  # them as connection errors)
    if timed_out or isinstance(error, (redis.exceptions.TimeoutError, TimeoutError)):
        return DeadlineError(deadline)
    if isinstance(error, (redis.exceptions.ConnectionError, OSError)):
        return UnreachableError(str(error) or type(error).__name__, _transport(error))
    if isinstance(error, redis.exceptions.RedisError):
        return UnreachableError(f"{type(error).__name__}: {error}")
    raise error


def _transport(error: BaseException) -> str:
    """How a connection failed: ``refused``, ``reset`` (by the server, while in use) or ``closed``."""
    seen: BaseException | None = error
    for _ in range(4):  # the error and its causes
        if seen is None:
            break
        if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen).lower():
            return "refused"
        if isinstance(seen, (ConnectionResetError, BrokenPipeError)) or "reset" in str(seen).lower():
            return "reset"
        seen = seen.__cause__ or seen.__context__
    return "closed"
