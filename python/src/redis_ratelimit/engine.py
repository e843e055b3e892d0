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
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Any, Generator, Mapping, NamedTuple, Sequence, Union

import redis

from .errors import refuses
from .contract import CONTRACT, FIRST_KEY, LIBRARY_FUNCTIONS, group_len, key_positions
from .contract import command as contract_command

__all__ = ["Backend", "Engine", "Send", "Call", "library", "script_source", "module_command", "key_positions"]

Arg = Union[str, bytes, int, float]


class Backend(enum.Enum):
    """Which engine computes the limiters. ``AUTO``: the module when the server answers its commands,
    else the library through FCALL (loaded with FUNCTION LOAD where this user may), else EVALSHA;
    asked on the first call, and again after an outage (a failover may land on another server)."""

    AUTO = "auto"
    MODULE = "module"
    FUNCTIONS = "functions"
    SCRIPTS = "scripts"

    def describe(self) -> str:
        return {
            Backend.AUTO: "not chosen yet",
            Backend.MODULE: "the ratelimit module",
            Backend.FUNCTIONS: "the Lua library through FCALL",
            Backend.SCRIPTS: "the Lua library through EVALSHA scripts",
        }[self]


def _read_package_data(path: str) -> str:
    try:
        return resources.files("redis_ratelimit").joinpath(path).read_text(encoding="utf-8")
    except OSError as e:
        # A package built without its data: a broken installation, said when it is imported, never an
        # outage of every call on a stock server.
        raise ImportError(f"redis_ratelimit is installed without its Lua library ({path}): {e}; "
                          "reinstall the package (its wheel carries the library and its scripts)") from e


def _read_library() -> str:
    return _read_package_data("lua/ratelimit.lua")


_LIBRARY = _read_library()


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
    return _read_package_data(_script_path(function))


# Every function's script is where the contract says, checked when the package is imported.
_MISSING = [p for p in map(_script_path, LIBRARY_FUNCTIONS.values())
            if not resources.files("redis_ratelimit").joinpath(p).is_file()]
if _MISSING:
    raise ImportError(f"redis_ratelimit is installed without its Lua scripts ({', '.join(_MISSING)}); "
                      "reinstall the package (its wheel carries the library and its scripts)")


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
        out, at = [name], 0
        for key in keys:
            n = 1 + _group_len(_word(args[at]), args[at + 1:]) if at < len(args) else 0
            out += [key, *args[at:at + n]]
            at += n
        return out + list(args[at:])
    return [name, *keys, *args]


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
    """One command to send; `route`: the key whose node must answer it (Redis Cluster), or None. (A
    named tuple: one is built for every call, and a tuple is the cheapest immutable record.)"""

    args: tuple[Arg, ...]
    route: Arg | None


def route_of(command: Sequence[Arg]) -> Arg | None:
    """The first key of a module command (what routes it in a cluster); None without keys."""
    if len(command) < 2:
        return None
    name = _word(command[0]).upper()
    if name not in _FUNCTION_OF:
        return None
    at = FIRST_KEY.get(name)
    return command[1 + at] if at is not None and len(command) > 1 + at else None


def missing(error: BaseException) -> bool:
    """NOSCRIPT or "Function not found": the library or the script is not on this node; it never ran."""
    text = str(error)
    return (isinstance(error, redis.exceptions.NoScriptError) or "NOSCRIPT" in text
            or "function not found" in text.lower())


class Engine:
    """The engine a limiter asked for, the one it uses, and why. Shared by the calls of one limiter
    (threads or tasks): each field is replaced whole, never updated in place."""

    def __init__(self, wanted: Backend) -> None:
        self.wanted = wanted
        self.chosen: Backend = Backend.MODULE if wanted is Backend.AUTO else wanted
        self._why = ""
        self._lock = threading.Lock()

    def describe(self) -> tuple[Backend, str]:
        """The engine in use, and the reason it was chosen."""
        if self.wanted is not Backend.AUTO:
            return self.chosen, "asked for"
        return self.chosen, self._why or "the module answered"

    def forget(self) -> None:
        """Chooses anew on the next call (after an outage: a failover may land on another server)."""
        if self.wanted is Backend.AUTO:
            self._choose(Backend.MODULE, "")

    def _choose(self, engine: Backend, why: str) -> None:
        with self._lock:
            self.chosen, self._why = engine, why

    def run(self, command: Sequence[Arg]) -> Generator[Send, Any, Any]:
        """Sends `command` (a module command, or any other) as the engine in use takes it; under
        AUTO, moves to the next engine where the server refuses one. Returns the reply; raises the
        error reply that settles it."""
        auto = self.wanted is Backend.AUTO
        route = route_of(command)
        reasons: list[str] = []
        # A server without the library or the script (restarted, failed over, flushed) may be another
        # kind of server: under AUTO the module is asked again first, once.
        asked_again = not auto
        # The common case: the module is the engine and its command goes as it is.
        if self.chosen is Backend.MODULE:
            try:
                return (yield Send(tuple(command), route))
            except redis.exceptions.ResponseError as e:
                if not (auto and refuses(e)) or Call.of(command) is None:
                    raise
                reasons.append(_refusal(Backend.MODULE, e))
                asked_again = True
                self._choose(Backend.FUNCTIONS, self._why)
        call = Call.of(command)
        if call is None:
            return (yield Send(tuple(command), route))
        while True:
            engine = self.chosen
            try:
                result = yield Send(self._form(engine, call, command), route)
            except redis.exceptions.ResponseError as e:
                error: redis.exceptions.ResponseError | None = e
                if engine is not Backend.MODULE and missing(e):
                    if not asked_again:
                        asked_again = True
                        reasons.clear()
                        self._choose(Backend.MODULE, "")
                        continue
                    try:
                        result = yield from self._load_and_send(engine, call, route)
                        error = None
                    except redis.exceptions.ResponseError as again:
                        error = again
                if error is not None:
                    if not (auto and engine is not Backend.SCRIPTS and refuses(error)):
                        raise error
                    reasons.append(_refusal(engine, error))
                    self._choose(Backend.FUNCTIONS if engine is Backend.MODULE else Backend.SCRIPTS,
                                 self._why)
                    continue
            if reasons:
                reasons.append(f"using {engine.describe()}")
                self._choose(engine, "; ".join(reasons))
            return result

    @staticmethod
    def _form(engine: Backend, call: Call, command: Sequence[Arg]) -> tuple[Arg, ...]:
        if engine is Backend.FUNCTIONS:
            return call.fcall()
        if engine is Backend.SCRIPTS:
            return call.evalsha()
        return tuple(command)

    @staticmethod
    def _load_and_send(engine: Backend, call: Call, route: Arg | None) -> Generator[Send, Any, Any]:
        """`call` where the node answered that it has neither the library nor the script: EVAL (which
        caches the script), or FUNCTION LOAD REPLACE on that node and FCALL again."""
        if engine is Backend.SCRIPTS:
            return (yield Send(call.eval(), route))
        yield Send(("FUNCTION", "LOAD", "REPLACE", library()), route)
        return (yield Send(call.fcall(), route))


def _refusal(engine: Backend, error: BaseException) -> str:
    noperm = isinstance(error, redis.exceptions.NoPermissionError) or "NOPERM" in str(error)
    if engine is Backend.FUNCTIONS:
        return "FCALL or FUNCTION LOAD refused to this user (NOPERM)" if noperm else "FCALL unknown to this server"
    return "the module's commands refused to this user (NOPERM)" if noperm else "module not loaded"
