"""Rate limits for web applications: a pure ASGI middleware (`RateLimitMiddleware`, for Starlette,
FastAPI or any ASGI app) and a FastAPI dependency (`redis_ratelimit.web.fastapi.RateLimit`), with
the Rust layer's keys, headers and answers, so a Rust service and a Python service limit one caller
in one bucket.

    from redis_ratelimit.web import RateLimitConfig, RateLimitMiddleware, Route
"""

from .access import Access, AccessLists
from .asgi import RateLimitMiddleware
from .caller import MAX_CALLER_KEY_BYTES, Caller, caller_from_header, caller_tag, set_principal, set_tenant
from .config import GLOBAL, ConfigError, RateLimitConfig, Route
from .denial import Denial, DenialKind
from .forwarded import MAX_HOPS, TrustedProxies
from .llm import add_llm_headers, llm_headers
from .response import (
    CONCURRENCY_LIMITED,
    COST_EXCEEDS_LIMIT,
    DENIED,
    MISCONFIGURED,
    RATE_LIMITED,
    UNAVAILABLE,
    Answer,
)

__all__ = [
    "Access",
    "AccessLists",
    "Answer",
    "Caller",
    "ConfigError",
    "Denial",
    "DenialKind",
    "GLOBAL",
    "MAX_CALLER_KEY_BYTES",
    "MAX_HOPS",
    "RateLimitConfig",
    "RateLimitMiddleware",
    "Route",
    "TrustedProxies",
    "add_llm_headers",
    "llm_headers",
    "caller_from_header",
    "caller_tag",
    "set_principal",
    "set_tenant",
    "CONCURRENCY_LIMITED",
    "COST_EXCEEDS_LIMIT",
    "DENIED",
    "MISCONFIGURED",
    "RATE_LIMITED",
    "UNAVAILABLE",
]
