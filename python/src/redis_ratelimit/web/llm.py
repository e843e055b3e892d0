"""The rate limit headers LLM clients read (OpenAI's, which LiteLLM and the SDKs' retry logic read):
``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``, the reset in Go's duration form (``850ms``,
``1.5s``, ``6m0s``), and beside them the IETF draft's ``RateLimit-Policy`` and ``RateLimit`` fields with a
policy per unit. For a gateway in front of an LLM: one budget for its request limit, one for its token
budget (a hold's). Every name and rule is the contract's (``http.llm``); the Rust reference is
``client/src/http/llm.rs``.

    tokens = budget_of_inspection(await limiter.peek(tokens_key, tpm), tpm)
    headers = llm_headers(budget_of(decision, rpm), tokens)
    # [("x-ratelimit-limit-requests", "60"), ..., ("ratelimit-policy", '"requests";q=60;w=60, ...'), ...]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..contract import HTTP, fill
from ..decision import Decision, Inspection
from ..policy import Policy
from .policies import window_secs
from .response import RATELIMIT, RATELIMIT_POLICY, RawHeaders, put

__all__ = ["Budget", "UNITS", "FIELDS", "NAMES", "llm_duration", "llm_headers", "add_llm_headers", "budget_of",
           "budget_of_inspection"]

_LLM = HTTP["llm"]
_STRUCTURED = HTTP["structured"]
#: The units (``requests``, ``tokens``) and each unit's fields (``limit``, ``remaining``, ``reset``).
UNITS: tuple[str, ...] = tuple(_LLM["units"])
FIELDS: tuple[str, ...] = tuple(_LLM["fields"])
if len(UNITS) != 2 or len(FIELDS) != 3:  # pragma: no cover: a contract this module cannot render
    raise ImportError("the contract's http.llm is not two units of three fields")
#: NAMES[unit][field]: each header's name (``x-ratelimit-remaining-tokens``).
NAMES: dict[str, dict[str, str]] = {u: {f: fill(_LLM["name"], field=f, unit=u) for f in FIELDS} for u in UNITS}


@dataclass(frozen=True)
class Budget:
    """One unit's state: its limit, what is left, milliseconds until it is whole again, and its window
    in whole seconds (``RateLimit-Policy``'s ``w``)."""

    limit: int
    remaining: int
    reset_ms: int
    window_secs: int


def _ms(seconds: float | None) -> int:
    return 0 if seconds is None else max(0, math.ceil(round(seconds * 1000, 6)))


def budget_of(decision: Decision, policy: Policy) -> Budget:
    """The budget a decision of `policy` describes (a check's, a hold's or a settle's reply)."""
    return Budget(decision.limit, decision.remaining, _ms(decision.reset_after), window_secs(policy))


def budget_of_inspection(inspection: Inspection, policy: Policy) -> Budget:
    """The budget a ``limiter.peek(key, policy)`` read: a key that does not exist is a whole budget."""
    if not inspection.exists:
        return Budget(policy.limit, policy.limit, 0, window_secs(policy))
    remaining = policy.limit if inspection.remaining is None else min(inspection.remaining, policy.limit)
    return Budget(policy.limit, remaining, _ms(inspection.reset_after), window_secs(policy))


def llm_duration(ms: int) -> str:
    """A duration as these headers write it (OpenAI's, Go's form): ``0s``, ``850ms``, ``1s``, ``1.5s``,
    ``6m0s``, ``1h2m3.4s``; from a minute on, seconds with up to three decimals."""
    ms = max(0, int(ms))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    h, m, rest = ms // 3_600_000, ms // 60_000 % 60, ms % 60_000
    s = str(rest // 1000) if rest % 1000 == 0 else f"{rest // 1000}.{rest % 1000:03d}".rstrip("0")
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"


def llm_headers(requests: Optional[Budget], tokens: Optional[Budget]) -> list[tuple[str, str]]:
    """The headers of the units given (None leaves a unit out), in the contract's order: the three of
    each unit (requests, then tokens), then ``RateLimit-Policy`` and ``RateLimit`` listing each unit's
    policy, named by its unit. Empty when neither is given."""
    out: list[tuple[str, str]] = []
    policies: list[str] = []
    states: list[str] = []
    for unit, b in zip(UNITS, (requests, tokens)):
        if b is None:
            continue
        reset_ms = max(0, b.reset_ms)
        values = (str(b.limit), str(b.remaining), llm_duration(reset_ms))
        out += [(NAMES[unit][f], v) for f, v in zip(FIELDS, values)]
        policies.append(fill(_STRUCTURED["policy"], name=unit, limit=b.limit, window_secs=b.window_secs))
        states.append(fill(_STRUCTURED["state"], name=unit, remaining=b.remaining, reset_secs=-(-reset_ms // 1000)))
    if policies:
        out += [(RATELIMIT_POLICY.decode(), ", ".join(policies)), (RATELIMIT.decode(), ", ".join(states))]
    return out


def add_llm_headers(headers: RawHeaders, requests: Optional[Budget], tokens: Optional[Budget]) -> None:
    """Sets `llm_headers` on an ASGI response's raw headers, each replacing what was there under its name."""
    for name, value in llm_headers(requests, tokens):
        put(headers, name.encode(), value.encode())
