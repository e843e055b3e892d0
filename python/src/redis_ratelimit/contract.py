"""The contract every client reads (``contract/contract.json``, written by the Rust reference and shipped
here as package data): the kinds, the commands and where their keys are, the bounds, the error texts,
the library's functions and how its EVALSHA scripts are made, the HTTP layer's names and problem texts,
and the commands of the calls beside the decisions. Nothing here restates a rule: this module only reads
the file and interprets its key rules."""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence, Union

from . import _package_data as package_data

__all__ = ["CONTRACT", "BOUNDS", "ERRORS", "HTTP", "BATCHING", "BATCH_ERRORS", "kind", "command", "key_positions", "group_len",
           "param_error", "request_error", "LIBRARY_FUNCTIONS", "FIRST_KEY", "PROBLEMS", "PROBLEM_WHAT", "fill", "CALLS", "call",
           "ALL_COMMAND", "request_option", "HOLDS", "hold_call", "hold_error"]

Arg = Union[str, bytes, int, float]

CONTRACT: Mapping[str, Any] = json.loads(package_data.read("contract.json"))
BOUNDS: Mapping[str, int] = CONTRACT["bounds"]
ERRORS: Mapping[str, Any] = CONTRACT["errors"]
HTTP: Mapping[str, Any] = CONTRACT["http"]

#: Each problem body's texts by its type's name (``http.problems``): its ``title``, and its ``detail``
#: with ``{placeholders}`` (`fill`): ``{name}``, ``{what}`` (`PROBLEM_WHAT`), ``{limit}``, ``{cost}``,
#: ``{retry_after_secs}``.
PROBLEMS: Mapping[str, Mapping[str, str]] = HTTP["problems"]
#: What a detail's ``{what}`` calls a limit: ``rate`` or ``concurrency``.
PROBLEM_WHAT: Mapping[str, str] = HTTP["problem_what"]
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def fill(template: str, **values: object) -> str:
    """`template` with each ``{placeholder}`` that `values` names replaced, in one pass (a value is never
    read as a template: a limit may be named ``{cost}``)."""
    return _PLACEHOLDER.sub(lambda m: str(values[m[1]]) if m[1] in values else m[0], template)


#: The calls a client makes beside the decisions (``calls``: ``take``, ``reserve_upto``, ``refund``,
#: ``inspect``, ``inspect_peek``, ``release``, ``renew``), each its command's words with placeholders.
CALLS: Mapping[str, Sequence[str]] = CONTRACT["calls"]


def call(name: str, **values: Arg) -> list[Arg]:
    """The command of the contract's call `name`, each ``{placeholder}`` word replaced by its value as it
    is (``call("take", key=k, p1=.., p2=.., max=5)``); a missing value is a KeyError."""
    return [values[w[1:-1]] if w.startswith("{") else w for w in CALLS[name]]


#: Token-budget holds (RL.HOLD / RL.SETTLE, docs/commands.md): the ``calls`` (``hold``, ``settle``), the
#: ``abandon`` words and ``abandon_default``, the ``modes`` (FINAL, PARTIAL), the ``held_kinds``, the default
#: ``ledger`` template (``{tag}``), the bounds (``max_ttl_secs``, ``max_id_bytes``) and the ``errors``.
HOLDS: Mapping[str, Any] = CONTRACT["holds"]


def hold_call(name: str, **values: Arg) -> list[Arg]:
    """The command of the holds' call `name` (``hold``, ``settle``), each ``{placeholder}`` replaced."""
    return [values[w[1:-1]] if w.startswith("{") else w for w in HOLDS["calls"][name]]


def hold_error(field: str, about: str = "") -> str:
    """The error reply for a hold's field (``ttl``, ``id``, ``key``, ``ledger``): the first whose text
    holds `about` (a field with several errors: ``ledger``'s ``hash tag``)."""
    for e in HOLDS["errors"]:
        if e["field"] == field and about in e["reply"]:
            return str(e["reply"])
    raise KeyError((field, about))


#: Batched units and the pre-check (docs/high-volume.md): the adaptive size's `start`, `grow` and
#: `share`, `refund_margin_ms`, `sweep_ms`, `max_keys`, `precheck_max_keys`, the default `lease_ms`,
#: the option's `errors`, and per kind that
#: batches where its units' window ends (`none`, `reset`, `reset_minus_window`).
BATCHING: Mapping[str, Any] = CONTRACT["batching"]
#: What the batch option must be: ``kind`` (a kind that takes no refunds: ``{kind}`` its name),
#: ``batch`` and ``lease`` (the fields' expected texts).
BATCH_ERRORS: Mapping[str, str] = BATCHING["errors"]

_KINDS: dict[str, Mapping[str, Any]] = {k["name"]: k for k in CONTRACT["kinds"]}
_BY_GROUP: dict[str, Mapping[str, Any]] = {k["group"]: k for k in CONTRACT["kinds"]}
_COMMANDS: dict[str, Mapping[str, Any]] = {c["name"]: c for c in CONTRACT["commands"]}
_FORMS: Mapping[str, Any] = CONTRACT["request_forms"]

#: The command deciding limits of any kinds in one call (``RL.ALL``): the one whose keys are its groups'.
ALL_COMMAND: str = next(name for name, c in _COMMANDS.items() if c["keys"]["rule"] == "groups")

#: Each module command the library implements, and its function (``RL.TOKEN``: ``rl_token``).
LIBRARY_FUNCTIONS: dict[str, str] = {c["name"]: c["function"] for c in CONTRACT["commands"] if c["function"]}


def _first_key(rule: Mapping[str, Any]) -> int | None:
    return {"at": rule.get("index"), "every": 0, "groups": 0, "ledger_groups": 0, "ledger_pairs": 0}.get(rule["rule"])


#: Where each command's first key is among its arguments (what routes it in a cluster); None: no keys.
FIRST_KEY: dict[str, int | None] = {name: _first_key(c["keys"]) for name, c in _COMMANDS.items()}


def kind(name: str) -> Mapping[str, Any]:
    """A kind's declaration by its name (``token_bucket``)."""
    return _KINDS[name]


def command(name: str) -> Mapping[str, Any] | None:
    """A command's declaration (case-insensitive), or None for a command the contract does not list."""
    return _COMMANDS.get(name.upper())


def param_error(kind_name: str, param: str, index: int = 0) -> str:
    """What a kind's parameter must be: its `index`-th error text, in the order they are checked."""
    for p in _KINDS[kind_name]["params"]:
        if p["name"] == param:
            return str(p["errors"][index]["expected"])
    raise KeyError((kind_name, param))


def request_error(field: str) -> str:
    """What a request's field (``cost``, ``id``, ``weight``, ``max_wait``, ``max``) must be."""
    for e in ERRORS["requests"]:
        if e["field"] == field:
            return str(e["expected"])
    raise KeyError(field)


def _word(arg: Arg) -> str:
    return arg.decode() if isinstance(arg, bytes) else str(arg)


def request_len(form: str, rest: Sequence[Arg]) -> int:
    """How many arguments at the start of `rest` a request of `form` takes: its values, and its option
    when the next argument names it."""
    spec = _FORMS[form]
    option = spec["option"]
    if option and len(rest) > 1 and _word(rest[1]).upper() == option["word"]:
        return 2 + int(option["values"])
    return len(spec["args"])


def request_option(form: str) -> str:
    """The option word of a request form that has one (``lease``: ``WEIGHT``; ``id``: ``DEDUP``)."""
    return str(_FORMS[form]["option"]["word"])


def group_len(group: Arg, rest: Sequence[Arg]) -> int | None:
    """How many arguments an RL.ALL group of `group` takes after its key and kind name (its two
    parameters and its request); None for a name that is no kind's group."""
    k = _BY_GROUP.get(_word(group).upper())
    if k is None:
        return None
    return 2 + request_len(k["request"], rest[2:])


def key_positions(name: str, args: Sequence[Arg]) -> list[int]:
    """Where a command's keys are among its arguments (after its name), by the contract's rule."""
    spec = _COMMANDS[name.upper()]["keys"]
    rule = spec["rule"]
    if rule == "at":
        return [spec["index"]] if spec["index"] < len(args) else []
    if rule == "every":
        return list(range(0, len(args), spec["step"]))
    if rule == "ledger_pairs":  # the ledger, then key units pairs
        return [0, *range(spec["pairs_from"], len(args), 2)] if args else []
    if rule == "ledger_groups":  # the ledger, then RL.ALL's groups
        start = spec["groups_from"]
        return [0, *(start + i for i in _group_keys(args[start:]))] if args else []
    if rule == "groups":
        return _group_keys(args)
    return []


def _group_keys(args: Sequence[Arg]) -> list[int]:
    """Where the keys of RL.ALL's groups are among `args`."""
    at, keys = 0, []
    while at + 1 < len(args):
        keys.append(at)
        n = group_len(args[at + 1], args[at + 2:])
        if n is None:
            break
        at += 2 + n
    return keys
