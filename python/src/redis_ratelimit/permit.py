"""Concurrency limits from the holder's side: ``limiter.acquire(key, Concurrency(...))`` is a context
manager (``with`` on ``Limiter``, ``async with`` on ``AsyncLimiter``) that takes a lease on entry
(RL.ACQUIRE), renews it every half lease while the block runs (a thread, or a task) and releases it
on exit (RL.RELEASE), also when the block raises or is cancelled. As ``client/src/permit.rs``.

    with limiter.acquire("rl:exports", Concurrency(limit=3, lease=30.0)) as permit:
        if not permit:                     # denied: permit.decision says until when
            return too_many(permit.decision.retry_after)
        export()                           # renewed every 15 s while it runs
        if permit.lost: ...                # a renew found the lease gone: the slot may be another's

When Redis cannot decide, the failure policy does (``degraded``): open grants a permit that holds
nothing, closed denies, fallback holds a lease of the in-process limiter (renewed and released there).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from types import TracebackType
from typing import Any, Protocol

from .decision import Decision
from .errors import CallError, DeadlineError, UnreachableError
from .failure import FailurePolicy
from .policy import Concurrency, Policy
from .resilience import Request, decision_of, guarded, guarded_async

__all__ = ["Permit", "AsyncPermit", "AcquireMixin", "AsyncAcquireMixin"]

log = logging.getLogger("redis_ratelimit")


class _Host(Protocol):
    """What a permit needs of its limiter (``Limiter`` or ``AsyncLimiter``)."""

    @property
    def failure(self) -> FailurePolicy: ...


class _PermitCore:
    """What a permit holds and decides, with no I/O: the drivers below send its requests."""

    def __init__(self, key: str, policy: Concurrency, weight: int) -> None:
        if not isinstance(policy, Concurrency):
            raise TypeError(f"acquire: a Concurrency policy is needed, not {policy!r}")
        if weight < 1:
            raise ValueError("acquire: weight must be at least 1")
        self.key = key
        self.policy = policy
        self.weight = weight
        self.id = secrets.token_hex(16)  # 128 random bits: nobody can guess or collide with it
        self._decision: Decision | None = None
        self._holds = False  # something to release: a lease in Redis or in the fallback
        self._local = False  # held by the in-process fallback
        self._lost = False

    @property
    def decision(self) -> Decision:
        """The decision that granted it, or the denial (only once entered)."""
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
        """True once a renew found the lease no longer held: the slot may now be someone else's."""
        return self._lost

    @property
    def lease(self) -> float:
        return self.policy.period

    def _renew_every(self) -> float:
        return max(self.lease / 2, 0.001)

    def _acquire_request(self) -> Request:
        args: list[Any] = [*self.policy.params, self.id, "WEIGHT", self.weight]
        return Request("RL.ACQUIRE", [self.key], args)

    def _renew_request(self) -> Request:
        return Request("RL.RENEW", [self.key], [self.policy.params[1], self.id])

    def _release_request(self) -> Request:
        return Request("RL.RELEASE", [self.key], [self.id])

    def _limits(self) -> list[tuple[str, Policy, int]]:
        return [(self.key, self.policy, self.weight)]

    def _settle(self, reply: Any, error: CallError | None, failure: FailurePolicy) -> bool:
        """Sets the decision from Redis' reply or the failure policy's; True when an unanswered
        call may have taken the slot in Redis (to be given back in the background)."""
        if error is None:
            self._decision = decision_of(reply)
            self._holds = self._decision.allowed
            return False
        self._decision = failure.acquire(self._limits(), self.id, error)
        self._local = failure.holds_leases
        self._holds = self._decision.allowed and self._local
        return _maybe_taken(error)

    def _local_renew(self, failure: FailurePolicy) -> bool:
        assert failure.local is not None
        return failure.local.renew(self.key, self.lease, self.id)

    def _local_release(self, failure: FailurePolicy) -> bool:
        assert failure.local is not None
        return failure.local.release(self.key, self.id)

    def _found_gone(self) -> None:
        self._lost = True
        log.warning("a permit's lease was found gone on renew (key %s)", self.key)


class Permit(_PermitCore):
    """A slot of a concurrency limit, for ``with``: see the module's text."""

    def __init__(self, limiter: Any, key: str, policy: Concurrency, weight: int = 1) -> None:
        super().__init__(key, policy, weight)
        self._limiter = limiter
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> Permit:
        failure: FailurePolicy = self._limiter.failure
        try:
            reply, error = guarded(self._limiter, self._acquire_request()), None
        except CallError as e:
            reply, error = None, e
        if self._settle(reply, error, failure):
            threading.Thread(target=self._give_back_quietly, daemon=True).start()
        if self._holds:
            self._renewer = threading.Thread(
                target=self._renew_while_held, name=f"rl-renew-{self.key}", daemon=True
            )
            self._renewer.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.release()
        except CallError as e:  # the lease ends by itself when its time is up
            log.warning("a permit's release failed (key %s): %s", self.key, e)

    def release(self) -> bool:
        """Releases the slot now: True when the lease was still held (False: it had ended, or was
        lost). Idempotent. Raises CallError when Redis did not answer (the lease then ends by
        itself)."""
        self._stop.set()
        if not self._holds:
            return not self._lost
        self._holds = False
        if self._local:
            return self._local_release(self._limiter.failure)
        return bool(guarded(self._limiter, self._release_request()) == 1)

    def _renew_while_held(self) -> None:
        every = self._renew_every()
        while not self._stop.wait(every):
            try:
                if self._local:
                    held = self._local_renew(self._limiter.failure)
                else:
                    held = guarded(self._limiter, self._renew_request()) == 1
            except CallError:
                continue  # unanswered: the lease may still be held; try again next turn
            if not held and not self._stop.is_set():
                self._found_gone()
                return

    def _give_back_quietly(self) -> None:
        try:
            guarded(self._limiter, self._release_request())
        except CallError:
            pass


class AsyncPermit(_PermitCore):
    """A slot of a concurrency limit, for ``async with``: see the module's text."""

    def __init__(self, limiter: Any, key: str, policy: Concurrency, weight: int = 1) -> None:
        super().__init__(key, policy, weight)
        self._limiter = limiter
        self._renewer: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> AsyncPermit:
        failure: FailurePolicy = self._limiter.failure
        try:
            reply, error = await guarded_async(self._limiter, self._acquire_request()), None
        except CallError as e:
            reply, error = None, e
        if self._settle(reply, error, failure):
            self._spawn(self._give_back_quietly())
        if self._holds:
            self._renewer = asyncio.create_task(self._renew_while_held())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Shielded: a cancelled block still gives its slot back.
        try:
            await asyncio.shield(self._release_logged())
        except asyncio.CancelledError:
            if exc is None:
                raise

    async def _release_logged(self) -> None:
        try:
            await self.release()
        except CallError as e:
            log.warning("a permit's release failed (key %s): %s", self.key, e)

    async def release(self) -> bool:
        """As ``Permit.release``."""
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.cancel()
        if not self._holds:
            return not self._lost
        self._holds = False
        if self._local:
            return self._local_release(self._limiter.failure)
        return bool(await guarded_async(self._limiter, self._release_request()) == 1)

    async def _renew_while_held(self) -> None:
        every = self._renew_every()
        while True:
            await asyncio.sleep(every)
            try:
                if self._local:
                    held = self._local_renew(self._limiter.failure)
                else:
                    held = await guarded_async(self._limiter, self._renew_request()) == 1
            except CallError:
                continue
            if not held:
                self._found_gone()
                return

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _give_back_quietly(self) -> None:
        try:
            await guarded_async(self._limiter, self._release_request())
        except CallError:
            pass


class AcquireMixin:
    """``Limiter.acquire``: inherit it (the limiter provides ``call`` and ``failure``)."""

    def acquire(self, key: str, policy: Concurrency, weight: int = 1) -> Permit:
        """A permit for ``with``: a slot of weight ``weight`` of the concurrency limit ``policy``
        at ``key``, held while the block runs."""
        return Permit(self, key, policy, weight)


class AsyncAcquireMixin:
    """``AsyncLimiter.acquire``: inherit it."""

    def acquire(self, key: str, policy: Concurrency, weight: int = 1) -> AsyncPermit:
        """A permit for ``async with``: as ``Limiter.acquire``."""
        return AsyncPermit(self, key, policy, weight)


def _maybe_taken(error: CallError) -> bool:
    """An unanswered call (deadline, connection) may have reached Redis and taken the slot; a call
    the breaker kept back never left, and an error reply took nothing."""
    return isinstance(error, (DeadlineError, UnreachableError))
