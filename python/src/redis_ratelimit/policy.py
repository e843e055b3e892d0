"""Limiter policies: which algorithm, with which parameters. Each policy is validated when built with
the module's own rules (ratelimit-core's grammar: `core/src/args.rs` and each kind's file), so a policy
is valid exactly when the module would accept its parameters, and an invalid one names the kind and the
field in the module's words: ``TokenBucket(capacity=0, per_second=5)`` raises
``PolicyError("token_bucket: invalid capacity: must be a whole number >= 1")``.

Times are seconds (float, int or `datetime.timedelta`) in whole milliseconds, as the commands take them.
Each kind is declared once, in its `KIND` (its names, its request's form, whether it takes refunds);
the command builder reads that declaration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import ClassVar, Literal, Union

from .contract import BATCH_ERRORS, BATCHING, BOUNDS, ERRORS, param_error
from .contract import kind as contract_kind
from .errors import PolicyError

__all__ = ["Kind", "Policy", "TokenBucket", "SlidingLog", "FixedWindow", "SlidingCounter", "Concurrency", "Seconds"]

Seconds = Union[float, int, timedelta]

NS_PER_SEC = 1_000_000_000
# The bounds and the error texts are the contract's (contract/contract.json, from core).
MAX_HORIZON_SECS: int = BOUNDS["max_horizon_secs"]  # a refill, window or lease at most this long
MAX_HORIZON_NS = MAX_HORIZON_SECS * NS_PER_SEC
MAX_RATE_PER_SEC: int = BOUNDS["max_rate_per_sec"]
MAX_LOG_LIMIT: int = BOUNDS["max_log_limit"]
MAX_LEASE_LIMIT: int = BOUNDS["max_lease_limit"]
U64_MAX: int = BOUNDS["max_whole"]
MAX_DIGITS: int = BOUNDS["max_decimal_digits"]
MAX_FRACTION_DIGITS: int = BOUNDS["max_decimal_exponent"] + MAX_DIGITS

WHOLE_1 = param_error("fixed_window", "limit")
WINDOW = param_error("fixed_window", "window")
TOO_LARGE: str = ERRORS["too_large"]
DEFAULT_LEASE_NS: int = BATCHING["lease_ms"] * 1_000_000
DEFAULT_LEASE: float = DEFAULT_LEASE_NS / NS_PER_SEC
OUT_OF_RANGE: str = ERRORS["out_of_range"]


@dataclass(frozen=True)
class Kind:
    """A limiter kind's declaration: its name, its RL.ALL / RL.REFUND group, its command, how its
    request is written (``cost``; ``id``: a sliding log's request id; ``lease``: a concurrency
    permit's holder and weight), whether units can be given back, and its state's `owner`."""

    name: str
    group: str
    command: str
    request: Literal["cost", "id", "lease"]
    refunds: bool
    owner: str  # the kind whose state it decides on (what the web layers end a limit's key with)
    peeks: bool  # whether RL.INSPECT can read its state without recording a request

    @staticmethod
    def of(name: str) -> Kind:
        """The contract's declaration of the kind `name`."""
        k = contract_kind(name)
        return Kind(k["name"], k["group"], k["command"], k["request"], k["refunds"], k["owner"], k["peeks"])


@dataclass(frozen=True)
class _Batching:
    """The batch option of every policy (docs/high-volume.md): ``batch``, the most units one call
    takes for this instance to spend locally (1 to the limit; None: one call per check), held at most
    ``lease`` seconds (the kinds that take refunds have a ``lease``; a concurrency limit's ``lease`` is
    its permits'). Refused by the kinds that take no refunds."""

    batch: int | None = field(default=None, kw_only=True)


class Policy(_Batching):
    """One limit's algorithm and parameters. ``params`` are its two parameters as its command takes
    them after the key; ``limit`` is what ``RateLimit-Limit`` says; ``period`` the time in seconds the
    limit is measured over (a window, a lease, or a bucket's full refill: the draft's ``w``), and
    ``period_ns`` the same in whole ns; ``lease_ns`` the batch's lease in ns."""

    KIND: ClassVar[Kind]
    limit: int
    params: tuple[str, str]
    period: float
    period_ns: int
    lease_ns: int

    @property
    def kind(self) -> Kind:
        return self.KIND

    def _set(self, params: tuple[str, str], period_ns: int, limit: int) -> None:
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "period", period_ns / NS_PER_SEC)
        object.__setattr__(self, "period_ns", period_ns)
        self._check_batch(limit)

    def _check_batch(self, limit: int) -> None:
        """Refuses a batch option this policy cannot take: on a kind without refunds, out of 1 to the
        limit, or with a lease that is no length > 0."""
        kind = self.KIND
        if self.batch is not None:
            if not kind.refunds:
                raise PolicyError(kind.name, "batch", BATCH_ERRORS["kind"].format(kind=kind.name))
            _whole(kind, "batch", self.batch, 1, limit, BATCH_ERRORS["batch"])
        lease = getattr(self, "lease", DEFAULT_LEASE) if kind.refunds else DEFAULT_LEASE
        if lease == DEFAULT_LEASE:  # the common case, without the Decimal arithmetic
            object.__setattr__(self, "lease_ns", DEFAULT_LEASE_NS)
            return
        ms = _milliseconds(kind, "lease", lease, BATCH_ERRORS["lease"])
        object.__setattr__(self, "lease_ns", ms * 1_000_000)


def _whole(kind: Kind, name: str, value: object, low: int, high: int, expected: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise PolicyError(kind.name, name, expected)
    if value > U64_MAX:
        raise PolicyError(kind.name, name, TOO_LARGE)
    if value > high:
        raise PolicyError(kind.name, name, expected)
    return value


def _decimal(value: object) -> Decimal | None:
    """The number as written: a float's shortest decimal (what Rust's `{}` prints), an int exactly."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _text(number: Decimal) -> str:
    """Plain decimal digits, no exponent, no trailing zeros (`5`, `0.5`, `0.0000001`)."""
    text = format(number, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _out_of_range(text: str) -> bool:
    """What core's decimal parser refuses as out of range: more than 36 significant digits, or an
    exponent beyond 96 (core/src/decimal.rs)."""
    whole, _, fraction = text.partition(".")
    fraction = fraction.rstrip("0")
    return len((whole + fraction).lstrip("0")) > MAX_DIGITS or len(fraction) > MAX_FRACTION_DIGITS


def _milliseconds(kind: Kind, name: str, value: object, expected: str) -> int:
    """A length in seconds as whole milliseconds within the horizon."""
    if isinstance(value, timedelta):
        value = Decimal(value.days * 86400 + value.seconds) + Decimal(value.microseconds) / 1_000_000
        ms = value * 1000
    else:
        number = _decimal(value)
        if number is None:
            raise PolicyError(kind.name, name, expected)
        ms = number * 1000
    if ms != ms.to_integral_value() or not 0 < ms <= MAX_HORIZON_SECS * 1000:
        raise PolicyError(kind.name, name, expected)
    return int(ms)


def _seconds_text(ms: int) -> str:
    """As the commands write lengths: `1.500`."""
    return f"{ms // 1000}.{ms % 1000:03d}"


@dataclass(frozen=True)
class TokenBucket(Policy):
    """RL.TOKEN: bursts of up to ``capacity``, ``per_second`` tokens per second on average."""

    KIND: ClassVar[Kind] = Kind.of("token_bucket")
    capacity: int
    per_second: float
    lease: Seconds = field(default=DEFAULT_LEASE, kw_only=True)
    limit: int = field(init=False, repr=False, compare=False)
    params: tuple[str, str] = field(init=False, repr=False, compare=False)
    period: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kind = self.KIND
        capacity = _whole(kind, "capacity", self.capacity, 1, U64_MAX, param_error(kind.name, "capacity"))
        rate = _decimal(self.per_second)
        if rate is None or rate <= 0:
            raise PolicyError(kind.name, "rate", param_error(kind.name, "rate"))
        if _out_of_range(_text(rate)):
            raise PolicyError(kind.name, "rate", OUT_OF_RANGE)
        exact_rate = Fraction(rate)
        if math.ceil(exact_rate) > MAX_RATE_PER_SEC:
            raise PolicyError(kind.name, "rate", param_error(kind.name, "rate", 1))
        too_long = PolicyError(kind.name, "capacity", param_error(kind.name, "capacity", 1))
        # core/src/token_bucket.rs: the emission interval and a full refill, in ns, rounded up.
        interval = math.ceil(NS_PER_SEC / exact_rate)
        exact = math.ceil(capacity * NS_PER_SEC / exact_rate)
        tau = interval * capacity
        if tau > MAX_HORIZON_NS or interval == 0:
            raise too_long
        slack = min(tau - min(exact, tau), interval - 1)
        object.__setattr__(self, "limit", capacity)
        self._set((str(capacity), _text(rate)), tau - slack, capacity)


@dataclass(frozen=True)
class _Windowed(Policy):
    LIMIT_RANGE: ClassVar[tuple[int, str]] = (U64_MAX, WHOLE_1)
    limit: int
    window: Seconds
    lease: Seconds = field(default=DEFAULT_LEASE, kw_only=True)
    params: tuple[str, str] = field(init=False, repr=False, compare=False)
    period: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        high, expected = self.LIMIT_RANGE
        limit = _whole(self.KIND, "limit", self.limit, 1, high, expected)
        ms = _milliseconds(self.KIND, "window", self.window, WINDOW)
        self._set((str(limit), _seconds_text(ms)), ms * 1_000_000, limit)


@dataclass(frozen=True)
class SlidingLog(_Windowed):
    """RL.SLIDE: the exact sliding window, at most ``limit`` requests in any ``window`` seconds
    (memory grows with the limit: at most 1,000,000). Counts requests: its cost is always 1."""

    KIND: ClassVar[Kind] = Kind.of("sliding_log")
    LIMIT_RANGE: ClassVar[tuple[int, str]] = (MAX_LOG_LIMIT, param_error("sliding_log", "limit"))


@dataclass(frozen=True)
class FixedWindow(_Windowed):
    """RL.FIXED: ``limit`` units per ``window`` seconds; a window starts at the key's first request."""

    KIND: ClassVar[Kind] = Kind.of("fixed_window")


@dataclass(frozen=True)
class SlidingCounter(_Windowed):
    """RL.SLIDECOUNT: the sliding window counter, O(1) memory, within 2x of the limit in the worst case."""

    KIND: ClassVar[Kind] = Kind.of("sliding_counter")


@dataclass(frozen=True)
class Concurrency(Policy):
    """RL.ACQUIRE: at most ``limit`` (1 to 100,000) weight of work in flight, each permit held on a
    lease of ``lease`` seconds that its holder renews while it lives. Taken with ``acquire``, never
    with ``check`` (it has to be released)."""

    KIND: ClassVar[Kind] = Kind.of("concurrency")
    limit: int
    lease: Seconds
    params: tuple[str, str] = field(init=False, repr=False, compare=False)
    period: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kind = self.KIND
        expected = param_error(kind.name, "limit")
        # In core's order: a whole limit, the lease, then the limit's range.
        limit = _whole(kind, "limit", self.limit, 1, U64_MAX, expected)
        lease = param_error(kind.name, "lease")
        ms = _milliseconds(kind, "lease", self.lease, lease)
        if limit > MAX_LEASE_LIMIT:
            raise PolicyError(kind.name, "limit", expected)
        self._set((str(limit), _seconds_text(ms)), ms * 1_000_000, limit)
