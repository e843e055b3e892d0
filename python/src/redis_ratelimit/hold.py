"""Token-budget holds (RL.HOLD / RL.SETTLE, docs/commands.md): budgets whose cost is known only after
the work (LLM tokens). ``limiter.hold(limits)`` holds an estimate now, atomically over every limit;
``settle(actual)`` reports the actual later, once: the unused units go back (or an excess is charged)
in the window the hold was taken from.

    with limiter.hold([("rl:{key:42}:tpm", FixedWindow(limit=100_000, window=60), prompt + max_tokens)],
                      exact=[("rl:{key:42}:rpm", FixedWindow(limit=60, window=60), 1)]) as hold:
        if not hold:                       # denied: nothing taken, hold.decision says until when
            return too_many(hold.decision.retry_after)
        reply = call_the_model(max_tokens=max_tokens)
        hold.settle(reply.usage.total_tokens)

``limits`` are held and settled; ``exact`` limits are charged as given and never settled (a request
count, prompt tokens counted before the call). Leaving the block after a `settle` or `cancel` sends
nothing more. Leaving it unsettled (an exception, a cancelled task, a client that went away, or simply
no settle) applies the hold's abandon policy now, as a FINAL (what the server would do when the ttl
ends, done now): under CHARGE (the default) each held limit settles at max(its estimate, the last usage
`add` reported for it): nothing goes back (billing-safe); under RETURN at the last usage `add` reported
(0 when none): the unused part goes back. Exact limits are never named. `cancel()` is the explicit way
to give everything back (the upstream call failed before anything was billed): call it in that error
path. On ``AsyncLimiter``, ``async with limiter.hold(...) as hold`` or ``hold = await
limiter.hold(...)``, the methods awaited; the block's exit is shielded, so a cancelled task still
applies the policy.

When Redis cannot decide the hold, the failure policy does (``hold.local``: open allows, closed
denies, fallback decides in this process); such a hold holds nothing in Redis and its settle does
nothing. A settle that meets an outage is sent again with the same id (a settle counts once) up to
`SETTLE_TRIES` times, then logged once and given up: the hold then ends by its ttl and abandon policy.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, Union

from . import command
from .base import Plan, one_slot
from .command import Arg, Limit
from .contract import HOLDS, hold_call, hold_error
from .decision import Decision
from .errors import CallError, UsageError
from .policy import Concurrency
from .reply_class import ReplyClass

__all__ = ["Hold", "AsyncHold", "HoldMixin", "AsyncHoldMixin", "ledger_of", "DEFAULT_TTL", "SETTLE_TRIES"]

log = logging.getLogger("redis_ratelimit")

#: Seconds a hold lives unless given another ttl (the contract's ``holds.ttl_default_secs``): a long
#: model call, with room to settle.
DEFAULT_TTL = float(HOLDS["ttl_default_secs"])
#: How many times a settle is sent when Redis does not answer (each within the limiter's deadline).
SETTLE_TRIES = 3

_FINAL, _PARTIAL = HOLDS["modes"]  # the settle's words, in its syntax's order
_HELD_KINDS = set(HOLDS["held_kinds"])
Usage = Union[int, Mapping[str, int]]
#: What the hold's steps yield (a command) and receive (its reply, or the CallError it met).
_Steps = Generator[list[Arg], Any, Any]


def ledger_of(key: str) -> str:
    """The contract's ledger for a hold whose first key is `key`: ``rl:holds:{<tag>}`` with its hash
    tag (the text between its first ``{`` and the next ``}``, when not empty), else the whole key."""
    return str(HOLDS["ledger"]).format(tag=_tag(key) or key)


def _tag(key: str) -> str | None:
    """A key's hash tag: the text between its first ``{`` and the next ``}``; None when empty or none."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return key[start + 1:end] if start >= 0 and end > start + 1 else None


class _HoldCore:
    """What a hold holds and sends, without I/O: `Hold` and `AsyncHold` drive its steps."""

    def __init__(self, limiter: Any, limits: Sequence[Limit], exact: Sequence[Limit], id: str | None,
                 ttl: float, abandon: str | None, ledger: str | None) -> None:
        self._limiter = limiter
        held = [(str(key), policy, cost) for key, policy, cost in limits]
        every = held + [(str(key), policy, cost) for key, policy, cost in exact]
        try:
            self.id = secrets.token_hex(16) if id is None else id
            self.ledger = ledger_of(every[0][0]) if ledger is None and every else str(ledger)
            cmd = self._command(every, ttl, abandon)
        except UsageError as e:
            raise limiter._refused(e) from None
        #: The keys settled: the held limits of the kinds the server holds (the contract's held kinds).
        self.keys = [key for key, policy, _ in held if policy.KIND.name in _HELD_KINDS]
        #: Each settled key's estimate (what the abandon policy CHARGE keeps at the scope's exit).
        self._estimates = {key: int(cost) for key, policy, cost in held if policy.KIND.name in _HELD_KINDS}
        self.plan = Plan(cmd, Decision.from_reply, lambda e: limiter.failure.decide(every, e))
        self._decision: Decision | None = None
        self._usage: dict[str, int] = {}  # the last usage add() reported, per key
        self._sent = 0  # how many times the last settle given up was sent
        self._done = False  # settled, cancelled, or given up: the scope's exit sends nothing
        #: The last settle's reply (None: none yet, or no hold of this id in Redis).
        self.settled: Decision | None = None

    def _command(self, every: list[Limit], ttl: float, abandon: str | None) -> list[Arg]:
        if not every:
            raise UsageError("no limits to hold")
        if any(isinstance(policy, Concurrency) for _, policy, _ in every):
            raise UsageError("a concurrency limit is held by a permit (acquire), not a hold")
        if not 1 <= len(self.id.encode()) <= int(HOLDS["max_id_bytes"]):
            raise UsageError.of_reply(hold_error("id"))
        if not 0 < round(ttl * 1000) <= int(HOLDS["max_ttl_secs"]) * 1000:
            raise UsageError.of_reply(hold_error("ttl"))
        self.abandon = str(HOLDS["abandon_default"] if abandon is None else abandon).upper()
        if self.abandon not in HOLDS["abandon"]:
            raise UsageError(f"abandon: one of {', '.join(HOLDS['abandon'])}, not {abandon!r}")
        if _tag(self.ledger) is None:  # each hold's own key shares the ledger's slot by its tag
            raise UsageError.of_reply(hold_error("ledger", "hash tag"))
        if getattr(self._limiter, "_cluster", False):
            one_slot([self.ledger, *(key for key, _, _ in every)])
        return [*hold_call("hold", ledger=self.ledger, id=self.id, ttl=command.seconds(ttl), abandon=self.abandon),
                *command.groups(every)]

    # The decision.

    def _decided(self, decision: Decision) -> None:
        self._decision = decision
        self._done = not self.holds

    @property
    def decision(self) -> Decision:
        """The hold's decision (RL.ALL's: ``allowed``, ``remaining``, ``retry_after``, ...)."""
        assert self._decision is not None
        return self._decision

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    def __bool__(self) -> bool:
        return self.allowed

    @property
    def local(self) -> bool:
        """True when the failure policy decided (Redis did not): nothing is held, settling does nothing."""
        return self.decision.degraded

    @property
    def holds(self) -> bool:
        """True when Redis holds units for it (allowed, not local, a held limit among its limits)."""
        return self.allowed and not self.local and bool(self.keys)

    # The settles, as steps.

    def _pairs(self, units: Usage) -> list[tuple[str, int]]:
        if isinstance(units, Mapping):
            pairs = [(str(key), command.whole("cost", n)) for key, n in units.items()]
            if any(key not in self.keys for key, _ in pairs):
                raise UsageError.of_reply(hold_error("key"))
            return pairs
        return [(key, command.whole("cost", units)) for key in self.keys]

    def _send_steps(self, mode: str, pairs: list[tuple[str, int]], tries: int) -> _Steps:
        """RL.SETTLE with `pairs`, sent up to `tries` times while Redis does not answer: its reply as a
        Decision (None: no hold of this id), or the CallError it gave up on."""
        cmd = hold_call("settle", ledger=self.ledger, id=self.id, mode=mode)
        for key, units in pairs:
            cmd += [key, units]
        answer: Any = None
        for sent in range(1, tries + 1):
            answer = yield cmd
            if not isinstance(answer, CallError):
                return None if answer is None else Decision.from_reply(answer)
            if answer.reply_class is not ReplyClass.OUTAGE:
                break  # Redis answered: sending it again would meet the same answer
        self._sent = sent
        return answer

    def _add_steps(self, usage: Usage) -> _Steps:
        pairs = self._pairs(usage)
        if not self.holds or self._done or not pairs:
            return False
        self._usage.update(pairs)
        answer = yield from self._send_steps(_PARTIAL, pairs, 1)
        if isinstance(answer, CallError):
            log.warning("hold %r: a usage report met %s: the hold keeps what it had", self.id, answer)
            return False
        return answer is not None and not answer.allowed

    def _final_steps(self, units: Usage) -> _Steps:
        """FINAL with `units` (0: a cancel)."""
        pairs = self._pairs(units)
        if not self.holds or not pairs:
            return None
        self._done = True
        answer = yield from self._send_steps(_FINAL, pairs, SETTLE_TRIES)
        if isinstance(answer, CallError):
            log.warning("hold %r: its settle met %s (sent %d times) and was given up: the hold ends by its "
                        "ttl as its abandon policy says", self.id, answer, self._sent)
            return None
        self.settled = answer
        return answer

    @property
    def returns(self) -> bool:
        """True when the abandon policy is RETURN (the contract's second word), else CHARGE."""
        return bool(self.abandon == HOLDS["abandon"][1])

    def _abandoned(self) -> dict[str, int]:
        """What each held limit settles at when the scope is left unsettled: the abandon policy, now.
        RETURN: the last usage add() reported (0 when none); CHARGE: max(that, the estimate)."""
        if self.returns:
            return {key: self._usage.get(key, 0) for key in self.keys}
        return {key: max(self._usage.get(key, 0), self._estimates[key]) for key in self.keys}

    def _exit_steps(self) -> _Steps:
        """The scope's exit: nothing after a settle or cancel (or on a hold that holds nothing), else
        the abandon policy applied now (`_abandoned`), as a FINAL."""
        if self._done:
            return None
        return (yield from self._final_steps(self._abandoned()))


class Hold(_HoldCore):
    """A hold on a `Limiter`, for ``with``: see the module's text."""

    def add(self, usage: Usage) -> bool:
        """Reports the usage so far (a running total: an int for every held limit, or per key), PARTIAL:
        usage past the hold is charged as it comes. True when the stream should stop: past its hold,
        a limit has nothing left. Does nothing on a hold that holds nothing (denied, local, settled)."""
        return bool(self._drive(self._add_steps(usage)))

    def settle(self, actual: Usage) -> Decision | None:
        """Settles the hold with the actual usage (an int for every held limit, or per key), FINAL,
        once: the unused units go back, an excess is charged. The reply (None: nothing held, no hold
        of this id any more, or given up on an outage: logged). Safe to call again."""
        result: Decision | None = self._drive(self._final_steps(actual))
        return result

    def cancel(self) -> Decision | None:
        """Gives every held unit back (FINAL with 0)."""
        return self.settle(0)

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Leaves the scope: nothing after a settle or cancel; unsettled, the abandon policy now."""
        self._drive(self._exit_steps())

    def _drive(self, steps: _Steps) -> Any:
        try:
            cmd = next(steps)
            while True:
                try:
                    answer = self._limiter._send(cmd)
                except CallError as error:
                    answer = error
                cmd = steps.send(answer)
        except StopIteration as done:
            return done.value


class AsyncHold(_HoldCore):
    """A hold on an `AsyncLimiter`, for ``async with``: `Hold`'s methods, awaited."""

    async def add(self, usage: Usage) -> bool:
        return bool(await self._drive(self._add_steps(usage)))

    async def settle(self, actual: Usage) -> Decision | None:
        result: Decision | None = await self._drive(self._final_steps(actual))
        return result

    async def cancel(self) -> Decision | None:
        return await self.settle(0)

    async def __aenter__(self) -> AsyncHold:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        # Shielded: a cancelled task (a client gone) still applies the abandon policy to what it held.
        try:
            await asyncio.shield(self._drive(self._exit_steps()))
        except asyncio.CancelledError:
            if exc is None:
                raise

    async def _drive(self, steps: _Steps) -> Any:
        try:
            cmd = next(steps)
            while True:
                try:
                    answer = await self._limiter._send(cmd)
                except CallError as error:
                    answer = error
                cmd = steps.send(answer)
        except StopIteration as done:
            return done.value


class _Holding:
    """`AsyncLimiter.hold`'s answer: awaited, the hold; with ``async with``, the hold for the block."""

    def __init__(self, hold: AsyncHold) -> None:
        self._hold = hold

    def __await__(self) -> Generator[Any, None, AsyncHold]:
        return self._decide().__await__()

    async def _decide(self) -> AsyncHold:
        hold = self._hold
        if hold._decision is None:
            hold._decided(await hold._limiter._run(hold.plan))
        return hold

    async def __aenter__(self) -> AsyncHold:
        return await self._decide()

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._hold.__aexit__(kind, exc, tb)


class HoldMixin:
    """``Limiter.hold``: inherit it (it uses the limiter's call, failure policy and counters)."""

    def hold(self, limits: Sequence[Limit], *, exact: Sequence[Limit] = (), id: str | None = None,
             ttl: float = DEFAULT_TTL, abandon: str | None = None, ledger: str | None = None) -> Hold:
        """Holds the estimates of `limits` (``(key, policy, units)``: token buckets, fixed windows and
        sliding counters are held; sliding logs are checked) and charges `exact` as given, in one atomic
        call: all or nothing. `id` (default: random) names the hold: a hold retried with the same id
        takes nothing twice. It lives `ttl` seconds; unsettled by then, `abandon` (``CHARGE``, the
        default: it stays charged; ``RETURN``: unused units go back) decides; leaving the ``with`` block
        unsettled applies it at once. `ledger`: where the hold is
        recorded (default `ledger_of` the first key). Raises UsageError."""
        hold = Hold(self, limits, exact, id, ttl, abandon, ledger)
        hold._decided(self._run(hold.plan))  # type: ignore[attr-defined]
        return hold


class AsyncHoldMixin:
    """``AsyncLimiter.hold``: inherit it."""

    def hold(self, limits: Sequence[Limit], *, exact: Sequence[Limit] = (), id: str | None = None,
             ttl: float = DEFAULT_TTL, abandon: str | None = None, ledger: str | None = None) -> _Holding:
        """As ``Limiter.hold``: ``hold = await limiter.hold(...)`` or ``async with limiter.hold(...) as hold``."""
        return _Holding(AsyncHold(self, limits, exact, id, ttl, abandon, ledger))
