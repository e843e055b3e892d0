"""Decisions without a round trip (docs/high-volume.md), without I/O: the pre-check (a check Redis
denied stays denied here until the ``retry_after`` it gave) and batched units (an instance takes up to
a policy's ``batch`` units for a key in one call and spends them locally). `Volume.check` is the steps
of one check: a generator yielding what to send (`Send`) and receiving Redis' replies, which
`Limiter` and `AsyncLimiter` run; `now` (monotonic ns) is the caller's, so tests and the contract's
vectors drive it. The numbers are the contract's (`batching`).

Never above the limit: every unit spent here was taken from Redis first. Units taken are reserved
under the lock before a call and given back if it fails, so concurrent checks never spend one twice;
one call at a time per key asks for extra units, so with requests of cost 1 an instance holds at most
``batch - 1`` units of a key.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any, Generator, NamedTuple, Sequence

from . import command
from .command import Arg, Limit
from .contract import BATCHING
from .decision import Decision
from .policy import Policy

__all__ = ["Volume", "Send", "Denials", "Batches", "most_restrictive"]

NS_PER_MS = 1_000_000
NS_PER_SEC = 1_000_000_000
START: int = BATCHING["start"]
GROW: int = BATCHING["grow"]
SHARE: int = BATCHING["share"]
MARGIN_NS: int = BATCHING["refund_margin_ms"] * NS_PER_MS
SWEEP_NS: int = BATCHING["sweep_ms"] * NS_PER_MS
MAX_KEYS: int = BATCHING["max_keys"]
#: Per kind that batches, where its units' window ends: ``none`` (a token bucket's units never
#: expire), ``reset`` (a fixed window: at its reset), ``reset_minus_window`` (a sliding counter: a
#: window before its reset).
WINDOW_END: dict[str, str] = dict(BATCHING["kinds"])


class Send(NamedTuple):
    """A command to send. ``required``: the check's own call (its failure is the check's: the failure
    policy decides); otherwise a refund of units held, whose failure only loses them (the reply given
    back is None)."""

    cmd: list[Arg]
    required: bool


Steps = Generator[Send, Any, Decision]


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
    and set are atomic, and the sweep replaces the dict whole."""

    def __init__(self) -> None:
        self._denied: dict[tuple[str, ...], _Denial] = {}

    def check(self, keys: tuple[str, ...], cost: int, now: int) -> Decision | None:
        """The denial in force for `keys` at `now` for a request of `cost` (the same or a larger cost
        than Redis denied; a smaller one may fit), shortened by the time passed; else None."""
        d = self._denied.get(keys)
        if d is None or now >= d.until or cost < d.cost:
            return None
        left = d.until - now
        given = d.decision
        assert given.retry_after is not None  # only denials with a retry_after are remembered
        return replace(given, retry_after=_ceil_ms(left) / 1000,
                       reset_after=max(0, _ns(given.reset_after) - (now - d.at)) / NS_PER_SEC, local=True)

    def remember(self, keys: tuple[str, ...], cost: int, decision: Decision, now: int) -> None:
        """Remembers Redis' own denial (not degraded, not "never fits") until its retry_after."""
        if decision.allowed or decision.degraded or decision.local or decision.retry_after is None:
            return
        denied = self._denied
        if len(denied) >= MAX_KEYS:
            denied = {k: d for k, d in denied.items() if d.until > now}
            if len(denied) >= MAX_KEYS:
                denied = {}
            self._denied = denied
        denied[keys] = _Denial(now + _ns(decision.retry_after), cost, decision, now)


# Batched units.


@dataclass
class _State:
    """One (key, policy)'s units (docs/high-volume.md): ``held`` (taken and not yet spent), ``size``
    (what the next call takes for a request of cost 1), ``until`` (the end of the units' use),
    ``window_end`` (None: a token bucket) and ``last`` (Redis' last answer, at ``at``)."""

    policy: Policy
    held: int = 0
    size: int = START
    until: int = 0
    window_end: int | None = None
    last: Decision | None = None
    at: int = 0
    asking: bool = False  # a call asking extra units is under way


def _state_key(key: str, policy: Policy) -> tuple[str, str, tuple[str, str]]:
    return (key, policy.KIND.group, policy.params)


@dataclass
class _Plan:
    """One check's batched limits: each limit's state (None: not batched), the limits sent (their
    positions), the extra units each asks, whether each was called for because its units ran out
    before their end (hot), and the units reserved of the limits left out of the call."""

    limits: Sequence[Limit]
    states: list[_State | None]
    sent: list[int] = field(default_factory=list)
    extras: list[int] = field(default_factory=list)
    hot: list[bool] = field(default_factory=list)
    reserved: bool = False  # the units of the limits left out are taken; given back unless allowed

    def command(self, extras: Sequence[int]) -> list[Arg]:
        return command.decide([(self.limits[i][0], self.limits[i][1], self.limits[i][2] + extra)
                               for i, extra in zip(self.sent, extras)])


class Batches:
    """The units this limiter holds, per (key, policy); at most `MAX_KEYS` states. Thread-safe."""

    def __init__(self) -> None:
        self._states: dict[tuple[str, str, tuple[str, str]], _State] = {}
        self._lock = threading.Lock()
        self._swept = 0

    def held(self, key: str, policy: Policy) -> int:
        """The units held for `key` under `policy` (0 when none)."""
        state = self._states.get(_state_key(key, policy))
        return state.held if state is not None else 0

    def plan(self, limits: Sequence[Limit], now: int) -> tuple[list[list[Arg]], _Plan, Decision | None]:
        """Before the call: the refunds to send first (expired units), the plan of the call, and the
        local decision when every limit is batched and holds its cost (then there is no call)."""
        refunds: list[list[Arg]] = []
        with self._lock:
            if now - self._swept >= SWEEP_NS:
                self._swept = now
                for (key, _, _), kept in self._states.items():
                    self._expire(kept, key, now, refunds)
            states = [self._state(key, policy, now, refunds) if policy.batch is not None else None
                      for key, policy, _ in limits]
            for (key, _, _), s in zip(limits, states):
                if s is not None:
                    self._expire(s, key, now, refunds)
            plan = _Plan(limits, states)
            if all(s is not None and s.held >= cost for s, (_, _, cost) in zip(states, limits)):
                views = []
                for i, (s, (_, _, cost)) in enumerate(zip(states, limits)):
                    assert s is not None
                    s.held -= cost
                    views.append(_view(s, i, now))
                return refunds, plan, most_restrictive(views)
            plan.sent = [i for i, s in enumerate(states) if s is None or s.held < limits[i][2]]
            alone = len(plan.sent) == 1
            for i in plan.sent:
                s, policy = states[i], limits[i][1]
                extra = 0
                # In a call of several limits, a window's end is not known (the reply describes one
                # limit): only token buckets take extra units there.
                if s is not None and not s.asking and (alone or WINDOW_END[policy.KIND.name] == "none"):
                    extra = s.size - 1
                    s.asking = extra > 0
                plan.extras.append(extra)
                plan.hot.append(s is not None and now < s.until)
            for i, s in enumerate(states):
                if s is not None and i not in plan.sent:
                    s.held -= limits[i][2]
            plan.reserved = True
        return refunds, plan, None

    def answer(self, plan: _Plan, decision: Decision, extras: Sequence[int], now: int) -> Decision:
        """After the call (`extras`: what it asked): the units taken are held, the sizes adapt; the
        decision the caller gets (positions in the check's order; batched units counted in
        ``remaining``)."""
        limiting = plan.sent[min(decision.limiting, len(plan.sent) - 1)]
        decision = replace(decision, limiting=limiting)
        with self._lock:
            if not decision.allowed:
                for i in plan.sent:
                    s = plan.states[i]
                    if s is not None:
                        s.size = 1
                return decision
            plan.reserved = False  # spent: the call allowed
            for i, extra, hot in zip(plan.sent, extras, plan.hot):
                s = plan.states[i]
                if s is not None:
                    self._took(s, decision, extra, hot, now)
            kept = [_view(s, i, now) for i, s in enumerate(plan.states) if s is not None and i not in plan.sent]
            limiting_state = plan.states[limiting]
            if limiting_state is not None:
                decision = replace(decision, remaining=decision.remaining + limiting_state.held)
        return most_restrictive([decision, *kept])

    def done(self, plan: _Plan) -> None:
        """The call is over, however it ended: its asking flags end, and units reserved for a call that
        did not allow go back."""
        with self._lock:
            for i, extra in zip(plan.sent, plan.extras):
                s = plan.states[i]
                if s is not None and extra > 0:
                    s.asking = False
            if plan.reserved:
                plan.reserved = False
                for i, s in enumerate(plan.states):
                    if s is not None and i not in plan.sent:
                        s.held += plan.limits[i][2]

    def release_all(self, now: int) -> list[list[Arg]]:
        """Every unit held, as refunds (those of a window that is over are dropped); no state left."""
        refunds: list[list[Arg]] = []
        with self._lock:
            for (key, _, _), state in self._states.items():
                state.until = min(state.until, now)
                self._expire(state, key, now, refunds)
            self._states.clear()
        return refunds

    # Under the lock.

    def _state(self, key: str, policy: Policy, now: int, refunds: list[list[Arg]]) -> _State | None:
        name = _state_key(key, policy)
        state = self._states.get(name)
        if state is not None:
            state.policy = policy  # the same parameters; its batch and lease may be another's
            return state
        if len(self._states) >= MAX_KEYS:
            # Full: the expired states give their units back and go; none expired: no batching.
            for other, s in list(self._states.items()):
                if now >= s.until and not s.asking:
                    self._expire(s, other[0], now, refunds)
                    del self._states[other]
            if len(self._states) >= MAX_KEYS:
                return None
        state = self._states[name] = _State(policy)
        return state

    @staticmethod
    def _expire(state: _State, key: str, now: int, refunds: list[list[Arg]]) -> None:
        """Units whose use ended go back to Redis, unless their window is over (then they are gone)."""
        if state.held == 0 or now < state.until:
            return
        if state.window_end is None or now < state.window_end - MARGIN_NS:
            refunds.append(command.refund(key, state.policy, state.held))
        state.held = 0

    @staticmethod
    def _took(state: _State, decision: Decision, extra: int, hot: bool, now: int) -> None:
        policy = state.policy
        state.held += extra
        state.last, state.at = decision, now
        state.until = now + policy.lease_ns
        end = WINDOW_END[policy.KIND.name]
        if end == "none":
            state.window_end = None
        else:
            state.window_end = now + _ns(decision.reset_after) - (_ns(policy.period) if end == "reset_minus_window" else 0)
            state.until = min(state.until, state.window_end - MARGIN_NS)
        size = state.size * GROW if hot else max(1, state.size // GROW)
        assert policy.batch is not None
        state.size = max(1, min(size, policy.batch, decision.remaining // SHARE))


def _view(state: _State, position: int, now: int) -> Decision:
    """What a limit's held units say at `now`: Redis' last answer with the units held counted as
    remaining and its reset shorter by the time since."""
    last = state.last
    assert last is not None  # units are held only after an answer
    return replace(last, allowed=True, remaining=last.remaining + state.held, retry_after=0.0,
                   reset_after=max(0, _ns(last.reset_after) - (now - state.at)) / NS_PER_SEC,
                   limiting=position, local=True)


def most_restrictive(decisions: Sequence[Decision]) -> Decision:
    """The decision that limits a combined request, as RL.ALL picks it (core's `most_restrictive`): a
    denial before an allowance, then the longer wait ("never" longest), then fewer remaining; ties to
    the first. Local only when every one is."""
    def key(d: Decision) -> tuple[bool, float, int]:
        return (not d.allowed, float("inf") if d.retry_after is None else d.retry_after, -d.remaining)

    best = decisions[0]
    for d in decisions[1:]:
        if key(d) > key(best):
            best = d
    return replace(best, local=all(d.local for d in decisions))


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
        refunds, plan, local = self.batches.plan(limits, now)
        for refund in refunds:
            yield Send(refund, False)
        if local is not None:
            return local
        try:
            extras = plan.extras
            decision = Decision.from_reply((yield Send(plan.command(extras), True)))
            if not decision.allowed and any(extras):
                # Denied with extra units asked: the request itself may fit.
                extras = [0] * len(extras)
                decision = Decision.from_reply((yield Send(plan.command(extras), True)))
            return self.batches.answer(plan, decision, extras, now)
        finally:
            self.batches.done(plan)

    def release_all(self, now: int) -> list[list[Arg]]:
        """The refunds of every unit held (`close()`)."""
        return self.batches.release_all(now)
