"""The contract's test vectors (contract/vectors/*.json, written by the Rust reference): every case the
package can run, run, with the reference's output. A case this package skips is listed with its reason
in SKIPPED. Also: the package knows every kind, command and function the contract lists, and its copy of
the contract and of the library are the repository's."""

from __future__ import annotations

import ipaddress
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from redis._parsers.base import BaseParser

from redis_ratelimit import Backend, ReplyClass, command, engine, wait_steps
from redis_ratelimit.contract import CONTRACT, LIBRARY_FUNCTIONS
from redis_ratelimit.decision import Decision
from redis_ratelimit.errors import ConfigurationError, PolicyError, ReplyError, UsageError, from_redis
from redis_ratelimit.local_fallback import LocalLimiter
from redis_ratelimit.volume import Ahead, Volume
from redis_ratelimit.policy import Concurrency, FixedWindow, Policy, SlidingCounter, SlidingLog, TokenBucket
from redis_ratelimit.web import llm, response
from redis_ratelimit.web.caller import Caller, caller_tag, group_ip
from redis_ratelimit.web.forwarded import TrustedProxies
from redis_ratelimit.web.plan import limit_key

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "contract" / "vectors"

#: Kinds of the contract without a policy class here, and why.
NO_POLICY = {"reservation": "a reservation is a request of a token bucket policy (Limiter.reserve)"}
#: Vector cases skipped, by file and call, and why.
SKIPPED: dict[tuple[str, str], str] = {}

POLICIES: dict[str, type[Policy]] = {
    "token_bucket": TokenBucket, "fixed_window": FixedWindow, "sliding_counter": SlidingCounter,
    "sliding_log": SlidingLog, "concurrency": Concurrency,
}


def cases(name: str) -> list[dict[str, Any]]:
    data: dict[str, Any] = json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))
    return list(data["cases"])


def policy_of(spec: dict[str, Any]) -> Policy:
    kind = spec["kind"]
    # The batch option (volume.json), as written: absent is no batch.
    batched: dict[str, Any] = {"batch": spec["batch"]} if "batch" in spec else {}
    if "lease_ms" in spec and kind != "concurrency":
        batched["lease"] = timedelta(milliseconds=spec["lease_ms"])
    if kind == "token_bucket":
        return TokenBucket(capacity=spec["limit"], per_second=spec["rate"], **batched)
    length = timedelta(microseconds=spec["period_us"])
    if kind == "concurrency":
        return Concurrency(limit=spec["limit"], lease=length, **batched)
    return POLICIES[kind](limit=spec["limit"], window=length, **batched)  # type: ignore[call-arg]


#: The vector files this suite runs (each has its test below; errors.json's, on the wire, is in
#: test_errors_wire.py); any other file must be in SKIPPED_FILES.
RUN = {"policies", "commands", "replies", "callers", "forwarded", "http", "fallback", "errors", "engines", "volume",
       "llm_headers"}
#: Vector files this package does not run, and why.
SKIPPED_FILES: dict[str, str] = {}


def test_every_vector_file_is_run_or_listed_with_its_reason() -> None:
    files = {p.stem for p in VECTORS.glob("*.json")}
    assert files == RUN | set(SKIPPED_FILES), files ^ (RUN | set(SKIPPED_FILES))


def test_every_kind_command_and_function_of_the_contract_is_known_here() -> None:
    for kind in CONTRACT["kinds"]:
        assert kind["name"] in POLICIES or kind["name"] in NO_POLICY, kind["name"]
        if kind["name"] in POLICIES:
            declared = POLICIES[kind["name"]].KIND
            assert (declared.group, declared.command, declared.request, declared.refunds) == (
                kind["group"], kind["command"], kind["request"], kind["refunds"])
    functions = {f["name"] for f in CONTRACT["library"]["functions"] if f["command"]}
    assert set(engine.FUNCTIONS) == {c["name"] for c in CONTRACT["commands"] if c["function"]}
    assert set(LIBRARY_FUNCTIONS.values()) == functions
    for f in CONTRACT["library"]["functions"]:
        assert engine.script(f["name"]).sha == f["evalsha_sha1"], f["name"]


@pytest.mark.parametrize("case", cases("policies"), ids=lambda c: json.dumps(c["input"]))
def test_policies(case: dict[str, Any]) -> None:
    expected = case["output"]
    try:
        policy = policy_of(case["input"])
    except PolicyError as e:
        assert "error" in expected, f"refused: {e}"
        assert (e.field, e.reason) == (expected["error"]["field"], expected["error"]["expected"])
        return
    assert "error" not in expected, f"accepted: {policy}"
    assert list(policy.params) == expected["params"]
    assert policy.limit == expected["limit"]
    assert policy.period == expected["period_ns"] / 1_000_000_000


def _words(args: Any) -> list[str]:
    return [a.decode() if isinstance(a, bytes) else str(a) for a in args]


@pytest.mark.parametrize("case", cases("commands"), ids=lambda c: json.dumps(c["input"])[:120])
def test_commands(case: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(command, "request_id", lambda: "{request_id}")
    spec, expected = case["input"], case["output"]
    if spec["call"] == "cost" and "cost" in expected:  # a cost a caller wrote, read as the module reads it
        assert command.parse_cost(spec["cost"]) == expected["cost"]
        return
    if "usage" in expected:  # refused before sending: the same code and text in every language
        with pytest.raises(UsageError) as raised:
            if spec["call"] == "cost":
                command.parse_cost(spec["cost"])
            else:
                _build(spec)
        assert (raised.value.code, raised.value.message) == (expected["usage"]["code"], expected["usage"]["message"])
        return
    try:
        built = _build(spec)
    except UsageError as e:
        assert "error" in expected, f"refused: {e}"
        # core's render errors are the contract's words; the others name each language's own calls.
        if expected["error"] in CONTRACT["errors"]["render"].values():
            assert str(e) == expected["error"]
        return
    assert "error" not in expected, f"built {built}"
    assert _words(built) == expected["module"]
    library = engine.Call.of(built)
    assert _words(library.fcall()) == expected["fcall"] if library else expected["fcall"] is None
    assert _words(library.evalsha()) == expected["evalsha"] if library else expected["evalsha"] is None
    if library:
        assert _words(engine.module_command(built[0], library.keys, library.args)) == expected["module"]


def _build(spec: dict[str, Any]) -> list[Any]:
    """The command a vector's call builds (UsageError: refused before sending)."""
    limits = [(l["key"], policy_of(l["policy"]), l["cost"]) for l in spec["limits"]]
    call = spec["call"]
    holder = spec.get("holder", "")
    built: Any
    if call == "decide":
        built = command.decide(limits)
    elif call == "acquire":
        built = command.acquire(limits, holder)
    elif call == "reserve":
        # Without a token bucket nothing reserves: the wait checks them all now (check_all).
        request = wait_steps.reserve(limits, spec["max_wait_ms"] / 1000)
        built = (engine.module_command(request.command, request.keys, request.args) if request
                 else command.decide(limits))
    elif call == "refund":
        built = command.refund(*limits[0])
    elif call == "reserve_batch":
        key, policy, cost = limits[0]
        request = wait_steps.batch(key, policy, cost, spec["max"], spec["max_wait_ms"] / 1000)
        built = engine.module_command(request.command, request.keys, request.args)
    elif call == "inspect":
        built = command.inspect(limits[0][0], limits[0][1])
    elif call == "release":
        built = command.release(limits[0][0], holder)
    elif call == "renew":
        built = command.renew(limits[0][0], limits[0][1].period, holder)
    else:
        raise AssertionError(call)
    return list(built)


@pytest.mark.parametrize("case", cases("replies"), ids=lambda c: json.dumps(c["input"]))
def test_replies(case: dict[str, Any]) -> None:
    expected = case["output"]
    try:
        d = Decision.from_reply(case["input"]["reply"])
    except ReplyError:
        assert "error" in expected
        return
    assert "error" not in expected
    retry = expected["retry_after_ms"]
    assert (d.allowed, d.limit, d.remaining, d.limiting) == (
        expected["allowed"], expected["limit"], expected["remaining"], expected["limiting"])
    assert d.retry_after == (None if retry is None else retry / 1000)
    assert d.reset_after == expected["reset_after_ms"] / 1000
    assert (d.retry_after_secs(), d.reset_after_secs(), d.never_fits) == (
        expected["retry_after_secs"], expected["reset_after_secs"], expected["never_fits"])


@pytest.mark.parametrize("case", cases("callers"), ids=lambda c: json.dumps(c["input"])[:80])
def test_callers(case: dict[str, Any]) -> None:
    spec, expected = case["input"], case["output"]
    if spec["caller"] == "principal":
        caller = Caller.principal(spec["id"])
    elif spec["caller"] == "tenant":
        caller = Caller.tenant(spec["id"])
    elif spec["caller"] == "ip":
        caller = Caller.ip(group_ip(ipaddress.ip_address(spec["ip"]), spec["ipv6_prefix"]))
    else:
        caller = Caller.unknown()
    assert caller.key_part() == expected["key_part"]
    assert caller_tag(spec["prefix"], caller) == expected["tag"]
    assert str(caller) == expected["display"]
    if "policy" in spec:  # the key a limit of this name and policy gets: the one the web layers write
        assert limit_key(caller_tag(spec["prefix"], caller), spec["name"], policy_of(spec["policy"])) == \
            expected["limit_key"]
    else:
        assert "limit_key" not in expected


@pytest.mark.parametrize("case", cases("forwarded"), ids=lambda c: json.dumps(c["input"])[:100])
def test_forwarded(case: dict[str, Any]) -> None:
    spec = case["input"]
    trusted = TrustedProxies(spec["trusted_proxies"])
    headers = [(h["name"].encode(), bytes.fromhex(h["value_hex"])) for h in spec["headers"]]
    peer = ipaddress.ip_address(spec["peer"]) if spec["peer"] is not None else None
    client = trusted.client_ip(peer, headers)
    assert (str(client) if client is not None else None) == case["output"]["client_ip"]


def _decision(d: dict[str, Any]) -> Decision:
    retry = d["retry_after_ms"]
    return Decision(allowed=d["allowed"], limit=d["limit"], remaining=d["remaining"],
                    retry_after=None if retry is None else retry / 1000, reset_after=d["reset_after_ms"] / 1000,
                    limiting=d["limiting"], degraded=d["degraded"])


@pytest.mark.parametrize("case", cases("http"), ids=lambda c: json.dumps(c["input"])[:120])
def test_http(case: dict[str, Any]) -> None:
    spec, expected = case["input"], case["output"]
    d = _decision(spec["decision"])
    lim = spec["limit"]
    described = response.Described(lim["name"], lim["window_secs"], lim["cost"], lim["rate"])
    answer = spec["answer"]
    if answer == "served":
        headers: list[tuple[bytes, bytes]] = []
        response.add_headers(headers, d, described, spec["structured"])
        status, body = 200, b""
    else:
        if answer == "denied":
            a = response.denied(d, described, spec["structured"])
        elif answer == "concurrency_limited":
            a = response.concurrency_limited(d, described)
        else:
            a = response.unavailable(d, described, spec["structured"], spec["status"], spec["misconfigured"])
        headers, status, body = a.headers, a.status, a.body
    assert status == expected["status"]
    assert sorted([n.decode(), v.decode()] for n, v in headers) == expected["headers"]
    assert body.decode() == expected["body"]


def _budget(spec: dict[str, Any] | None) -> llm.Budget | None:
    return None if spec is None else llm.Budget(spec["limit"], spec["remaining"], spec["reset_ms"], spec["window_secs"])


@pytest.mark.parametrize("case", cases("llm_headers"), ids=lambda c: json.dumps(c["input"])[:120])
def test_llm_headers(case: dict[str, Any]) -> None:
    """The headers LLM clients read (web/llm.py), in the reference's order; set on raw ASGI headers
    they are the same."""
    requests, tokens = _budget(case["input"]["requests"]), _budget(case["input"]["tokens"])
    assert [list(h) for h in llm.llm_headers(requests, tokens)] == case["output"]
    raw: list[tuple[bytes, bytes]] = [(b"x-ratelimit-remaining-tokens", b"stale")]
    llm.add_llm_headers(raw, requests, tokens)
    expected = case["output"] + ([] if tokens else [["x-ratelimit-remaining-tokens", "stale"]])
    assert sorted([n.decode(), v.decode()] for n, v in raw) == sorted(expected)


def _fields(d: Decision) -> dict[str, Any]:
    return {
        "allowed": d.allowed, "limit": d.limit, "remaining": d.remaining,
        "retry_after_ms": None if d.retry_after is None else round(d.retry_after * 1000),
        "reset_after_ms": round(d.reset_after * 1000), "limiting": d.limiting,
    }


@pytest.mark.parametrize("case", cases("fallback"), ids=lambda c: json.dumps(c["input"]["scenario"]["steps"][0])[:80])
def test_fallback(case: dict[str, Any]) -> None:
    scenario, t0 = case["input"]["scenario"], case["input"]["t0_ns"]
    local = LocalLimiter(scenario["instances"])
    policies = [policy_of(p) for p in scenario["policies"]]
    got: list[dict[str, Any]] = []
    for step in scenario["steps"]:
        now = t0 + step["at_ms"] * 1_000_000
        limits = [(l["key"], policies[l["policy"]], l["cost"]) for l in step["limits"]]
        key, policy, cost = limits[0]
        op, lease_id = step["op"], step["id"]
        if op == "decide":
            got.append({"decision": _fields(local.decide(limits, now=now))})
        elif op == "acquire":
            got.append({"decision": _fields(local.acquire(limits, lease_id, now=now))})
        elif op == "release":
            got.append({"done": local.release(key, lease_id, now=now)})
        elif op == "renew":
            got.append({"done": local.renew(key, policy.period, lease_id, now=now)})
        elif op == "take":
            decision, taken = local.take(key, policy, cost, now=now)
            got.append({"decision": _fields(decision), "taken": taken})
        else:
            local.refund(key, policy, cost, now=now)
            got.append({})
    assert got == case["output"]["steps"]


#: An answer of the engine machine, as redis-py raises it (None: a reply that is not an error).
ANSWERS: dict[str, str | None] = {
    "ok": None,
    "unknown_command": "ERR unknown command 'RL.TOKEN', with args beginning with: 'rl:vector' ",
    "noperm": "NOPERM User nobody has no permissions to run the 'fcall' command",
    "function_missing": "ERR Function not found",
    "noscript": "NOSCRIPT No matching script. Please use EVAL.",
    "outage": "READONLY You can't write against a read only replica.",
    "error": "ERR invalid cost: must be a whole number >= 0",
}
SENT = {"FCALL": "fcall", "FUNCTION": "function_load", "EVALSHA": "evalsha", "EVAL": "eval"}
WANTED = {"auto": Backend.AUTO, "module": Backend.MODULE, "fcall": Backend.FUNCTIONS, "evalsha": Backend.SCRIPTS}


@pytest.mark.parametrize("case", cases("engines"), ids=lambda c: json.dumps(c["input"])[:120])
def test_engines(case: dict[str, Any]) -> None:
    """The engine machine (`Engine.run`, the contract's table interpreted) fed each call's answers: what
    it sends, how the call ends, the state and what `engine` reports after it."""
    machine = engine.Engine(WANTED[case["input"]["wanted"]])
    got = []
    for answers in case["input"]["calls"]:
        steps = machine.run(command.decide([("rl:vector", TokenBucket(10, 1.0), 1)]))
        sent, outcome = [], None
        send = next(steps)
        for answer in answers:
            sent.append(SENT.get(str(send.args[0]), "module"))
            assert send.load == (sent[-1] == "function_load")
            reply = ANSWERS[answer]
            try:
                send = steps.send(1) if reply is None else steps.throw(BaseParser.parse_error(reply))
            except StopIteration:
                outcome = "decided"
            except ConfigurationError:
                outcome = "misconfigured"
            except redis.exceptions.RedisError as e:
                outcome = "outage" if from_redis(e, 1.0, False).reply_class is ReplyClass.OUTAGE else "error"
            if outcome is not None:
                break
        assert outcome is not None, "the answers ran out before the call ended"
        got.append({"outcome": outcome, "reports": str(machine), "sent": sent, "state": machine.state})
    assert got == case["output"]["calls"]


@pytest.mark.parametrize("case", cases("volume"), ids=lambda c: c["input"].get("name") or json.dumps(c["input"]))
def test_volume(case: dict[str, Any]) -> None:
    """The pre-check and batched units (volume.py) on the vector's clock, each instance its own state,
    each command answered by the vector's replies in order: what is sent, decided and held."""
    spec, expected = case["input"], case["output"]
    if "policy" in spec:
        try:
            policy_of(spec["policy"])
        except PolicyError as e:
            assert (e.field, e.reason) == (expected["error"]["field"], expected["error"]["expected"])
            return
        assert expected == {"ok": True}
        return
    instances: dict[int, Volume] = {}
    got = []
    for step in spec["steps"]:
        volume = instances.setdefault(step.get("instance", 0), Volume(precheck=spec["precheck"]))
        limits = [(l["key"], policy_of(l["policy"]), l["cost"]) for l in step["limits"]]
        replies = iter(step["replies"])
        steps = volume.check(limits, step["at_ms"] * 1_000_000)
        sent: list[list[str]] = []
        try:
            send = next(steps)
            while True:
                sent.append(_words(send.cmd))
                reply = next(replies)
                if isinstance(send, Ahead):  # taken ahead: landed before the next step
                    send.landed(reply)
                    reply = None
                send = steps.send(reply)
        except StopIteration as done:
            decision: Decision = done.value
        assert next(replies, None) is None, "every reply used"
        held = {k: volume.batches.held(k, p) for k, p, _ in limits if p.batch is not None}
        got.append({"sent": sent, "decision": {**_fields(decision), "local": decision.local}, "held": held})
    assert got == expected["steps"]

