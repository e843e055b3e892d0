"""A circuit breaker: after `failures` failed calls in a row, Redis is not called for `cooldown`
seconds, so an outage costs no request a timeout; then one call (and only one) tries Redis, and its
outcome closes the breaker or opens it for another cool-down. As `client/src/breaker.rs`.

What an answer tells it is its class's ``breaker`` in the contract (docs/errors.md): an outage is a
failure; a misconfiguration, a conflicting key or the caller's mistake is Redis answering, a success.

Thread-safe; the lock is held for a few instructions only, so it is safe on an event loop too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Breaker"]

log = logging.getLogger("redis_ratelimit")

_CLOSED = "closed"
_OPEN = "open"
_PROBING = "probing"


class Breaker:
    """Closed (every call goes to Redis), open (none does), or probing (one call is trying Redis).

    ``clock`` is seconds on a monotonic clock (tests pass a fake one).
    """

    def __init__(
        self,
        failures: int = 5,
        cooldown: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        name: str | None = None,
    ) -> None:
        if failures < 1:
            raise ValueError("breaker: failures must be at least 1")
        if not cooldown >= 0:
            raise ValueError("breaker: cooldown must be a number of seconds >= 0")
        self.failures = failures
        #: The limiter it guards, named in its log lines (a limiter sets it when it is None).
        self.name = name
        self.cooldown = float(cooldown)
        self._clock = clock
        self._lock = threading.Lock()
        self._state = _CLOSED
        self._in_a_row = 0
        self._until = 0.0  # open: the end of the cool-down; probing: when the probe counts as lost
        self.opened = 0  # how many times it opened (for tests and metrics)
        self.rejected = 0  # calls turned away while open

    def allow(self) -> bool:
        """True when the call may go to Redis: closed, or the one probe after a cool-down. False
        while open or while another call probes. A probe that never reports (its caller died) is
        given up after one more cool-down, and another call probes."""
        now = self._clock()
        with self._lock:
            if self._state == _CLOSED:
                return True
            if now >= self._until:
                self._state = _PROBING
                self._until = now + max(self.cooldown, 1.0)
                return True
            self.rejected += 1
            return False

    def success(self) -> None:
        """Redis answered (a decision, or an error reply whose class's ``breaker`` is ``answered``): closed,
        the failures in a row back to none."""
        with self._lock:
            was = self._state
            self._state = _CLOSED
            self._in_a_row = 0
        if was != _CLOSED:
            log.warning("%scircuit breaker closed: Redis answers again and decides", self._who(),
                        extra={"limiter": self.name})

    def failure(self, cause: str | None = None) -> None:
        """No answer (the deadline, a broken connection; ``cause`` says which, for the log line):
        counts towards opening; a failed probe opens it again at once."""
        now = self._clock()
        with self._lock:
            if self._state == _CLOSED:
                self._in_a_row += 1
                if self._in_a_row < self.failures:
                    return
            opened = self._open(now)
        if opened:
            self._log_open(f"{self.failures} failure{'s' * (self.failures > 1)} in a row", cause)

    def _open(self, now: float) -> bool:
        """Opens (again); True when it was closed."""
        was = self._state
        if was == _CLOSED:
            self.opened += 1
        self._state = _OPEN
        self._until = now + self.cooldown
        self._in_a_row = 0
        return was == _CLOSED

    def _log_open(self, after: str, cause: str | None) -> None:
        log.warning("%scircuit breaker open after %s (%s): no call goes to Redis for %g s, then one probes",
                    self._who(), after, cause or "no answer", self.cooldown,
                    extra={"limiter": self.name, "cause": cause})

    def _who(self) -> str:
        return f"limiter {self.name!r}: " if self.name is not None else ""

    @property
    def open(self) -> bool:
        """True while calls are kept away from Redis (open, or a probe under way)."""
        with self._lock:
            return self._state != _CLOSED

    def __repr__(self) -> str:
        return f"Breaker(failures={self.failures}, cooldown={self.cooldown}, state={self._state})"
