"""What the limiters do with an answer that is not a decision: four classes (outage, misconfigured,
conflict, usage), each with one behaviour, and the rules that sort error replies and transport
failures into them. Both are the contract's (``replies``, docs/errors.md): this module reads them and
interprets them; nothing here restates a rule. As `client/src/reply_class.rs`.

redis-py turns an error reply into an exception and drops the code of the ones it knows (``LOADING``,
``NOPERM``, ``ERR``, ...); `reply_text` gives the reply back as the server wrote it (``CODE text``), from
redis-py's own table of codes, so that the rules read what every other client reads.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, Mapping

import redis

from .contract import CONTRACT

__all__ = ["ReplyClass", "Behaviour", "behaviour", "class_of_reply", "class_of_transport", "reply_text",
           "split_reply"]

_REPLIES: Mapping[str, Any] = CONTRACT["replies"]


class ReplyClass(enum.Enum):
    """The class of an answer that is not a decision; its value is its name in the contract."""

    OUTAGE = "outage"
    MISCONFIGURED = "misconfigured"
    CONFLICT = "conflict"
    USAGE = "usage"


@dataclass(frozen=True)
class Behaviour:
    """What a class does, in the contract's words: the ``decision`` (``failure_policy`` or ``raise``),
    whether that decision is ``degraded``, what the ``breaker`` records (``failure``: Redis did not
    answer; ``answered``: it did, as a decision would; ``none``: nothing), the ``log`` (``outage``,
    ``once_per_cause``, ``once_per_key``, ``none``) and the ``counter``."""

    decision: str
    degraded: bool
    breaker: str
    log: str
    counter: str


#: What a class's ``breaker`` may say; another word is a contract this package cannot follow.
BREAKER_WORDS = ("failure", "answered", "none")


def _behaviour(c: Mapping[str, Any]) -> Behaviour:
    if c["breaker"] not in BREAKER_WORDS:
        raise ValueError(f"contract.json: the class {c['name']!r} tells the breaker {c['breaker']!r}, "
                         f"not one of {BREAKER_WORDS}")
    return Behaviour(c["decision"], bool(c["degraded"]), c["breaker"], c["log"], c["counter"])


_BEHAVIOURS: dict[ReplyClass, Behaviour] = {ReplyClass(c["name"]): _behaviour(c) for c in _REPLIES["classes"]}
_RULES: list[tuple[str, str | None, ReplyClass]] = [
    (r["code"], None if r["starts"] is None else str(r["starts"]).lower(), ReplyClass(r["class"]))
    for r in _REPLIES["rules"]
]
_OTHERWISE = ReplyClass(_REPLIES["otherwise"])
_TRANSPORT: dict[str, ReplyClass] = {k: ReplyClass(v) for k, v in _REPLIES["transport"].items()}


def behaviour(cls: ReplyClass) -> Behaviour:
    return _BEHAVIOURS[cls]


def split_reply(text: str) -> tuple[str, str]:
    """An error reply's code (its first word) and the text after the code and one space."""
    code, _, rest = text.partition(" ")
    return code, rest


def class_of_reply(text: str) -> ReplyClass:
    """The class of the error reply `text` (``CODE rest``): the first rule whose code is the reply's
    and whose ``starts`` (any when null) begins the rest, compared without regard to case."""
    code, rest = split_reply(text)
    lowered = rest.lower()
    for rule_code, starts, cls in _RULES:
        if rule_code == code and (starts is None or lowered.startswith(starts)):
            return cls
    return _OTHERWISE


def class_of_transport(kind: str) -> ReplyClass:
    """The class of a call that got no reply: ``timeout``, ``refused``, ``reset``, ``closed``."""
    return _TRANSPORT[kind]


# redis-py's table of error codes (`BaseParser.EXCEPTION_CLASSES`, redis-py 5 and later): a code to an
# exception class, or (ERR) a text to one. Read, not copied, so that a new redis-py's codes are known.
def _parser_table() -> Mapping[str, Any]:
    try:
        from redis._parsers.base import BaseParser
    except ImportError:  # an older layout: no codes known, the text is taken as it is
        return {}
    table: Mapping[str, Any] = BaseParser.EXCEPTION_CLASSES
    return table


_TABLE: Mapping[str, Any] = _parser_table()
_BY_CLASS: dict[type, str] = {}
_ERR_TEXTS: dict[tuple[type, str], str] = {}
for _code, _found in _TABLE.items():
    if isinstance(_found, dict):
        for _text, _cls in _found.items():
            _ERR_TEXTS[(_cls, _text)] = _code
    else:
        _BY_CLASS.setdefault(_found, _code)  # the first code of a class (NOAUTH, WRONGPASS: the same class)
_STRIPPED = set(_TABLE)  # codes redis-py takes off the text
_CODE = re.compile(r"^[A-Z][A-Z0-9_-]+$")  # a code: a word in capitals


def reply_text(error: BaseException) -> str | None:
    """The error reply an exception of redis-py stands for, as the server wrote it (``CODE text``); None
    for an exception that is no reply (a timeout, a refused or broken connection)."""
    cls, text = type(error), str(error)
    err = _ERR_TEXTS.get((cls, text))
    if err is not None:  # an ERR reply redis-py raises as its own class ("max number of clients reached")
        return f"{err} {text}"
    code = _BY_CLASS.get(cls)
    if code is not None and code != "ERR":  # LOADING, NOPERM, READONLY, ...: redis-py took the code off
        # A class of several codes (NOAUTH and WRONGPASS): the code it took off, where redis-py keeps it
        # (`status_code`, redis-py 8); the table's first code otherwise.
        status = getattr(error, "status_code", None)
        if isinstance(status, str) and _TABLE.get(status) is cls:
            code = status
        return f"{code} {text}" if text else code
    if not isinstance(error, redis.exceptions.ResponseError):
        return None  # a ConnectionError, a TimeoutError, an OSError: no reply
    first = split_reply(text)[0]
    if "ERR" in _STRIPPED and not (_CODE.match(first) and first not in _STRIPPED):
        return f"ERR {text}"  # redis-py took ERR off: what is left starts with the message
    return text  # a code redis-py does not know (WRONGTYPE, BUSY, ...) is left on the text
