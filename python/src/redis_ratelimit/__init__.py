"""Rate limits on Redis: the redis-ratelimit module's commands, or its Lua library where the module
cannot be loaded (FCALL, or EVALSHA), from asyncio and synchronous code.

    from redis_ratelimit import Limiter, TokenBucket, FailurePolicy
    limiter = Limiter(redis.Redis(), FailurePolicy.open())
    decision = limiter.check("rl:{user:42}:api", TokenBucket(capacity=10, per_second=5.0))
"""

from .aio import AsyncLimiter
from .base import Verified
from .breaker import Breaker
from .command import Limit
from .decision import Decision, Inspection, Taken
from .engine import Backend
from .answers import Counts
from .errors import (BreakerOpenError, CallError, ConfigurationError, ConflictError, DeadlineError, PolicyError,
                     ReplyError, ServerError, UnreachableError, UsageError)
from .reply_class import ReplyClass
from .failure_policy import FailurePolicy
from .hold import AsyncHold, Hold
from .limiter import Limiter
from .permit import AsyncPermit, Permit
from .policy import Concurrency, FixedWindow, Policy, SlidingCounter, SlidingLog, TokenBucket
from .rate import parse_rate, parse_rates

__version__ = "0.1.0"

__all__ = [
    "AsyncHold",
    "AsyncLimiter",
    "AsyncPermit",
    "Backend",
    "Breaker",
    "BreakerOpenError",
    "CallError",
    "Concurrency",
    "ConfigurationError",
    "ConflictError",
    "Counts",
    "DeadlineError",
    "Decision",
    "FailurePolicy",
    "FixedWindow",
    "Hold",
    "Inspection",
    "Limit",
    "Limiter",
    "Permit",
    "Policy",
    "PolicyError",
    "ReplyClass",
    "ReplyError",
    "ServerError",
    "SlidingCounter",
    "SlidingLog",
    "Taken",
    "TokenBucket",
    "UnreachableError",
    "UsageError",
    "Verified",
    "__version__",
    "parse_rate",
    "parse_rates",
]
