"""The engine's translations (sans-IO), and the EVALSHA scripts and the library it reads (the built sdist
and wheel in test_package_data.py)."""

from __future__ import annotations

from typing import Sequence

import pytest

from redis_ratelimit import command
from redis_ratelimit.contract import CONTRACT
from redis_ratelimit.engine import FUNCTIONS, Call, library, module_command, script, script_source
from redis_ratelimit.policy import Concurrency, FixedWindow, SlidingLog, TokenBucket
from servers import REPO


def words(args: Sequence[object]) -> list[str]:
    return [str(a) for a in args]


def call(text: str) -> Call:
    found = Call.of(text.split(" "))
    assert found is not None
    return found


def test_module_commands_become_library_calls_with_their_keys_first() -> None:
    assert words(call("RL.TOKEN a 10 5 1 b 20 1 1").fcall()) == [
        "FCALL", "rl_token", "2", "a", "b", "10", "5", "1", "20", "1", "1"]
    assert words(call("RL.ALL a SLIDE 5 60 r DEDUP b TOKEN 10 5 1").fcall()) == [
        "FCALL", "rl_all", "2", "a", "b", "SLIDE", "5", "60", "r", "DEDUP", "TOKEN", "10", "5", "1"]
    assert words(call("RL.ALL a ACQUIRE 5 30 h WEIGHT 2 b RESERVE 10 5 1 2.000 c FIXED 5 1 1").keys) == [
        "a", "b", "c"]
    assert words(call("RL.REFUND TOKEN k 10 5 2").fcall()) == ["FCALL", "rl_refund", "1", "k", "TOKEN", "10", "5", "2"]
    assert words(call("RL.RELEASE k id").fcall()) == ["FCALL", "rl_release", "1", "k", "id"]
    assert words(call("RL.INSPECT k").evalsha())[:2] == ["EVALSHA", script("rl_inspect").sha]
    assert Call.of(["RL.TOP", 10]) is None, "module-only: sent as it is"
    assert Call.of(["INFO", "server"]) is None


@pytest.mark.parametrize("text", ["RL.TOKEN a 10 5 1 b 20 1 1", "RL.ALL a SLIDE 5 60 r DEDUP b TOKEN 10 5 1",
                                  "RL.ALL a ACQUIRE 5 30 h WEIGHT 2 b FIXED 5 1 1", "RL.REFUND FIXED k 5 1 1",
                                  "RL.FIXED k 5 1 1", "RL.INSPECT k 10 5"])
def test_keys_and_arguments_make_the_module_command_again(text: str) -> None:
    c = call(text)
    assert words(module_command(text.split(" ")[0], c.keys, c.args)) == text.split(" ")


def test_checks_are_one_call() -> None:
    route, overall = TokenBucket(10, 5.0), TokenBucket(100, 0.5)
    assert command.decide([("rl:{c}:r", route, 1), ("rl:{c}:all", overall, 1)]) == [
        "RL.TOKEN", "rl:{c}:r", "10", "5", 1, "rl:{c}:all", "100", "0.5", 1]
    fixed, log = FixedWindow(5, 1.5), SlidingLog(5, 60)
    assert command.decide([("k", fixed, 2)]) == ["RL.FIXED", "k", "5", "1.500", 2]
    mixed = command.decide([("a", fixed, 1), ("b", log, 1)])
    assert mixed[:9] == ["RL.ALL", "a", "FIXED", "5", "1.500", 1, "b", "SLIDE", "5"]
    assert command.acquire([("c", Concurrency(5, 30), 2)], "id1") == ["RL.ACQUIRE", "c", "5", "30.000", "id1", "WEIGHT", 2]
    assert command.refund("b", fixed, 1) == ["RL.REFUND", "FIXED", "b", "5", "1.500", 1]


def test_the_scripts_end_in_one_call_of_their_function() -> None:
    source = script_source("rl_token")
    assert source.startswith("-- GENERATED")
    assert "register_function" not in source
    assert source.endswith("return build().rl_token(KEYS, ARGV, sec, usec, ns)\n")


def test_the_scripts_are_the_repositorys_and_have_the_contracts_sha1s() -> None:
    shas = {f["name"]: f["evalsha_sha1"] for f in CONTRACT["library"]["functions"]}
    for name in (f.lower().replace(".", "_") for f in FUNCTIONS):
        assert script_source(name) == (REPO / "lua/scripts" / f"{name}.lua").read_text(), name
        assert script(name).sha == shas[name], name


def test_the_installed_library_is_the_repositorys() -> None:
    assert library() == (REPO / "lua/ratelimit.lua").read_text()
