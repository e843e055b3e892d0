"""No contract literal re-typed in the package: the header names, the problem types, the problem bodies'
titles and details, the error texts the contract holds, the caller key's markers, every command's name
(the kinds' commands and the ``commands`` table's, ``RL.ALL`` too), the calls' and request forms' words
the holds' words, error texts, ledger name and default ttl, the LLM headers' names and the bounds' digits are read from the contract (`redis_ratelimit.contract`), never written out in
another module. A string literal (not a docstring) anywhere else in the package's source that holds one
(or is one, for a short word such as ``UPTO``, ``WEIGHT`` or ``GCRA``) fails this test, naming the file
and line."""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from pathlib import Path
from typing import Any, Iterator

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "redis_ratelimit"
CONTRACT: dict[str, Any] = json.loads((PACKAGE / "contract.json").read_text())
#: The modules that read the contract (and so may name its members), and generated copies.
READERS = {"contract.py"}


def literals() -> list[str]:
    """Every contract value a module could re-type: long enough to mean something on its own."""
    http = CONTRACT["http"]
    found = [v for k, v in http["headers"].items() if k != "state"]
    found += list(http["problem_types"].values())
    found += [m for m in http["caller"]["markers"].values() if len(m) > 1]
    errors = CONTRACT["errors"]
    found += list(errors["render"].values())
    found += [errors[k] for k in ("duplicate_key", "syntax", "state", "wrong_type")]
    found += [e["reply"] for k in CONTRACT["kinds"] for p in k["params"] for e in p["errors"]]
    found += list(CONTRACT["batching"]["errors"].values())
    problems = http.get("problems", {}).values()
    # A detail's fixed parts, between its placeholders and clauses ("' could not be checked").
    found += [part.strip() for p in problems for part in re.split(r"\{\w+\}|[:;]", p["detail"]) if len(part.strip()) >= 10]
    found += [w for call in CONTRACT.get("calls", {}).values() for w in call if not w.startswith("{")]
    found += command_names()
    holds = CONTRACT.get("holds", {})
    found += [e["reply"] for e in holds.get("errors", [])] + ([holds["ledger"]] if "ledger" in holds else [])
    llm = http.get("llm", {})  # each LLM header's name (x-ratelimit-remaining-tokens)
    found += [llm["name"].format(field=f, unit=u) for f in llm.get("fields", []) for u in llm.get("units", [])]
    return sorted({f for f in found if len(f) >= 5})


def command_names() -> list[str]:
    """Every command the contract names: each kind's (``RL.TOKEN``) and the commands table's (``RL.ALL``,
    ``RL.TOP``, the dialects)."""
    return sorted({k["command"] for k in CONTRACT["kinds"]} | {c["name"] for c in CONTRACT["commands"]})


def words() -> list[str]:
    """Contract values too short or too common to look for inside a text, so a literal that is one
    of them, whole, is re-typed: a call's option word (``UPTO``), a request form's (``WEIGHT``), a short
    command name (``GCRA``), a problem's title, what a detail calls a limit."""
    found = [w for call in CONTRACT.get("calls", {}).values() for w in call if not w.startswith("{") and len(w) < 5]
    found += [name for name in command_names() if len(name) < 5]  # GCRA
    found += [f["option"]["word"] for f in CONTRACT["request_forms"].values() if f["option"]]  # WEIGHT, DEDUP
    found += [p["title"] for p in CONTRACT["http"].get("problems", {}).values()]
    found += list(CONTRACT["http"].get("problem_what", {}).values())
    holds = CONTRACT.get("holds", {})
    found += holds.get("abandon", []) + holds.get("modes", [])  # CHARGE, RETURN, FINAL, PARTIAL
    return sorted(set(found))


def digits() -> list[re.Pattern[str]]:
    """The bounds and defaults a module could re-type as a number (those no unit conversion shares), as
    an int or a float (``300``, ``300.0``): a hold's default ttl too."""
    values = {CONTRACT["bounds"]["max_horizon_secs"], CONTRACT["fallback"]["max_keys"], CONTRACT["bounds"]["max_lease_limit"]}
    values |= {CONTRACT["holds"]["ttl_default_secs"]} if "ttl_default_secs" in CONTRACT.get("holds", {}) else set()
    return [re.compile(r"(?<![\d_.])" + "_?".join(str(v)) + r"(?:\.0*)?(?![\d_.])") for v in sorted(values)]


def strings(path: Path) -> Iterator[tuple[int, str]]:
    """The string literals of a module, but its docstrings (a string that is a statement of its own)."""
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    for i, tok in enumerate(tokens):
        if tok.type == getattr(tokenize, "FSTRING_MIDDLE", None):  # Python 3.12: an f-string's text
            yield tok.start[0], tok.string
            continue
        if tok.type != tokenize.STRING:
            continue
        before = next((t for t in reversed(tokens[:i]) if t.type not in (tokenize.NL, tokenize.COMMENT)), None)
        statement = before is None or before.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        if statement and tok.string.lstrip("rbuf").startswith(('"""', "'''")):
            continue
        yield tok.start[0], tok.string


def value(text: str) -> str | None:
    """A string literal's value (None for an f-string or bytes)."""
    try:
        v = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return v if isinstance(v, str) else None


def numbers(path: Path) -> Iterator[tuple[int, str]]:
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.NUMBER:
            yield tok.start[0], tok.string


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name not in READERS and "lua" not in p.parts)


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_contract_literal_is_retyped(path: Path) -> None:
    wanted = literals()
    found = [f"{path.name}:{line}: {text[:80]} holds {w!r}" for line, text in strings(path) for w in wanted
             if w.lower() in text.lower()]
    whole = {w.lower() for w in words()}
    found += [f"{path.name}:{line}: {text[:80]} is a contract word" for line, text in strings(path)
              if (value(text) or "").lower() in whole]
    found += [f"{path.name}:{line}: the bound {text}" for line, text in numbers(path) for d in digits() if d.fullmatch(text)]
    assert not found, "read these from redis_ratelimit.contract:\n" + "\n".join(found)


def test_the_guard_sees_a_retyped_literal(tmp_path: Path) -> None:
    """The guard itself: a module that writes a header name and a bound is caught; a docstring is not."""
    bad = tmp_path / "bad.py"
    bad.write_text('"""Writes ratelimit-remaining in prose."""\nNAME = "RateLimit-Remaining"\nMAX = 100_000\n'
                   'CMD = ["RL.TAKE", "k", "UPTO"]\nDETAIL = f"rate limit \'{name}\' exceeded: retry in {s} s"\n'
                   'ALL = ["RL.ALL", "k"]\nPEEK = ["rl.token", "k", 1, 1, 0]\nDIALECT = "GCRA"\nLEASE = ["h", "WEIGHT", 2]\n'
                   'TTL = 300.0\nLLM = "X-RateLimit-Remaining-Tokens"\nOK = 3000\n')
    assert [line for line, _ in strings(bad) if "ratelimit-remaining" in _.lower()] == [2, 11]
    assert sorted({line for line, text in numbers(bad) for d in digits() if d.fullmatch(text)}) == [3, 10]
    held = [line for line, text in strings(bad) for w in literals() if w.lower() in text.lower()]
    assert sorted(set(held)) == [2, 4, 5, 6, 7, 11]
    assert [line for line, text in strings(bad) if value(text) in words()] == [4, 8, 9]
    assert value('"Too Many Requests"') in words()
