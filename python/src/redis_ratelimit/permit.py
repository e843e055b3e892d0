"""Concurrency limits from the holder's side: ``limiter.acquire(key, Concurrency(...))`` is a context
manager (``with`` on ``Limiter``, ``async with`` on ``AsyncLimiter``) that takes a lease on entry
(RL.ACQUIRE), renews it every half lease while the block runs (a thread, or a task) and releases it
on exit (RL.RELEASE), also when the block raises or is cancelled. ``acquire_all`` takes concurrency
limits beside rate limits in one atomic call (RL.ALL): all or nothing. As ``client/src/permit.rs``.

    with limiter.acquire("rl:exports", Concurrency(limit=3, lease=30.0)) as permit:
        if not permit:                     # denied: permit.decision says until when
            return too_many(permit.decision.retry_after)
        export()                           # renewed every 15 s while it runs
        if permit.lost: ...                # a renew found the lease gone: the slot may be another's

When Redis cannot decide, the failure policy does (``degraded``): open grants a permit that holds
nothing, closed denies, fallback holds leases of the in-process limiter (renewed and released there).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import weakref
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any

from . import command
from .base import one_slot
from .command import Limit
from .contract import call
from .decision import Decision
from .errors import CallError, DeadlineError, UnreachableError
from .failure_policy import FailurePolicy
from .local_fallback import LocalLimiter
from .policy import Concurrency, Policy
from .request_steps import Request, Steps, decision_of, run_steps, run_steps_async

__all__ = ["Permit", "AsyncPermit", "AcquireMixin", "AsyncAcquireMixin"]

log = logging.getLogger("redis_ratelimit")

_BACKGROUND: set[asyncio.Task[None]] = set()


class _PermitCore:
    """What a permit holds and decides, as steps with no I/O: the drivers below send them."""

    def __init__(self, failure: FailurePolicy, limits: Sequence[Limit]) -> None:
        self.limits = [(str(key), policy, cost) for key, policy, cost in limits]
        self.id = secrets.token_hex(16)  # 128 random bits: nobody can guess or collide with it
        self._request = Request.of(command.acquire(self.limits, self.id))  # UsageError when it cannot be
        self._failure = failure
        # The leases it takes: (key, lease as the commands write it, lease in seconds).
        self.leases = [(k, p.params[1], p.period) for k, p, _ in self.limits if isinstance(p, Concurrency)]
        self._decision: Decision | None = None
        self._local: LocalLimiter | None = None  # the fallback's, when it holds the leases
        self._holds = False  # something to release
        self._lost = False

    @property
    def decision(self) -> Decision:
        """The decision that granted it, or the denial (once entered)."""
        if self._decision is None:
            raise RuntimeError("acquire: the permit is not entered yet (use it with `with`)")
        return self._decision

    @property
    def granted(self) -> bool:
        return self._decision is not None and self._decision.allowed

    def __bool__(self) -> bool:
        return self.granted

    @property
    def lost(self) -> bool:
        """True once a renew found a lease no longer held: the slot may now be someone else's."""
        return self._lost

    def _renew_every(self) -> float:
        return max(min(seconds for _, _, seconds in self.leases) / 2, 0.001)

    def _entering(self) -> None:
        if self._decision is not None:
            raise RuntimeError("acquire: a permit is entered once (acquire again for another)")

    def _settle(self, reply: Any, error: CallError | None) -> bool:
        """Sets the decision from Redis' reply or the failure policy's; True when an unanswered
        call may have taken the leases in Redis (to be given back in the background)."""
        if error is None:
            self._decision = decision_of(reply)
            self._holds = self._decision.allowed and bool(self.leases)
            return False
        self._decision = self._failure.acquire(self.limits, self.id, error)
        self._local = self._failure.local
        self._holds = self._decision.allowed and bool(self.leases) and self._local is not None
        return bool(self.leases) and isinstance(error, (DeadlineError, UnreachableError))

    def _release_steps(self, local: LocalLimiter | None) -> Steps[bool]:
        """RL.RELEASE of each lease (in ``local`` when it holds them): True when every one was
        still held."""
        held = True
        for key, _, _ in self.leases:
            if local is not None:
                held &= local.release(key, self.id)
            else:
                held &= (yield Request.of(call("release", key=key, id=self.id))) == 1
        return held

    def _renew_steps(self) -> Steps[bool]:
        """RL.RENEW of each lease: False as soon as one is found gone."""
        for key, lease, seconds in self.leases:
            if self._local is not None:
                held = self._local.renew(key, seconds, self.id)
            else:
                held = (yield Request.of(call("renew", key=key, lease=lease, id=self.id))) == 1
            if not held:
                return False
        return True

    def _release_all(self) -> Steps[bool] | None:
        """The release's steps, once (None: nothing to release any more)."""
        if not self._holds:
            return None
        self._holds = False
        return self._release_steps(self._local)

    def _found_gone(self) -> None:
        self._lost = True
        log.warning("a permit's lease was found gone on renew (keys %s)", [k for k, _, _ in self.leases])


class Permit(_PermitCore):
    """Slots of concurrency limits, for ``with``: see the module's text."""

    def __init__(self, limiter: Any, limits: Sequence[Limit]) -> None:
        super().__init__(limiter.failure, limits)
        self._limiter = limiter
        self._stop = threading.Event()

    def __enter__(self) -> Permit:
        self._entering()
        try:
            reply, error = run_steps(self._limiter, _one(self._request)), None
        except CallError as e:
            reply, error = None, e
        if self._settle(reply, error):
            threading.Thread(target=self._give_back_quietly, daemon=True).start()
        if self._holds:
            args = (weakref.ref(self), self._stop, self._renew_every())
            threading.Thread(target=_renew_while_held, args=args, name="rl-permit-renew", daemon=True).start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.release()
        except CallError as e:  # the leases end by themselves when their time is up
            log.warning("a permit's release failed: %s", e)

    def release(self) -> bool:
        """Releases the slots now: True when every lease was still held (False: one had ended, or
        was lost). Idempotent. Raises CallError when Redis did not answer (the leases then end by
        themselves)."""
        self._stop.set()
        steps = self._release_all()
        return not self._lost if steps is None else run_steps(self._limiter, steps)

    def _renew_turn(self) -> bool:
        """One renewal of every lease; False when one was found gone (renewing stops)."""
        try:
            held = run_steps(self._limiter, self._renew_steps())
        except CallError:
            return True  # unanswered: the lease may still be held; try again next turn
        if not held and not self._stop.is_set():
            self._found_gone()
            return False
        return True

    def _give_back_quietly(self) -> None:
        try:
            run_steps(self._limiter, self._release_steps(None))
        except CallError:
            pass


class AsyncPermit(_PermitCore):
    """Slots of concurrency limits, for ``async with``: see the module's text."""

    def __init__(self, limiter: Any, limits: Sequence[Limit]) -> None:
        super().__init__(limiter.failure, limits)
        self._limiter = limiter
        self._renewer: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AsyncPermit:
        self._entering()
        try:
            reply, error = await run_steps_async(self._limiter, _one(self._request)), None
        except CallError as e:
            reply, error = None, e
        if self._settle(reply, error):
            self._spawn(self._give_back_quietly())
        if self._holds:
            self._renewer = self._spawn(_renew_while_held_async(weakref.ref(self), self._renew_every()))
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Shielded: a cancelled block still gives its slots back.
        try:
            await asyncio.shield(self._release_logged())
        except asyncio.CancelledError:
            if exc is None:
                raise

    async def _release_logged(self) -> None:
        try:
            await self.release()
        except CallError as e:
            log.warning("a permit's release failed: %s", e)

    async def release(self) -> bool:
        """As ``Permit.release``."""
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.cancel()
        steps = self._release_all()
        return not self._lost if steps is None else await run_steps_async(self._limiter, steps)

    async def _renew_turn(self) -> bool:
        """As ``Permit._renew_turn``."""
        try:
            held = await run_steps_async(self._limiter, self._renew_steps())
        except CallError:
            return True
        if not held:
            self._found_gone()
            return False
        return True

    @staticmethod
    def _spawn(work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        _BACKGROUND.add(task)  # the loop holds tasks weakly: kept until done, whatever the permit
        task.add_done_callback(_BACKGROUND.discard)
        return task

    async def _give_back_quietly(self) -> None:
        try:
            await run_steps_async(self._limiter, self._release_steps(None))
        except CallError:
            pass


# The renewers hold their permit weakly: a permit dropped without being released (never exited)
# stops being renewed, and its leases end by themselves.


def _renew_while_held(ref: weakref.ref[Permit], stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        permit = ref()
        if permit is None or not permit._renew_turn():
            return
        del permit


async def _renew_while_held_async(ref: weakref.ref[AsyncPermit], every: float) -> None:
    while True:
        await asyncio.sleep(every)
        permit = ref()
        if permit is None or not await permit._renew_turn():
            return
        del permit


def _one(request: Request) -> Steps[Any]:
    return (yield request)


def _concurrency(policy: Policy) -> Concurrency:
    if not isinstance(policy, Concurrency):
        raise TypeError(f"acquire: a Concurrency policy is needed, not {policy!r} (check takes the others)")
    return policy


class AcquireMixin:
    """``Limiter.acquire`` and ``acquire_all``: inherit them (they use the limiter's ``call`` and
    ``failure``)."""

    def acquire(self, key: str, policy: Concurrency, weight: int = 1) -> Permit:
        """A permit for ``with``: a slot of weight ``weight`` of the concurrency limit ``policy`` at
        ``key``, held while the block runs."""
        return Permit(self, [(key, _concurrency(policy), weight)])

    def acquire_all(self, limits: Sequence[Limit]) -> Permit:
        """A permit for ``with`` over limits of any kinds checked together in one atomic call
        (RL.ALL): the concurrency limits among them are held as leases (their cost is the weight),
        the others are charged as by ``check_all``; all or nothing."""
        if getattr(self, "_cluster", False):
            one_slot([key for key, _, _ in limits])
        return Permit(self, limits)


class AsyncAcquireMixin:
    """``AsyncLimiter.acquire`` and ``acquire_all``: inherit them."""

    def acquire(self, key: str, policy: Concurrency, weight: int = 1) -> AsyncPermit:
        """A permit for ``async with``: as ``Limiter.acquire``."""
        return AsyncPermit(self, [(key, _concurrency(policy), weight)])

    def acquire_all(self, limits: Sequence[Limit]) -> AsyncPermit:
        """A permit for ``async with``: as ``Limiter.acquire_all``."""
        if getattr(self, "_cluster", False):
            one_slot([key for key, _, _ in limits])
        return AsyncPermit(self, limits)

