"""Engines, sans-IO: who computes the limiters on the server, and how one module command is sent to it.
As `client/src/engine.rs`.

The module's native ``RL.*`` commands, or, where no module can be loaded (managed Redis), the same
limiters as the Lua library (`lua/ratelimit.lua`, shipped as package data): called with ``FCALL``
(Redis 7+, Valkey) or, for servers and users without FUNCTION, with ``EVALSHA``. Every call is built
as the module's command; `Engine.run` sends it as the chosen engine takes it
(``FCALL rl_token <numkeys> <keys> <the other arguments in order>``), and a call answered NOSCRIPT or
"Function not found" (it never ran: a restart, a failover, a flush, a cluster node that has not seen
the library yet) loads the library or the script on the node that answered and is sent again, once.

`Engine.run` is a generator: it yields each `Send` (a command and the key whose node must answer it)
and receives the reply, or has the error reply thrown in. The drivers (`drivers.py`) do the I/O,
synchronously or with asyncio; nothing here blocks or awaits.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import itertools
from dataclasses import dataclass
from typing import Any, Generator, Mapping, NamedTuple, Sequence, Union

import redis

from . import _package_data as package_data
from .errors import ConfigurationError
from .reply_class import ReplyClass, class_of_reply, reply_text, split_reply
from .contract import CONTRACT, FIRST_KEY, LIBRARY_FUNCTIONS, group_len, key_positions
from .contract import command as contract_command

__all__ = ["Backend", "Engine", "Send", "Call", "library", "script_source", "module_command", "key_positions"]

Arg = Union[str, bytes, int, float]


class Backend(enum.Enum):
    """Which engine computes the limiters. ``AUTO``: the module when the server answers its commands,
    else the library through FCALL (loaded with FUNCTION LOAD where this user may), else EVALSHA;
    asked on the first call, and again after an outage (a failover may land on another server): the
    contract's engine machine (docs/errors.md)."""

    AUTO = "auto"
    MODULE = "module"
    FUNCTIONS = "functions"
    SCRIPTS = "scripts"

    def describe(self) -> str:
        return {
            Backend.AUTO: "not yet known",
            Backend.MODULE: "the ratelimit module",
            Backend.FUNCTIONS: "the Lua library through FCALL",
            Backend.SCRIPTS: "the Lua library through EVALSHA scripts",
        }[self]


_LIBRARY = package_data.read("lua/ratelimit.lua")


def library() -> str:
    """The library's one source, as FUNCTION LOAD takes it (package data: the repository's file)."""
    return _LIBRARY


# The module commands the library implements, and each one's function (RL.TOKEN: rl_token): the contract's.
FUNCTIONS = tuple(LIBRARY_FUNCTIONS)
_FUNCTION_OF: dict[str, str] = LIBRARY_FUNCTIONS


def _script_path(function: str) -> str:
    return str(CONTRACT["library"]["evalsha"]["scripts"]).replace("{function}", function)


def script_source(function: str) -> str:
    """The EVALSHA script of the library function `function` (``rl_token``, ...): what the function
    reaches of the library, its fast path first, ending in one call of the function; a generated file
    shipped as package data (``lua/scripts/<function>.lua``, the repository's), sent as it is."""
    return package_data.read(_script_path(function))


# Every function's script is where the contract says, checked when the package is imported.
package_data.require(map(_script_path, LIBRARY_FUNCTIONS.values()))


@dataclass(frozen=True)
class Script:
    code: str
    sha: str


@functools.cache
def script(function: str) -> Script:
    code = script_source(function)
    return Script(code, hashlib.sha1(code.encode()).hexdigest())


def _word(arg: Arg) -> str:
    return arg.decode() if isinstance(arg, bytes) else str(arg)


def _group_len(group: Arg, rest: Sequence[Arg]) -> int:
    """How many arguments an RL.ALL group takes after its key and kind: two parameters and a request."""
    return group_len(group, rest) or 3


def module_command(command: str, keys: Sequence[Arg], args: Sequence[Arg]) -> list[Arg]:
    """The module's form of a call given as its keys and its other arguments (FCALL's order): the keys
    put back where the contract's key rule says they are."""
    name = command.upper()
    spec = contract_command(name)
    rule: Mapping[str, Any] = spec["keys"] if spec is not None else {"rule": "at", "index": 0}
    if rule["rule"] == "at" and len(keys) == 1:
        i = int(rule["index"])
        return [name, *args[:i], *keys, *args[i:]]
    if rule["rule"] == "every":
        out: list[Arg] = [name]
        step = int(rule["step"]) - 1
        for i, key in enumerate(keys):
            out += [key, *args[step * i:step * i + step]]
        return out
    if rule["rule"] == "groups":
        return [name, *_interleave_groups(keys, args)]
    if rule["rule"] == "ledger_groups" and keys:  # the ledger, its arguments, then RL.ALL's groups
        head = int(rule["groups_from"]) - 1
        return [name, keys[0], *args[:head], *_interleave_groups(keys[1:], args[head:])]
    if rule["rule"] == "ledger_pairs" and keys:  # the ledger, its arguments, then key units pairs
        head = int(rule["pairs_from"]) - 1
        pairs = [w for key, units in zip(keys[1:], args[head:]) for w in (key, units)]
        return [name, keys[0], *args[:head], *pairs, *args[head + len(keys) - 1:]]
    return [name, *keys, *args]


def _interleave_groups(keys: Sequence[Arg], args: Sequence[Arg]) -> list[Arg]:
    """RL.ALL's groups put back together: each key before its kind, parameters and request."""
    out: list[Arg] = []
    at = 0
    for key in keys:
        n = 1 + _group_len(_word(args[at]), args[at + 1:]) if at < len(args) else 0
        out += [key, *args[at:at + n]]
        at += n
    return out + list(args[at:])


@dataclass(frozen=True)
class Call:
    """A library function's call: its name, keys and other arguments, in the command's order."""

    function: str
    keys: tuple[Arg, ...]
    args: tuple[Arg, ...]

    @staticmethod
    def of(command: Sequence[Arg]) -> Call | None:
        """The library's form of a module command; None for any other command (and the module-only
        ones: RL.TOP, RL.RESETSTATS, the dialects), which are sent as they are."""
        if not command:
            return None
        name = _word(command[0]).upper()
        function = _FUNCTION_OF.get(name)
        if function is None:
            return None
        rest = command[1:]
        positions = key_positions(name, rest)
        if positions == [0]:  # one key, first (all but RL.TOKEN on several keys, RL.REFUND, RL.ALL)
            return Call(function, tuple(rest[:1]), tuple(rest[1:]))
        at = set(positions)
        keys = tuple(w for i, w in enumerate(rest) if i in at)
        args = tuple(w for i, w in enumerate(rest) if i not in at)
        return Call(function, keys, args)

    def fcall(self) -> tuple[Arg, ...]:
        return ("FCALL", self.function, len(self.keys), *self.keys, *self.args)

    def evalsha(self) -> tuple[Arg, ...]:
        return ("EVALSHA", script(self.function).sha, len(self.keys), *self.keys, *self.args)

    def eval(self) -> tuple[Arg, ...]:
        return ("EVAL", script(self.function).code, len(self.keys), *self.keys, *self.args)


class Send(NamedTuple):
    """One command to send; `route`: the key whose node must answer it (Redis Cluster), or None;
    `load`: the library's FUNCTION LOAD, which a driver sends at most once per node at a time (calls
    that meet one in flight wait for it and take its answer). (A named tuple: one is built for every
    call, and a tuple is the cheapest immutable record.)"""

    args: tuple[Arg, ...]
    route: Arg | None
    load: bool = False


def route_of(command: Sequence[Arg]) -> Arg | None:
    """The first key of a module command (what routes it in a cluster); None without keys."""
    if len(command) < 2:
        return None
    name = _word(command[0]).upper()
    if name not in _FUNCTION_OF:
        return None
    at = FIRST_KEY.get(name)
    return command[1 + at] if at is not None and len(command) > 1 + at else None


# The engine machine: the contract's `engines` table (docs/errors.md), read here and interpreted by
# `Engine.run`; nothing of it is restated.
_MACHINE: Mapping[str, Any] = CONTRACT["engines"]
_STATES: dict[str, Mapping[str, Any]] = {s["name"]: s for s in _MACHINE["states"]}
_MAX_SENDS = int(_MACHINE["max_sends"])
_STEERING = [(a["answer"], a["code"], None if a["starts"] is None else str(a["starts"]).lower())
             for a in _MACHINE["answers"]]
#: Each wanted engine's name in the contract, and each state's engine (None: not yet known).
_WANTED = {Backend.AUTO: "auto", Backend.MODULE: "module", Backend.FUNCTIONS: "fcall", Backend.SCRIPTS: "evalsha"}
_BACKEND_OF_STATE = {"unknown": None, "module": Backend.MODULE, "fcall": Backend.FUNCTIONS,
                     "evalsha": Backend.SCRIPTS}


def answer_of(reply: str | None) -> str:
    """What the machine reads in an error reply (``CODE text``; None: a decision): ``ok``, one of the
    steering answers (``unknown_command``, ``noperm``, ``function_missing``, ``noscript``), ``outage``
    for a reply the contract's rules class as an outage, or ``error``."""
    if reply is None:
        return "ok"
    code, rest = split_reply(reply)
    lowered = rest.lower()
    for answer, answer_code, starts in _STEERING:
        if code == answer_code and (starts is None or lowered.startswith(starts)):
            return str(answer)
    return "outage" if class_of_reply(reply) is ReplyClass.OUTAGE else "error"


def step(wanted: str, state: str, sent: str, answer: str, sends: int) -> tuple[str, str]:
    """The machine's step: after `sent` (the call's `sends`-th command) got `answer` in `state`, the
    state and what the call does next (``send:fcall``, ..., ``done:decided``, ``done:outage``,
    ``done:misconfigured``, ``done:error``): the first transition matching sent, answer and wanted."""
    for t in _MACHINE["transitions"]:
        if sent in t["sent"] and answer in t["answers"] and wanted in t["wanted"]:
            nxt = t["next"]
            state = state if nxt == "same" else _MACHINE["start"][wanted] if nxt == "start" else nxt
            then = str(t["then"])
            if then.startswith("send:") and sends >= _MAX_SENDS:
                then = "done:misconfigured"  # a call that would go on forever gives up
            return state, then
    raise AssertionError(f"the contract's engine machine has no transition for {sent} answered {answer}")


class Engine:
    """The engine a limiter asked for, the machine's state (the engine in use, once known) and why.
    Shared by the calls of one limiter (threads or tasks): each field is replaced whole, never updated
    in place."""

    def __init__(self, wanted: Backend) -> None:
        self.wanted = wanted
        self._wanted = _WANTED[wanted]
        self.state: str = _MACHINE["start"][self._wanted]
        self._why = ""

    @property
    def chosen(self) -> Backend | None:
        """The engine in use; None while not yet known (no decision yet, or since an outage)."""
        return _BACKEND_OF_STATE[self.state]

    def reports(self) -> str:
        """What the engine is, in words: ``not yet known`` before the first decision (and after an
        outage, until Redis decides again), then the engine in use (``the ratelimit module``, ...)."""
        return str(_STATES[self.state]["reports"])

    def __str__(self) -> str:
        return self.reports()

    def describe(self) -> tuple[Backend | None, str]:
        """The engine in use (None: not yet known), and the reason it was chosen."""
        if self.wanted is not Backend.AUTO:
            return self.chosen, "asked for"
        if self.chosen is None:
            return None, self.reports()
        return self.chosen, self._why or "the module answered"

    def no_answer(self) -> None:
        """A call got no answer (an outage): the state the machine gives that (after a failover the
        server may be another kind of server: under AUTO the engine is chosen anew)."""
        sent = str(_STATES[self.state]["sends"])
        self.state, _ = step(self._wanted, self.state, sent, "outage", 1)

    def run(self, command: Sequence[Arg]) -> Generator[Send, Any, Any]:
        """Sends `command` (a module command, or any other) as the machine says, from its state, and
        moves the state by each answer. Returns the reply; raises the error reply that ends the call
        (`ConfigurationError` when the machine gives up: no engine works here)."""
        route = route_of(command)
        call = Call.of(command)
        if call is None:  # not the library's: sent as it is, whatever the engine
            return (yield Send(tuple(command), route))
        first = self.state
        sent = str(_STATES[first]["sends"])
        reasons: list[str] = []
        for sends in itertools.count(1):
            error: BaseException | None = None
            try:
                reply = yield Send(self._form(sent, call, command), route, sent == "function_load")
            except redis.exceptions.RedisError as e:
                error, reply = e, None
            text = None if error is None else (reply_text(error) or str(error))
            answer = answer_of(text) if error is None or text is not None else "outage"
            before = self.state
            self.state, then = step(self._wanted, before, sent, answer, sends)
            if error is not None and self.state != before and answer in ("unknown_command", "noperm", "error"):
                reasons.append(_refusal(sent, answer))
            if then.startswith("send:"):
                sent = then[len("send:"):]
                continue
            if then == "done:decided":
                if reasons:
                    self._why = "; ".join([*reasons, f"using {self.reports()}"])
                elif first != self.state:  # decided where it started asking: nothing refused
                    self._why = ""
                return reply
            if then == "done:misconfigured":
                raise ConfigurationError(text if text is not None and answer != "ok" and
                                         class_of_reply(text) is ReplyClass.MISCONFIGURED else
                                         _gave_up(sent, answer, text))
            assert error is not None, then
            raise error
        raise AssertionError("unreachable")

    @staticmethod
    def _form(sent: str, call: Call, command: Sequence[Arg]) -> tuple[Arg, ...]:
        if sent == "fcall":
            return call.fcall()
        if sent == "evalsha":
            return call.evalsha()
        if sent == "eval":
            return call.eval()
        if sent == "function_load":
            return ("FUNCTION", "LOAD", "REPLACE", library())
        return tuple(command)


def _refusal(sent: str, answer: str) -> str:
    """Why the machine moved on from what it sent, as verify() says it."""
    noperm = answer == "noperm"
    if sent == "module":
        return "the module's commands refused to this user (NOPERM)" if noperm else "module not loaded"
    if sent == "function_load":
        return "FUNCTION LOAD refused to this user (NOPERM)" if noperm else "FUNCTION LOAD failed"
    return "FCALL or FUNCTION LOAD refused to this user (NOPERM)" if noperm else "FCALL unknown to this server"


def _gave_up(sent: str, answer: str, reply: str | None) -> str:
    said = f": {reply}" if reply else ""
    return (f"ERR no engine can run the limiter here: {sent} answered {answer}{said} (the module's "
            "commands, FCALL and EVALSHA unknown or refused to this user, or the library missing again "
            "right after its load)")
