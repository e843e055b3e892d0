"""Decisions without a round trip (docs/high-volume.md), without I/O: the pre-check (a check Redis
denied stays denied here until the ``retry_after`` it gave) and batched units (an instance takes up to
a policy's ``batch`` units for a key in one call and spends them locally). `Volume.check` is the steps
of one check: a generator yielding what to send (`Send`) and receiving Redis' replies, which
`Limiter` and `AsyncLimiter` run; `now` (monotonic ns) is the caller's, so tests and the contract's
vectors (contract/vectors/volume.json) drive it. The numbers are the contract's (`batching`); the
rules are the Rust reference's (client/src/batch.rs, precheck.rs).

Never above the limit: every unit spent here was taken from Redis first. One call at a time asks a
state's extra units, so with requests of cost 1 an instance holds at most ``batch - 1`` units of a key,
also under concurrency; a check that finds such a call under way waits for it (`Wait`, within the
limiter's deadline) and then spends what it brought, or asks itself.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Generator, NamedTuple, Sequence, Union

from . import command
from .command import Arg, Limit
from .contract import BATCHING
from .decision import Decision
from .errors import CallError
from .policy import Policy

__all__ = ["Volume", "Send", "Wait", "Woken", "Ahead", "Denials", "Batches", "Asked"]

NS_PER_MS = 1_000_000
NS_PER_SEC = 1_000_000_000
START: int = BATCHING["start"]
GROW: int = BATCHING["grow"]
SHARE: int = BATCHING["share"]
MARGIN_NS: int = BATCHING["refund_margin_ms"] * NS_PER_MS
SWEEP_NS: int = BATCHING["sweep_ms"] * NS_PER_MS
MAX_KEYS: int = BATCHING["max_keys"]
PRECHECK_MAX_KEYS: int = BATCHING["precheck_max_keys"]
#: A batch is taken ahead when a local decision leaves fewer than ``size / AHEAD`` units held.
AHEAD: int = BATCHING["ahead"]
#: Per kind that batches, where its held units end: ``none`` (a bucket: the lease alone), ``reset``
#: (a fixed window: its reset_after after the answer), ``reset_minus_window`` (a sliding counter).
WINDOW_END: dict[str, str] = dict(BATCHING["kinds"])


class Send(NamedTuple):
    """A command to send. ``required``: the check's own call (its failure is the check's: the failure
    policy decides); otherwise a refund of expired units, whose failure only loses them (the reply
    given back is then None)."""

    cmd: list[Arg]
    required: bool


class Wait(NamedTuple):
    """A call asking extra units for this check's key is under way: the runner waits until
    ``subscribe(wake)`` calls ``wake`` (when it returns False the call is over already), then sends
    back `Woken`."""

    subscribe: Callable[[Callable[[], None]], bool]


class Ahead(NamedTuple):
    """A batch taken ahead for one key (a local decision left its units low): ``cmd`` to send off the
    caller's path, then ``landed(reply)`` with Redis' reply, or None when it failed."""

    cmd: list[Arg]
    landed: Callable[[Any], None]


class Woken(NamedTuple):
    """After a `Wait`: the runner's clock, and whether the check may wait again (within its deadline)."""

    now: int
    may_wait: bool


Steps = Generator[Union[Send, Wait, Ahead], Any, Decision]


def _ns(seconds: float) -> int:
    return round(seconds * NS_PER_SEC)


def _ceil_ms(ns: int) -> int:
    return -(-ns // NS_PER_MS)


# The pre-check.


@dataclass(frozen=True)
class _Denial:
    until: int
    cost: int
    decision: Decision
    at: int


class Denials:
    """Redis' denials still in force, by the keys of the check (in order). Thread-safe: a dict's get
    and set are atomic, and a purge replaces the dict whole."""

    def __init__(self) -> None:
        self._denied: dict[tuple[str, ...], _Denial] = {}

    def check(self, keys: tuple[str, ...], cost: int, now: int) -> Decision | None:
        """The denial in force for `keys` at `now` for a request of `cost` (the same or a larger cost
        than Redis denied; a smaller one may fit), both waits shorter by the time passed; else None."""
        d = self._denied.get(keys)
        if d is None or now >= d.until or cost < d.cost:
            return None
        given = d.decision
        return replace(given, retry_after=_ceil_ms(d.until - now) / 1000,
                       reset_after=max(0, _ns(given.reset_after) - (now - d.at)) / NS_PER_SEC, local=True)

    def remember(self, keys: tuple[str, ...], cost: int, decision: Decision, now: int) -> None:
        """Remembers Redis' own denial (not degraded, not "never fits") until its retry_after."""
        if decision.allowed or decision.degraded or decision.local or decision.retry_after is None:
            return
        denied = self._denied
        if len(denied) >= PRECHECK_MAX_KEYS:
            denied = {k: d for k, d in denied.items() if d.until > now}
            if len(denied) >= PRECHECK_MAX_KEYS:
                denied = {}
            self._denied = denied
        denied[keys] = _Denial(now + _ns(decision.retry_after), cost, decision, now)


# Batched units.


@dataclass
class _State:
    """One (key, policy)'s units: ``held`` (taken and not yet spent), ``size`` (what its last call
    took for a request of cost 1), ``until`` (the end of the units' use), ``window_end`` (None: a
    token bucket) and ``last`` (Redis' last answer, at ``since``)."""

    key: str
    policy: Policy
    held: int
    size: int
    since: int
    until: int
    window_end: int | None
    last: Decision

    def expire(self, now: int) -> list[Arg] | None:
        """The refund of the units whose use ended, unless their window is over (then they are gone)."""
        if now < self.until or self.held == 0:
            return None
        units, self.held = self.held, 0
        if self.window_end is not None and now + MARGIN_NS >= self.window_end:
            return None
        return command.refund(self.key, self.policy, units)


def _id(key: str, policy: Policy) -> str:
    """A state's name: its key, its kind's group and parameters (sweeps and closes go in its order)."""
    return f"{key}\n{policy.KIND.group}\n{policy.params[0]}\n{policy.params[1]}"


@dataclass(frozen=True)
class Asked:
    """A call's batch: per limit, the extra units asked and the size they came from (None: the call
    leaves the limit's state as it is)."""

    extras: list[int]
    sizes: list[int | None]

    def without_extras(self) -> Asked:
        """The same call without extras (a denied batch: the request itself may fit), at size `START`."""
        return Asked([0] * len(self.extras), [None if s is None else START for s in self.sizes])

    def command(self, limits: Sequence[Limit]) -> list[Arg]:
        return command.decide([(k, p, c + e) for (k, p, c), e in zip(limits, self.extras)])


class Batches:
    """The units one limiter holds, per (key, policy); at most `MAX_KEYS` states. Thread-safe."""

    def __init__(self) -> None:
        self._states: dict[str, _State] = {}
        self._asking: dict[str, list[Callable[[], None]]] = {}  # states a call asking extras is under
        # way for, and what to wake when it is over
        self._lock = threading.Lock()
        self._next_sweep: int | None = None

    def held(self, key: str, policy: Policy) -> int:
        """The units held for `key` under `policy` (0 when none)."""
        state = self._states.get(_id(key, policy))
        return state.held if state is not None else 0

    def plan(self, limits: Sequence[Limit], now: int, may_wait: bool = False
             ) -> tuple[list[list[Arg]], Decision | Asked | Wait, list[Ahead]]:
        """What a check of `limits` does at `now`: the refunds to send first (expired units), then the
        local decision when every limit is batched and holds its cost (with the batches to take
        ahead), else (`may_wait`) a `Wait` when a batch call for one of them is under way, else the
        call's batch."""
        n = len(limits)
        ids = [_id(key, policy) for key, policy, _ in limits]
        with self._lock:
            states = self._states
            refunds = self._sweep(ids, now)
            for i in ids:
                state = states.get(i)
                refund = state.expire(now) if state is not None else None
                if refund is not None:
                    refunds.append(refund)
            holding = []
            for i, (_, policy, cost) in zip(ids, limits):
                state = states.get(i)
                holding.append(policy.batch is not None and state is not None and now < state.until
                               and state.held >= cost)
            if all(holding):
                decision, ahead = self._spend(ids, limits, now)
                return refunds, decision, ahead
            waiting = [i for i, h in zip(ids, holding) if not h and i in self._asking]
            if may_wait and waiting:
                return refunds, Wait(lambda wake: self._subscribe(waiting[0], wake)), []
            asked = Asked([0] * n, [None] * n)
            for j, (i, (_, policy, _)) in enumerate(zip(ids, limits)):
                # In a call of several limits only a bucket batches: a window's end is known only
                # from an answer about that limit alone.
                if (policy.batch is None or holding[j] or i in self._asking
                        or (n > 1 and WINDOW_END[policy.KIND.name] != "none")):
                    continue
                state = states.get(i)
                if state is None:
                    if len(states) >= MAX_KEYS:
                        continue  # full: decided without batching until a sweep makes room
                    size = START
                else:
                    hot = now < state.until  # its units ran out before their end
                    size = state.size * GROW if hot else max(1, state.size // GROW)
                    size = min(size, max(1, state.last.remaining // SHARE))
                size = max(1, min(size, policy.batch))
                asked.extras[j], asked.sizes[j] = size - 1, size
                if size > 1 and state is not None:
                    self._asking[i] = []
        return refunds, asked, []

    def answer(self, limits: Sequence[Limit], asked: Asked, decision: Decision, now: int) -> Decision:
        """Redis' answer to the call `asked`: the units held and the sizes change; the decision for the
        caller (its ``remaining`` counts the units held here of the limit it describes)."""
        held_here = 0
        with self._lock:
            for j, ((key, policy, _), size) in enumerate(zip(limits, asked.sizes)):
                if size is None:
                    continue
                i = _id(key, policy)
                state = self._states.get(i)
                if not decision.allowed:
                    if state is not None:
                        state.size = START
                    continue
                end = WINDOW_END[policy.KIND.name]
                window_end = None if end == "none" else now + _ns(decision.reset_after) - (
                    _ns(policy.period) if end == "reset_minus_window" else 0)
                until = now + policy.lease_ns
                if window_end is not None:
                    until = min(until, max(now, window_end - MARGIN_NS))
                # Units held from a window that has ended meanwhile do not carry into the next one.
                ended = (state is not None and state.window_end is not None and window_end is not None
                         and window_end > state.window_end + MARGIN_NS)
                held = (state.held if state is not None and not ended else 0) + asked.extras[j]
                self._states[i] = _State(key, policy, held, size, now, until, window_end, decision)
                if len(limits) == 1 or decision.limiting == j:
                    held_here = held
        return replace(decision, remaining=decision.remaining + held_here) if held_here else decision

    def done(self, limits: Sequence[Limit], asked: Asked) -> None:
        """The call that asked `asked` is over, however it ended: the checks waiting for it go on."""
        woken: list[Callable[[], None]] = []
        with self._lock:
            for (key, policy, _), extra in zip(limits, asked.extras):
                if extra > 0:
                    woken += self._asking.pop(_id(key, policy), [])
        for wake in woken:
            wake()

    def _subscribe(self, i: str, wake: Callable[[], None]) -> bool:
        with self._lock:
            waiters = self._asking.get(i)
            if waiters is None:
                return False
            waiters.append(wake)
            return True

    def release_all(self, now: int) -> list[list[Arg]]:
        """Every unit held, as refunds (those of a window that is over are gone); no state is left."""
        with self._lock:
            states, self._states = self._states, {}
        refunds = []
        for i in sorted(states):
            state = states[i]
            state.until = min(state.until, now)
            refund = state.expire(now)
            if refund is not None:
                refunds.append(refund)
        return refunds

    # Under the lock.

    def _spend(self, ids: list[str], limits: Sequence[Limit], now: int) -> tuple[Decision, list[Ahead]]:
        """Decided here: each limit's cost taken from its units. The decision describes the limit with
        the fewest left (the first of those): Redis' last answer with the units held counted and its
        reset shorter by the time since. A limit left with fewer than ``size / AHEAD`` units, none
        asked for and its lease going on, takes its next batch ahead."""
        local, ahead = [], []
        for i, (_, _, cost) in zip(ids, limits):
            state = self._states[i]
            state.held -= cost
            taken = self._ahead(i, state, now)
            if taken is not None:
                ahead.append(taken)
            last = state.last
            local.append(replace(last, allowed=True, remaining=last.remaining + state.held, retry_after=0.0,
                                 reset_after=max(0, _ns(last.reset_after) - (now - state.since)) / NS_PER_SEC,
                                 local=True))
        limiting = min(range(len(local)), key=lambda j: local[j].remaining)
        return replace(local[limiting], limiting=limiting), ahead

    def _ahead(self, i: str, state: _State, now: int) -> Ahead | None:
        """The batch to take ahead for `state`: its next size, at most what keeps the units held and
        asked for below ``batch``; asked as a call of that limit alone with no request of its own."""
        batch = state.policy.batch
        if batch is None or i in self._asking or state.held * AHEAD >= state.size or now >= state.until:
            return None
        size = min(state.size * GROW, batch, max(1, state.last.remaining // SHARE))
        units = min(size, batch - 1 - min(state.held, batch - 1))
        if units == 0:
            return None
        self._asking[i] = []
        limits = [(state.key, state.policy, 0)]
        asked = Asked([units], [size])

        def landed(reply: Any) -> None:
            try:
                if reply is not None:
                    self.answer(limits, asked, Decision.from_reply(reply), now)
            except CallError:
                pass  # not a decision: whatever it took is lost, as a failed call's
            finally:
                self.done(limits, asked)

        return Ahead(asked.command(limits), landed)

    def _sweep(self, ids: list[str], now: int) -> list[list[Arg]]:
        """Every `SWEEP_NS`, the expired states of keys other than this check's: their units given
        back, the states forgotten."""
        if self._next_sweep is None:
            self._next_sweep = now + SWEEP_NS
        if now < self._next_sweep:
            return []
        self._next_sweep = now + SWEEP_NS
        refunds = []
        for i in sorted(i for i, s in self._states.items() if now >= s.until and i not in ids):
            refund = self._states.pop(i).expire(now)
            if refund is not None:
                refunds.append(refund)
        return refunds


class Volume:
    """A limiter's pre-check (when on) and batched units; `check` gives the steps of one check."""

    def __init__(self, precheck: bool) -> None:
        self.denials: Denials | None = Denials() if precheck else None
        self.batches = Batches()

    def applies(self, limits: Sequence[Limit]) -> bool:
        """Whether a check of `limits` may be decided here (else it is one plain call)."""
        return self.denials is not None or any(policy.batch is not None for _, policy, _ in limits)

    def check(self, limits: Sequence[Limit], now: int) -> Steps:
        """The steps of one check of `limits` at `now` (after the limiter validated them): the
        pre-check, then the batched units or one call. Returns the decision (``local`` when no call
        decided it)."""
        keys = tuple(key for key, _, _ in limits)
        cost = max(c for _, _, c in limits)
        if self.denials is not None:
            held = self.denials.check(keys, cost, now)
            if held is not None:
                return held
        if any(policy.batch is not None for _, policy, _ in limits):
            decision = yield from self._batched(limits, now)
        else:
            decision = Decision.from_reply((yield Send(command.decide(limits), True)))
        if self.denials is not None:
            self.denials.remember(keys, cost, decision, now)
        return decision

    def _batched(self, limits: Sequence[Limit], now: int) -> Steps:
        refunds, planned, ahead = self.batches.plan(limits, now, may_wait=True)
        for refund in refunds:
            yield Send(refund, False)
        waited = False
        while isinstance(planned, Wait):
            waited = True
            woken: Woken = yield planned
            now = woken.now
            refunds, planned, ahead = self.batches.plan(limits, now, may_wait=woken.may_wait)
            for refund in refunds:
                yield Send(refund, False)
        if isinstance(planned, Decision):
            for batch in ahead:
                yield batch
            # A check that waited for another's batch call shared that round trip: not local.
            return replace(planned, local=False) if waited else planned
        asked = planned
        try:
            decision = Decision.from_reply((yield Send(asked.command(limits), True)))
            if not decision.allowed and any(asked.extras):
                # The batch did not fit; the request itself may.
                asked = asked.without_extras()
                decision = Decision.from_reply((yield Send(asked.command(limits), True)))
            return self.batches.answer(limits, asked, decision, now)
        finally:
            self.batches.done(limits, planned)

    def release_all(self, now: int) -> list[list[Arg]]:
        """The refunds of every unit held (`close()`)."""
        return self.batches.release_all(now)
