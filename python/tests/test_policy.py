"""Policies are validated when built, with the module's rules, naming the kind and the field; their
parameters are written as the commands take them. The property test holds the two to each other: a
policy Python accepts is one the module accepts, and one Python refuses the module refuses, for the
same field."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from redis_ratelimit import (Concurrency, FixedWindow, Policy, PolicyError, SlidingCounter, SlidingLog,
                             TokenBucket)
from servers import Server

REFUSED: list[tuple[Callable[[], Policy], str, str]] = [
    (lambda: TokenBucket(capacity=0, per_second=5.0), "token_bucket", "capacity"),
    (lambda: TokenBucket(capacity=10, per_second=0.0), "token_bucket", "rate"),
    (lambda: TokenBucket(capacity=10, per_second=-1.0), "token_bucket", "rate"),
    (lambda: TokenBucket(capacity=10, per_second=float("nan")), "token_bucket", "rate"),
    (lambda: TokenBucket(capacity=10, per_second=float("inf")), "token_bucket", "rate"),
    (lambda: TokenBucket(capacity=10, per_second=2e9), "token_bucket", "rate"),
    (lambda: TokenBucket(capacity=2**64 - 1, per_second=1.0), "token_bucket", "capacity"),
    (lambda: TokenBucket(capacity=2**64, per_second=1.0), "token_bucket", "capacity"),
    (lambda: TokenBucket(capacity=1.5, per_second=1.0), "token_bucket", "capacity"),  # type: ignore[arg-type]
    (lambda: FixedWindow(limit=0, window=1), "fixed_window", "limit"),
    (lambda: FixedWindow(limit=5, window=0.0005), "fixed_window", "window"),
    (lambda: SlidingLog(limit=2_000_000, window=1), "sliding_log", "limit"),
    (lambda: SlidingCounter(limit=5, window=0), "sliding_counter", "window"),
    (lambda: SlidingCounter(limit=5, window=0.0015), "sliding_counter", "window"),
    (lambda: SlidingCounter(limit=5, window=4e9), "sliding_counter", "window"),
    (lambda: SlidingCounter(limit=True, window=1), "sliding_counter", "limit"),  # a bool is no count
    (lambda: Concurrency(limit=0, lease=1), "concurrency", "limit"),
    (lambda: Concurrency(limit=100_001, lease=1), "concurrency", "limit"),
    (lambda: Concurrency(limit=5, lease=0.0015), "concurrency", "lease"),
]


@pytest.mark.parametrize("build,kind,field", REFUSED)
def test_invalid_policies_are_refused_naming_kind_and_field(build: Callable[[], Policy], kind: str,
                                                            field: str) -> None:
    with pytest.raises(PolicyError) as refused:
        build()
    assert (refused.value.kind, refused.value.field) == (kind, field)
    assert str(refused.value).startswith(f"{kind}: invalid {field}: ")


def test_the_message_is_the_modules() -> None:
    with pytest.raises(PolicyError, match=r"^token_bucket: invalid capacity: must be a whole number >= 1$"):
        TokenBucket(capacity=0, per_second=5.0)


def test_parameters_are_written_as_the_commands_take_them() -> None:
    assert TokenBucket(10, 5.0).params == ("10", "5")
    assert TokenBucket(100, 0.5).params == ("100", "0.5")
    assert TokenBucket(10, 1e-7).params == ("10", "0.0000001")
    assert FixedWindow(5, 1.5).params == ("5", "1.500")
    assert SlidingLog(5, 60).params == ("5", "60.000")
    assert SlidingCounter(5, timedelta(milliseconds=100)).params == ("5", "0.100")
    assert Concurrency(5, 30.0).params == ("5", "30.000")


def test_limit_and_period() -> None:
    bucket = TokenBucket(10, 5.0)
    assert (bucket.limit, bucket.period) == (10, 2.0)
    assert (SlidingLog(5, 900).limit, SlidingLog(5, 900).period) == (5, 900.0)
    assert (Concurrency(5, 1.5).limit, Concurrency(5, 1.5).period) == (5, 1.5)
    assert {k.KIND.name for k in (TokenBucket, SlidingLog, FixedWindow, SlidingCounter, Concurrency)} == {
        "token_bucket", "sliding_log", "fixed_window", "sliding_counter", "concurrency"}


def test_policies_are_values() -> None:
    assert TokenBucket(10, 5.0) == TokenBucket(10, 5.0)
    assert len({FixedWindow(5, 1), FixedWindow(5, 1.0), FixedWindow(6, 1)}) == 2
    with pytest.raises(AttributeError):
        TokenBucket(10, 5.0).capacity = 11  # type: ignore[misc]


def _module_field(server: Server, command: list[Any]) -> str | None:
    """None when the module accepts the parameters (a peek: cost 0), else the field it names."""
    with server.client() as r:
        try:
            r.execute_command(*command)
        except Exception as e:  # the module's error reply: "invalid <field>: ..."
            text = str(e)
            assert text.startswith("invalid "), text
            return text.split()[1].rstrip(":")
    return None


rates = st.one_of(st.floats(min_value=-1.0, max_value=3e9), st.floats(min_value=1e-12, max_value=1e-3),
                  st.integers(min_value=-5, max_value=2_000_000_000))
windows = st.one_of(st.floats(min_value=-1.0, max_value=4e9), st.integers(min_value=0, max_value=4_000_000_000),
                    st.integers(min_value=1, max_value=100_000).map(lambda ms: ms / 1000),
                    st.integers(min_value=1, max_value=100_000).map(lambda us: us / 1_000_000))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(capacity=st.integers(min_value=0, max_value=2**64 - 1), rate=rates)
def test_token_buckets_are_valid_exactly_when_the_module_says(module_server: Server, capacity: int,
                                                              rate: float) -> None:
    try:
        policy = TokenBucket(capacity, rate)
    except PolicyError as e:
        ours: str | None = e.field
        # Refused before it could be written: send the number as Python writes it.
        params = [str(capacity), repr(rate) if isinstance(rate, float) else str(rate)]
    else:
        ours = None
        params = list(policy.params)
    if ours != "rate" or rate == rate and abs(rate) != float("inf"):
        assert ours == _module_field(module_server, ["RL.TOKEN", "rl:p", *params, 0])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from([FixedWindow, SlidingCounter, SlidingLog, Concurrency]),
       limit=st.integers(min_value=0, max_value=3_000_000), window=windows)
@example(kind=FixedWindow, limit=5, window=1.7229995727539062)  # not whole ms: 6 places would round it
def test_windows_are_valid_exactly_when_the_module_says(module_server: Server, kind: Any, limit: int,
                                                        window: float) -> None:
    try:
        policy = kind(limit, window)
    except PolicyError as e:
        # The module reads the length only as text: a length Python refuses is sent in full digits.
        ours: str | None = e.field
        # (repr's shortest digits, without an exponent: format(window, "f") would round to 6 places)
        params = [str(limit), format(Decimal(repr(window)), "f") if isinstance(window, float) else str(window)]
    else:
        ours = None
        params = list(policy.params)
    # A request of each kind (a peek where the kind has one), on a key of its own.
    request = {"concurrency": ["holder"], "sliding_log": ["req"]}.get(kind.KIND.name, [0])
    command = [kind.KIND.command, f"rl:{kind.KIND.name}", *params, *request]
    assert ours == _module_field(module_server, command)
