"""Token budgets for the LiteLLM proxy (``pip install redis-ratelimit-client[litellm]``): a
`CustomLogger` that holds each request's estimate before the call (prompt tokens + ``max_tokens``, or
`default_max_tokens`) and settles the usage LiteLLM reports after it (``usage.total_tokens``, also at
a stream's end). On the proxy, a stream reports its running count as it goes (its prompt's tokens +
the chunks' so far: ``hold.add``) and is cut, settled at that count, once its budget is gone. A denied
request is refused with `TokenBudgetExceeded` (HTTP 429 with ``Retry-After`` on the proxy).

    # custom_callbacks.py, next to the proxy's config.yaml
    budget = TokenBudget(AsyncLimiter(redis.asyncio.Redis(), FailurePolicy.open()),
                         FixedWindow(limit=100_000, window=60))
    # config.yaml
    litellm_settings:
      callbacks: custom_callbacks.budget

What ends a hold, billing-safe (tokens the upstream billed are never given back):

- the proxy's success hook or the success event: settled at the response's ``usage.total_tokens``;
- the failure event (the upstream call failed: nothing was billed): cancelled, every held token back;
- the proxy's failure hook (a later hook refused the request, the client went away, ...): settled at
  the response's usage when it is known (the success hook saw it), else the hold's abandon policy is
  applied now, as when a hold's scope is left unsettled (CHARGE, the default: max(estimate, the count
  reported); RETURN: the count reported). An upstream error there is left to the failure event.
- none of them (a call that never reached a hook): once the hold's `ttl` has passed, the next request
  drops it from the calls under way and applies its abandon policy (the server would at its ttl too),
  so the map of calls under way stays bounded.

The limit's key is the caller's API key only: ``rl:{user:<api key>}:tpm``, the key escaped or hashed as
the package's caller keys are (`redis_ratelimit.web.caller`: a ``{`` or ``}`` escaped, a long key
hashed), never the request body's ``user`` (a caller could pick a fresh budget per request). Requests
without an API key share one budget, ``rl:{unknown}:tpm``. `key_of` picks another key.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import litellm
from litellm.integrations.custom_logger import CustomLogger

from ..aio import AsyncLimiter
from ..contract import HTTP
from ..hold import DEFAULT_TTL, AsyncHold
from ..policy import Policy
from ..web.caller import Caller, caller_tag

__all__ = ["TokenBudget", "TokenBudgetExceeded", "default_key"]

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


def default_key(user_api_key_dict: Any, data: Mapping[str, Any], prefix: str = "rl") -> str:
    """The caller's token limit: ``rl:{user:<api key>}:tpm`` (the key escaped or hashed as every caller
    key is: `redis_ratelimit.web.caller`), or ``rl:{unknown}:tpm``, one budget shared by every request
    without an API key. The request body (its ``user``) is never read: the caller writes it."""
    api_key = getattr(user_api_key_dict, "api_key", None)
    caller = Caller.principal(str(api_key)) if api_key else Caller.unknown()
    return f"{caller_tag(prefix, caller)}:tpm"


class TokenBudget(CustomLogger):
    """Holds before each call and settles after it, on `limiter`'s `policy` (a token bucket, fixed
    window or sliding counter of tokens)."""

    def __init__(self, limiter: AsyncLimiter, policy: Policy, *, default_max_tokens: int = 1024,
                 key_of: Callable[[Any, Mapping[str, Any]], str] = default_key, ttl: float = DEFAULT_TTL) -> None:
        super().__init__()
        self.limiter = limiter
        self.policy = policy
        self.default_max_tokens = default_max_tokens
        self.key_of = key_of
        self.ttl = ttl
        #: The calls under way, by hold id: each hold and when its ttl ends (`_clock`), in that order.
        self._holds: dict[str, tuple[AsyncHold, float]] = {}
        self._clock: Callable[[], float] = time.monotonic

    def estimate(self, data: Mapping[str, Any]) -> int:
        """The tokens a request may use: its prompt's (LiteLLM's count) + ``max_tokens`` (or the default)."""
        prompt = litellm.token_counter(model=data.get("model", ""), messages=data.get("messages") or [])
        most = data.get("max_tokens") or data.get("max_completion_tokens") or self.default_max_tokens
        return int(prompt) + int(most)

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict[str, Any],
                                  call_type: Any) -> dict[str, Any]:
        await self._drop_expired()
        key = self.key_of(user_api_key_dict, data)
        hold = await self.limiter.hold([(key, self.policy, self.estimate(data))], ttl=self.ttl)
        if not hold:
            raise TokenBudgetExceeded(hold.decision.retry_after_secs())
        if hold.holds:
            self._holds[hold.id] = (hold, self._clock() + self.ttl)
            data.setdefault("metadata", {})[HOLD_ID] = hold.id
        return data

    async def _drop_expired(self) -> None:
        """Drops the calls under way whose hold's ttl has passed (no hook ended them), applying each
        one's abandon policy (CHARGE: its estimate stays charged): `_holds` stays bounded by the calls
        one ttl admits. The map is in the order holds were taken, all with one ttl: the oldest first."""
        now = self._clock()
        while self._holds:
            hold_id, (hold, ends) = next(iter(self._holds.items()))
            if ends > now:
                return
            del self._holds[hold_id]
            await hold.__aexit__(None, None, None)

    def _hold_of(self, kwargs: Mapping[str, Any]) -> AsyncHold | None:
        """The hold of a logged call (its metadata names it), no longer under way."""
        params = kwargs.get("litellm_params") or {}
        return self._pop(params.get("metadata") or kwargs.get("metadata"))

    def _pop(self, metadata: Mapping[str, Any] | None) -> AsyncHold | None:
        hold_id = (metadata or {}).get(HOLD_ID)
        entry = None if hold_id is None else self._holds.pop(hold_id, None)
        return None if entry is None else entry[0]

    async def async_post_call_streaming_iterator_hook(self, user_api_key_dict: Any, response: Any,
                                                      request_data: dict[str, Any]) -> AsyncGenerator[Any, None]:
        """The proxy's stream, chunk by chunk: the running count (the prompt's tokens + each chunk's
        text, LiteLLM's counts) reported with ``hold.add``; when it says the budget is gone, the stream
        ends there and the hold is settled at that count (the model's usage is never seen)."""
        hold_id = (request_data.get("metadata") or {}).get(HOLD_ID)
        entry = None if hold_id is None else self._holds.get(hold_id)
        hold = None if entry is None else entry[0]
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
        if hold is not None:
            await self._settle(hold, response_obj)

    async def async_post_call_success_hook(self, data: dict[str, Any], user_api_key_dict: Any, response: Any) -> Any:
        """The proxy's answer, before it is sent: the upstream answered (and billed), so its usage
        settles the hold now, before a later hook could refuse the request (a response without usage,
        a stream, is left to the success event)."""
        if getattr(getattr(response, "usage", None), "total_tokens", None) is not None:
            hold = self._pop(data.get("metadata"))
            if hold is not None:
                await self._settle(hold, response)
        return response

    async def _settle(self, hold: AsyncHold, response: Any) -> None:
        """Settled at the response's ``usage.total_tokens``; none reported: the hold's abandon policy
        (CHARGE: it stays charged as held)."""
        total = getattr(getattr(response, "usage", None), "total_tokens", None)
        if total is None:
            await hold.__aexit__(None, None, None)
        else:
            await hold.settle(int(total))

    async def async_log_failure_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        """The upstream call failed: nothing was billed, every held token back."""
        hold = self._hold_of(kwargs)
        if hold is not None:
            await hold.cancel()

    async def async_post_call_failure_hook(self, request_data: dict[str, Any], original_exception: Exception,
                                           user_api_key_dict: Any, traceback_str: str | None = None) -> None:
        """The proxy's failed request. An upstream error is left to the failure event (which cancels).
        Anything else (a later hook's refusal, the client gone) may come after the upstream answered and
        billed: the success hook settled it at its usage when it saw the response; else the hold's abandon
        policy is applied now (CHARGE: max(estimate, the count reported)), never a refund."""
        if _upstream_error(original_exception):
            return
        hold = self._pop(request_data.get("metadata"))
        if hold is not None:
            await hold.__aexit__(None, None, None)


def _upstream_error(e: BaseException) -> bool:
    """An error of the upstream call (LiteLLM's exceptions are the OpenAI SDK's), which LiteLLM logs as
    a failure event."""
    try:
        import openai
    except ImportError:  # pragma: no cover: litellm brings openai
        return False
    return isinstance(e, openai.APIError)
