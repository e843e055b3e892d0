"""What a limiter says and counts about the answers that are not decisions, by their class's behaviour
in the contract (`reply_class.py`, docs/errors.md). As `client/src/outage.rs`:

- an **outage** (no answer, ``LOADING``, ``READONLY``, ...): one warning when it starts (and when its
  cause changes kind), one when Redis answers again, with how long it lasted and how many decisions
  the failure policy made meanwhile;
- **misconfigured** (``NOPERM``, an unknown command, a reply no rule knows): an error line saying what
  to fix, once per cause a minute; `misconfigured` is true until Redis decides again;
- a **conflict** (the key holds another limiter's state or another type): an error line once per key,
  with the key and how to recover;
- **usage** (the caller's mistake): nothing logged, the caller gets the error.

Each class counts in `counts` under its contract counter's name.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from .errors import CallError

__all__ = ["Answers", "Counts"]

log = logging.getLogger("redis_ratelimit")

#: How often one cause of a misconfiguration is logged again while it lasts.
FAULT_EVERY = 60.0
#: How many conflicting keys are each logged once; past that, one line a minute.
MAX_CONFLICT_KEYS = 1024


@dataclass
class Counts:
    """A limiter's counts of answers that were not decisions (the contract's counter names): outages
    started, calls answered that the limiter is misconfigured, calls whose key conflicted, calls
    refused as the caller's mistake (before sending, or by Redis); and decisions made without a round
    trip (`local`: the pre-check's denials and batched units, docs/high-volume.md)."""

    outage: int = 0
    misconfigured: int = 0
    conflicts: int = 0
    usage_errors: int = 0
    local: int = 0


class Answers:
    """One limiter's logs and counters of the answers that were not decisions; thread-safe."""

    def __init__(self, name: str, failure: Any) -> None:
        self.name = name
        self.failure = failure  # the policy that decides meanwhile: named, and its decisions counted
        self.counts = Counts()
        self.misconfigured = False
        self._lock = threading.Lock()
        # The outage under way: its cause as logged (None: Redis answers), since when, and the failure
        # policy's count of decisions when it began.
        self._cause: str | None = None
        self._since = 0.0
        self._decisions = 0
        self._faults: dict[str, float] = {}  # each misconfiguration's cause, when last logged
        self._conflicts: set[str] = set()
        self._conflict_logged = -FAULT_EVERY

    def count(self, counter: str) -> None:
        with self._lock:
            setattr(self.counts, counter, getattr(self.counts, counter) + 1)

    def outage(self, error: CallError, engine: str) -> str:
        """Logs the cause of an outage (a warning naming this limiter and the engine it used) when it
        is not of the kind last logged (a deadline, a connection failure, a server that cannot serve
        now); returns it."""
        cause = f"{type(error).__name__}: {error}"
        with self._lock:
            # A cause is its kind: connections refused, then reset, then refused again are one outage.
            if self._cause is not None and self._cause.split(":", 1)[0] == type(error).__name__:
                return cause
            first = self._cause is None
            self._cause = cause
            if first:
                self._since = time.monotonic()
                self._decisions = self.failure.decisions
                self.counts.outage += 1
        log.warning("limiter %r: Redis did not decide (%s; engine: %s): the failure policy %r decides meanwhile%s",
                    self.name, cause, engine, self.failure, "" if first else " (the cause changed)",
                    extra={"limiter": self.name, "cause": cause})
        return cause

    def answered(self) -> None:
        """Redis answered: logs the end of an outage, once."""
        if self._cause is None:  # the common case, without the lock
            return
        with self._lock:
            if self._cause is None:
                return
            self._cause = None
            took = time.monotonic() - self._since
            degraded = self.failure.decisions - self._decisions
        log.warning("limiter %r: Redis answers again after %.1f s (%d degraded decisions meanwhile)",
                    self.name, took, degraded, extra={"limiter": self.name, "cause": None})

    def decided(self) -> None:
        """Redis decided: the end of an outage, and of a misconfiguration."""
        if self.misconfigured:
            self.misconfigured = False
        self.answered()

    def fault(self, error: CallError, command: str) -> None:
        """Redis answered that the limiter cannot work with it as configured: at error level, saying
        what to fix, once per cause a minute."""
        self.misconfigured = True
        text = str(error)
        cause = text.split(", with args", 1)[0]  # the arguments (a key) do not make another cause
        now = time.monotonic()
        with self._lock:
            last = self._faults.get(cause)
            if last is not None and now - last < FAULT_EVERY:
                return
            if len(self._faults) >= MAX_CONFLICT_KEYS:
                self._faults.clear()
            self._faults[cause] = now
        log.error("limiter %r: rate limiter misconfigured (Redis answers: this is no outage): %s; "
                  "meanwhile the failure policy %r decides", self.name, what_to_fix(command, text), self.failure,
                  extra={"limiter": self.name, "cause": text})

    def conflict(self, keys: list[str], error: CallError) -> None:
        """A key of the call holds another limiter's state or another type: at error level, once per
        key (the keys of the call, when it has several), with how to recover."""
        named = " ".join(keys) or "(no key)"
        now = time.monotonic()
        with self._lock:
            if named in self._conflicts:
                return
            if len(self._conflicts) < MAX_CONFLICT_KEYS:
                self._conflicts.add(named)
            elif now - self._conflict_logged < FAULT_EVERY:
                return
            self._conflict_logged = now
        log.error("limiter %r: rate limit key conflict on %s (%s): the key holds another limiter's state or "
                  "another type (a limit whose kind changed under the same key, or a key named twice); the "
                  "failure policy %r decides for it until it expires. To recover: delete it (redis-cli del "
                  "%s), wait until it expires (at most its limit's period), or give the limit another name "
                  "(docs/errors.md)", self.name, named, error, self.failure, named,
                  extra={"limiter": self.name, "keys": keys, "cause": str(error)})


def what_to_fix(command: str, text: str) -> str:
    """What to change, for a misconfiguration met on `command` (its error reply: `text`)."""
    if text.startswith("NOPERM") and "permissions to access" in text.lower():  # Redis 7.0's and 7.2's texts
        return (f"this Redis user may not access the key of {command} ({text}): add the limiter's keys to its "
                "key patterns, e.g. ACL SETUSER <user> ~rl:*")
    if text.startswith("NOPERM"):
        return (f"this Redis user may not run {command}: grant it the module's commands, e.g. "
                "ACL SETUSER <user> ~rl:* +@ratelimit (or FCALL and FUNCTION LOAD for the library)")
    if "unknown command" in text.lower() or text.startswith("ERR no engine"):
        return (f"this server does not know {command} ({text}): load the ratelimit module (--loadmodule "
                "/path/to/libredis_ratelimit.so), or let this user load the library (FUNCTION LOAD), or "
                "undo a rename-command of it")
    if text.startswith(("NOAUTH", "WRONGPASS")):
        return f"Redis refused this client's credentials ({text}): check the username and password"
    return f"Redis answered {command} with an error the limiter cannot work with ({text})"
