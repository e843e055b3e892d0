"""The LiteLLM integration (contrib/litellm.py) on a module server, with LiteLLM's own mock responses
(no upstream): each request holds its estimate in the pre-call hook, settles its usage on success,
gives its hold back on failure; the tokens admitted in a window never pass the limit."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace
from typing import Any

import pytest
import redis.asyncio

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the price list
litellm = pytest.importorskip("litellm", reason="litellm is not installed (pip install redis-ratelimit-client[litellm])")

from conftest import Servers  # noqa: E402
from redis_ratelimit import AsyncLimiter, FailurePolicy, FixedWindow  # noqa: E402
from redis_ratelimit.contrib.litellm import TokenBudget, TokenBudgetExceeded, default_key  # noqa: E402
from servers import HOST, LONG_DEADLINE, aclose  # noqa: E402

TPM = FixedWindow(limit=400, window=60)


@pytest.fixture(autouse=True)
def fresh_callbacks() -> Any:
    """LiteLLM keeps the callbacks it has seen in its own lists (one per type): each test starts anew."""
    litellm.logging_callback_manager._reset_all_callbacks()
    yield
    litellm.callbacks = []
    litellm.logging_callback_manager._reset_all_callbacks()


class Key:
    api_key = "sk-test"


KEY = "rl:{user:sk-test}:tpm"


async def settled(budget: TokenBudget) -> None:
    """LiteLLM logs in the background: until every hold is settled (or a long while passed)."""
    for _ in range(1000):
        if not budget._holds:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the holds were never settled")


async def call(budget: TokenBudget, reply: Any, max_tokens: int = 60, stream: bool = False) -> Any:
    data: dict[str, Any] = {"model": "gpt-3.5-turbo", "max_tokens": max_tokens,
                            "messages": [{"role": "user", "content": "Say hello in a few words."}]}
    data = await budget.async_pre_call_hook(Key(), None, data, "completion")
    try:
        response = await litellm.acompletion(**data, mock_response=reply, stream=stream)
    except Exception as e:
        return e
    if not stream:
        return response
    return [chunk async for chunk in response]


def test_admitted_tokens_stay_within_the_limit_and_unused_ones_come_back(servers: Servers) -> None:
    server = servers.redis(module=True)

    async def run() -> None:
        client = redis.asyncio.Redis(host=HOST, port=server.port)
        limiter = AsyncLimiter(client, FailurePolicy.closed(), deadline=LONG_DEADLINE)
        budget = TokenBudget(limiter, TPM)
        litellm.callbacks = [budget]
        try:
            estimate = budget.estimate({"model": "gpt-3.5-turbo", "max_tokens": 60,
                                        "messages": [{"role": "user", "content": "Say hello in a few words."}]})
            used = 0
            for _ in range(40):
                try:
                    response = await call(budget, "Hello there, friend!")
                except TokenBudgetExceeded as denied:
                    assert denied.retry_after is not None and denied.retry_after >= 1
                    break
                await settled(budget)
                used += response.usage.total_tokens
                assert response.usage.total_tokens < estimate, "max_tokens covers the usage"
                left = (await limiter.peek(KEY, TPM)).remaining
                assert left == TPM.limit - used, "the unused part of each estimate came back"
            else:
                raise AssertionError("never denied")
            assert used <= TPM.limit and used > TPM.limit - estimate, "admitted up to the limit, never past it"
            # A failed call gives its hold back.
            await limiter.refund(KEY, TPM, TPM.limit)
            before = (await limiter.peek(KEY, TPM)).remaining
            failed = await call(budget, litellm.exceptions.InternalServerError("boom", "openai", "gpt-3.5-turbo"))
            assert isinstance(failed, Exception)
            await settled(budget)
            assert (await limiter.peek(KEY, TPM)).remaining == before
        finally:
            litellm.callbacks = []
            await aclose(client)

    asyncio.run(run())


def test_a_stream_settles_at_its_end(servers: Servers) -> None:
    server = servers.redis(module=True)

    async def run() -> None:
        client = redis.asyncio.Redis(host=HOST, port=server.port)
        limiter = AsyncLimiter(client, FailurePolicy.closed(), deadline=LONG_DEADLINE)
        budget = TokenBudget(limiter, TPM)
        seen: list[int] = []

        class Usage(litellm.integrations.custom_logger.CustomLogger):  # type: ignore[misc]
            async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any,
                                              end_time: Any) -> None:
                seen.append(response_obj.usage.total_tokens)

        litellm.callbacks = [budget, Usage()]
        try:
            chunks = await call(budget, "Hello there, my friend, how are you today?", stream=True)
            assert len(chunks) > 1
            await settled(budget)
            for _ in range(1000):
                if seen:
                    break
                await asyncio.sleep(0.01)
            assert seen and seen[0] > 0
            assert (await limiter.peek(KEY, TPM)).remaining == TPM.limit - seen[0], "settled at the stream's usage"
        finally:
            litellm.callbacks = []
            await aclose(client)

    asyncio.run(run())


def test_a_request_refused_after_the_upstream_answered_refunds_nothing(servers: Servers) -> None:
    """The proxy's failure hook (a later hook refused the request, the client went away): the usage
    settles it when the success hook saw the response; else the abandon policy (CHARGE) keeps the
    estimate charged. An upstream error there is left to the failure event."""
    server = servers.redis(module=True)

    async def run() -> None:
        client = redis.asyncio.Redis(host=HOST, port=server.port)
        limiter = AsyncLimiter(client, FailurePolicy.closed(), deadline=LONG_DEADLINE)
        budget = TokenBudget(limiter, TPM, default_max_tokens=100)

        async def held() -> tuple[dict[str, Any], int]:
            before = (await limiter.peek(KEY, TPM)).remaining
            before = TPM.limit if before is None else before  # no key yet: the whole limit
            data = await budget.async_pre_call_hook(Key(), None, {"model": "gpt-3.5-turbo", "messages": []}, "completion")
            return data, before - (await limiter.peek(KEY, TPM)).remaining

        try:
            data, estimate = await held()
            assert estimate >= 100, "no max_tokens: the default held"
            await budget.async_post_call_failure_hook(data, RuntimeError("refused by a later hook"), Key())
            assert (await limiter.peek(KEY, TPM)).remaining == TPM.limit - estimate, "the estimate stays charged"
            assert not budget._holds
            # The success hook saw the response: settled at its usage, the later refusal changes nothing.
            data, estimate = await held()
            response = SimpleNamespace(usage=SimpleNamespace(total_tokens=42))
            assert await budget.async_post_call_success_hook(data, Key(), response) is response
            await budget.async_post_call_failure_hook(data, RuntimeError("refused by a later hook"), Key())
            assert (await limiter.peek(KEY, TPM)).remaining == TPM.limit - estimate - 42
            # An upstream error: left to the failure event, which gives everything back.
            left = (await limiter.peek(KEY, TPM)).remaining
            data, estimate = await held()
            failed = litellm.exceptions.InternalServerError("boom", "openai", "gpt-3.5-turbo")
            await budget.async_post_call_failure_hook(data, failed, Key())
            assert len(budget._holds) == 1
            await budget.async_log_failure_event({"litellm_params": {"metadata": data["metadata"]}}, None, None, None)
            assert (await limiter.peek(KEY, TPM)).remaining == left and not budget._holds
        finally:
            await aclose(client)

    asyncio.run(run())


def test_calls_no_hook_ended_are_dropped_once_their_ttl_passed(servers: Servers) -> None:
    """A call that never reaches a success or failure hook: once its hold's ttl has passed (a clock the
    test moves), the next request drops it, its abandon policy applied (CHARGE: the estimate stays)."""
    server = servers.redis(module=True)

    async def run() -> None:
        client = redis.asyncio.Redis(host=HOST, port=server.port)
        limiter = AsyncLimiter(client, FailurePolicy.closed(), deadline=LONG_DEADLINE)
        budget = TokenBudget(limiter, FixedWindow(limit=10_000, window=60), default_max_tokens=10, ttl=60)
        now = [0.0]
        budget._clock = lambda: now[0]
        data = {"model": "gpt-3.5-turbo", "messages": []}
        try:
            first = [(await budget.async_pre_call_hook(Key(), None, dict(data), "completion"))["metadata"]
                     for _ in range(5)]
            assert len(budget._holds) == 5
            now[0] = 30.0
            later = await budget.async_pre_call_hook(Key(), None, dict(data), "completion")
            assert len(budget._holds) == 6, "within their ttl, the calls stay under way"
            now[0] = 61.0
            await budget.async_pre_call_hook(Key(), None, dict(data), "completion")
            assert len(budget._holds) == 2 and later["metadata"]["redis_ratelimit_hold"] in budget._holds
            tpm = FixedWindow(limit=10_000, window=60)
            left = (await limiter.peek(KEY, tpm)).remaining
            for metadata in first:  # ended by the drop (a FINAL): a late cancel gives nothing back
                await budget.async_post_call_failure_hook({"metadata": metadata}, RuntimeError("late"), Key())
            assert (await limiter.peek(KEY, tpm)).remaining == left
            assert left == 10_000 - 7 * budget.estimate(data), "every estimate stays charged (CHARGE)"
        finally:
            await aclose(client)

    asyncio.run(run())


def test_the_default_key_is_the_api_key_escaped_never_the_body_s_user() -> None:
    class NoKey:
        api_key = None

    class Braced:
        api_key = "sk-}x{"

    assert default_key(Key(), {"user": "someone"}) == KEY
    assert default_key(NoKey(), {"user": "fresh-budget"}) == default_key(NoKey(), {}) == "rl:{unknown}:tpm"
    assert default_key(Braced(), {}) == "rl:{user.esc:sk-%7Dx%7B}:tpm"
    assert default_key(SimpleNamespace(api_key="k" * 500), {}).startswith("rl:{user.sha256:")


def test_the_proxy_s_stream_is_cut_when_its_budget_is_gone(servers: Servers) -> None:
    """The proxy's streaming iterator hook: each chunk's running count reported (hold.add); a stream far
    past its hold is cut once the budget is gone and settled at that count; a stream within its hold
    passes whole and settles at its usage."""
    server = servers.redis(module=True)
    tpm = FixedWindow(limit=60, window=60)

    async def run() -> None:
        client = redis.asyncio.Redis(host=HOST, port=server.port)
        limiter = AsyncLimiter(client, FailurePolicy.closed(), deadline=LONG_DEADLINE)
        budget = TokenBudget(limiter, tpm)
        litellm.callbacks = [budget]
        try:
            async def streamed(reply: str, max_tokens: int) -> list[Any]:
                data: dict[str, Any] = {"model": "gpt-3.5-turbo", "max_tokens": max_tokens,
                                        "messages": [{"role": "user", "content": "Count."}]}
                data = await budget.async_pre_call_hook(Key(), None, data, "completion")
                response = await litellm.acompletion(**data, mock_response=reply, stream=True)
                return [c async for c in budget.async_post_call_streaming_iterator_hook(Key(), response, data)]

            whole = await streamed("Hello there, friend!", 20)
            assert "".join(c.choices[0].delta.content or "" for c in whole).startswith("Hello there")
            await settled(budget)
            left = (await limiter.peek(KEY, tpm)).remaining
            assert 0 < left < tpm.limit
            long = " ".join(f"w{i}" for i in range(200))
            cut = await streamed(long, 5)
            assert 0 < len(cut) < 100, "cut once the budget was gone, long before the model's end"
            assert not budget._holds, "settled by the hook"
            assert (await limiter.peek(KEY, tpm)).remaining == 0
        finally:
            litellm.callbacks = []
            await aclose(client)

    asyncio.run(run())
