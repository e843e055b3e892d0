"""Token budgets for the LiteLLM proxy (``pip install redis-ratelimit-client[litellm]``): a
`CustomLogger` that holds each request's estimate before the call (prompt tokens + ``max_tokens``, or
`default_max_tokens`) and settles the usage LiteLLM reports after it (``usage.total_tokens``, also at
a stream's end); a failed call gives its hold back. On the proxy, a stream reports its running count
as it goes (its prompt's tokens + the chunks' so far: ``hold.add``) and is cut, settled at that count,
once its budget is gone. A denied request is refused with
`TokenBudgetExceeded` (HTTP 429 with ``Retry-After`` on the proxy).

    # custom_callbacks.py, next to the proxy's config.yaml
    budget = TokenBudget(AsyncLimiter(redis.asyncio.Redis(), FailurePolicy.open()),
                         FixedWindow(limit=100_000, window=60))
    # config.yaml
    litellm_settings:
      callbacks: custom_callbacks.budget

The limit's key is ``rl:{<api key>}:tpm`` by default (`key_of` picks another); the hold lives `ttl`
seconds, so a worker that dies mid-call leaves it to its abandon policy.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import litellm
from litellm.integrations.custom_logger import CustomLogger

from ..aio import AsyncLimiter
from ..contract import HTTP
from ..hold import DEFAULT_TTL, AsyncHold
from ..policy import Policy

__all__ = ["TokenBudget", "TokenBudgetExceeded"]

#: Where the hold's id travels from the pre-call hook to the events: the request's metadata.
HOLD_ID = "redis_ratelimit_hold"

try:  # on the proxy: an HTTP error it answers with
    from fastapi import HTTPException as _Refusal
except ImportError:  # pragma: no cover: the proxy brings fastapi
    _Refusal = Exception  # type: ignore[misc,assignment]


class TokenBudgetExceeded(_Refusal):
    """A request the token budget denied: status 429, ``Retry-After`` the hold's decision."""

    def __init__(self, retry_after: int | None) -> None:
        headers = {HTTP["headers"]["retry_after"]: str(retry_after)} if retry_after is not None else {}
        detail = "token budget exceeded" if retry_after is not None else "the request's estimate exceeds the budget"
        if _Refusal is Exception:
            Exception.__init__(self, detail)
        else:
            super().__init__(status_code=429, detail=detail, headers=headers)
        self.retry_after = retry_after


def _default_key(user_api_key_dict: Any, data: Mapping[str, Any]) -> str:
    api_key = getattr(user_api_key_dict, "api_key", None) or data.get("user") or "anonymous"
    return f"rl:{{{api_key}}}:tpm"


class TokenBudget(CustomLogger):
    """Holds before each call and settles after it, on `limiter`'s `policy` (a token bucket, fixed
    window or sliding counter of tokens)."""

    def __init__(self, limiter: AsyncLimiter, policy: Policy, *, default_max_tokens: int = 1024,
                 key_of: Callable[[Any, Mapping[str, Any]], str] = _default_key, ttl: float = DEFAULT_TTL) -> None:
        super().__init__()
        self.limiter = limiter
        self.policy = policy
        self.default_max_tokens = default_max_tokens
        self.key_of = key_of
        self.ttl = ttl
        self._holds: dict[str, AsyncHold] = {}  # the calls under way, by hold id

    def estimate(self, data: Mapping[str, Any]) -> int:
        """The tokens a request may use: its prompt's (LiteLLM's count) + ``max_tokens`` (or the default)."""
        prompt = litellm.token_counter(model=data.get("model", ""), messages=data.get("messages") or [])
        most = data.get("max_tokens") or data.get("max_completion_tokens") or self.default_max_tokens
        return int(prompt) + int(most)

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict[str, Any],
                                  call_type: Any) -> dict[str, Any]:
        key = self.key_of(user_api_key_dict, data)
        hold = await self.limiter.hold([(key, self.policy, self.estimate(data))], ttl=self.ttl)
        if not hold:
            raise TokenBudgetExceeded(hold.decision.retry_after_secs())
        if hold.holds:
            self._holds[hold.id] = hold
            data.setdefault("metadata", {})[HOLD_ID] = hold.id
        return data

    def _hold_of(self, kwargs: Mapping[str, Any]) -> AsyncHold | None:
        """The hold of a logged call (its metadata names it), no longer under way."""
        params = kwargs.get("litellm_params") or {}
        return self._pop(params.get("metadata") or kwargs.get("metadata"))

    def _pop(self, metadata: Mapping[str, Any] | None) -> AsyncHold | None:
        hold_id = (metadata or {}).get(HOLD_ID)
        return None if hold_id is None else self._holds.pop(hold_id, None)

    async def async_post_call_streaming_iterator_hook(self, user_api_key_dict: Any, response: Any,
                                                      request_data: dict[str, Any]) -> AsyncGenerator[Any, None]:
        """The proxy's stream, chunk by chunk: the running count (the prompt's tokens + each chunk's
        text, LiteLLM's counts) reported with ``hold.add``; when it says the budget is gone, the stream
        ends there and the hold is settled at that count (the model's usage is never seen)."""
        hold_id = (request_data.get("metadata") or {}).get(HOLD_ID)
        hold = None if hold_id is None else self._holds.get(hold_id)
        model = request_data.get("model", "")
        running = None
        async for chunk in response:
            if hold is not None:
                text = "".join(getattr(getattr(c, "delta", None), "content", None) or ""
                               for c in getattr(chunk, "choices", None) or ())
                if text:
                    if running is None:
                        running = int(litellm.token_counter(model=model, messages=request_data.get("messages") or []))
                    running += int(litellm.token_counter(model=model, text=text, count_response_tokens=True))
                    if await hold.add(running):
                        self._holds.pop(hold.id, None)
                        await hold.settle(running)
                        close = getattr(response, "aclose", None)
                        if close is not None:
                            await close()
                        return
            yield chunk

    async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        hold = self._hold_of(kwargs)
        if hold is None:
            return
        usage = getattr(response_obj, "usage", None)
        total = getattr(usage, "total_tokens", None)
        if total is None:  # no usage reported: it stays charged as held
            return
        await hold.settle(int(total))

    async def async_log_failure_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        hold = self._hold_of(kwargs)
        if hold is not None:
            await hold.cancel()

    async def async_post_call_failure_hook(self, request_data: dict[str, Any], original_exception: Exception,
                                           user_api_key_dict: Any, traceback_str: str | None = None) -> None:
        """The proxy's failed request (also one a later hook refused, which logs no failure event): its
        hold given back."""
        hold = self._pop(request_data.get("metadata"))
        if hold is not None:
            await hold.cancel()
