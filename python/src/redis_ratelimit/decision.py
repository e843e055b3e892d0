"""What a limiter says about one request: the five fields of every RL.* reply, typed, plus whether the
answer came from Redis or from the failure policy. As `client/src/decision.rs`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import ReplyError

__all__ = ["Decision", "Taken", "Inspection"]


@dataclass(frozen=True)
class Decision:
    """The outcome of a check.

    - ``limit``: the capacity or limit (``RateLimit-Limit``); ``remaining``: units left after this
      request (``RateLimit-Remaining``).
    - ``retry_after``: seconds; 0 when allowed; when denied, how long until the same request would be
      allowed (whole milliseconds, rounded up); None when it costs more than the limit and never fits.
    - ``reset_after``: seconds until the limiter is back to its initial state (bucket full, window empty).
    - ``limiting``: in a multi-limit check, the 0-based position of the limit this decision describes.
    - ``degraded``: Redis did not decide (unreachable, too slow, breaker open): the failure policy did.
    - ``local``: decided in this process without a round trip (docs/high-volume.md): the pre-check
      repeating Redis' denial, or units this instance took from Redis in a batch.
    """

    allowed: bool
    limit: int
    remaining: int
    retry_after: float | None
    reset_after: float
    limiting: int = 0
    degraded: bool = False
    local: bool = False

    @property
    def never_fits(self) -> bool:
        """True when the request can never be allowed with this policy (its cost is above the limit)."""
        return not self.allowed and self.retry_after is None

    def retry_after_secs(self) -> int | None:
        """``Retry-After`` in whole seconds: rounded up, at least 1. None when allowed or never fits."""
        if self.allowed or self.retry_after is None:
            return None
        return max(1, _ceil_secs(self.retry_after))

    def reset_after_secs(self) -> int:
        """``RateLimit-Reset`` in whole seconds, rounded up."""
        return _ceil_secs(self.reset_after)

    @staticmethod
    def from_reply(reply: Any) -> Decision:
        """Reads an RL.* reply: ``[allowed, limit, remaining, retry_after_ms, reset_after_ms (, position)]``."""
        fields = _integers(reply)
        if len(fields) < 5:
            raise ReplyError(f"not a decision: {reply!r}")
        allowed, limit, remaining, retry_ms, reset_ms = fields[:5]
        return Decision(
            allowed=allowed == 1,
            limit=limit,
            remaining=remaining,
            retry_after=retry_ms / 1000 if retry_ms >= 0 else None,
            reset_after=max(0, reset_ms) / 1000,
            limiting=max(0, fields[5] - 1) if len(fields) > 5 else 0,
        )


@dataclass(frozen=True)
class Taken:
    """What a partial grant (RL.TAKE) took: the bucket after it, and the number of tokens taken."""

    decision: Decision
    taken: int

    @staticmethod
    def from_reply(reply: Any) -> Taken:
        fields = _integers(reply)
        if len(fields) < 6:
            raise ReplyError(f"not a partial grant: {reply!r}")
        return Taken(Decision.from_reply(fields[:5]), max(0, fields[5]))


@dataclass(frozen=True)
class Inspection:
    """What a limiter key holds (RL.INSPECT, read-only). ``exists`` is False when the key does not
    exist (a full bucket, an empty window). With the policy, ``remaining`` (units available now),
    ``retry_after`` (seconds until one is; 0: now) and ``reset_after``; ``fields`` has every integer
    field the module reports (``ttl_ms``, ``tat_ms``, ``count``, ...)."""

    exists: bool
    limiter: str | None = None
    remaining: int | None = None
    retry_after: float | None = None
    reset_after: float | None = None
    fields: Mapping[str, int] = field(default_factory=dict)

    @staticmethod
    def from_reply(reply: Any) -> Inspection:
        if reply is None:
            return Inspection(exists=False)
        pairs = _pairs(reply)
        limiter = _text(pairs.pop("limiter", b""))
        ints = {k: int(v) for k, v in pairs.items() if isinstance(v, int)}
        retry = ints.get("retry_after_ms")
        reset = ints.get("reset_after_ms")
        return Inspection(
            exists=True,
            limiter=limiter,
            remaining=ints.get("remaining"),
            retry_after=None if retry is None or retry < 0 else retry / 1000,
            reset_after=None if reset is None else reset / 1000,
            fields=ints,
        )


def _ceil_secs(seconds: float) -> int:
    # Decisions carry whole milliseconds: round to them first so 0.2 s reads as 1, 2.0 s as 2.
    return math.ceil(round(seconds * 1000) / 1000)


def _integers(reply: Any) -> list[int]:
    if not isinstance(reply, (list, tuple)) or not all(isinstance(v, int) for v in reply):
        raise ReplyError(f"not a list of integers: {reply!r}")
    return [int(v) for v in reply]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(reply: Any) -> dict[str, Any]:
    """Field/value pairs from a RESP2 flat array or a RESP3 map."""
    if isinstance(reply, dict):
        return {_text(k): v for k, v in reply.items()}
    if isinstance(reply, (list, tuple)) and len(reply) % 2 == 0:
        return {_text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}
    raise ReplyError(f"not field/value pairs: {reply!r}")
