"""The web layer's pure parts, no server: caller keys (their properties), forwarding headers, headers and
problem bodies, route matching, configuration mistakes. The Rust layer's own cases are the contract's
vectors (test_contract_vectors.py)."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redis
import redis.asyncio as aioredis

from redis_ratelimit import AsyncLimiter, FailurePolicy, Limiter
from redis_ratelimit.decision import Decision
from redis_ratelimit.policy import Concurrency, SlidingCounter, SlidingLog, TokenBucket
from redis_ratelimit.web import AccessLists, Access, Caller, ConfigError, RateLimitConfig, Route
from redis_ratelimit.web.caller import MAX_CALLER_KEY_BYTES, caller_tag, group_ip
from redis_ratelimit.web.config import under_prefix
from redis_ratelimit.web.forwarded import MAX_HOPS, TrustedProxies, for_parameter, hops
from redis_ratelimit.web.plan import Plan, plan
from redis_ratelimit.web.policies import window_secs
from redis_ratelimit.web.response import Described, add_headers, denied, forbidden, unavailable

def ip(text: str) -> Any:
    return ipaddress.ip_address(text)


def user(id: str) -> str:
    return Caller.principal(id).key_part()


def tenant(id: str) -> str:
    return Caller.tenant(id).key_part()


# -- caller keys ------------------------------------------------------------------------------------


# The Rust layer's caller keys, forwarding chains and answers are the contract's vectors, which
# tests/test_contract_vectors.py runs; the tests here are the package's own.


def test_key_parts_escape_braces_and_hash_long_ids_and_leave_the_rest_as_it_was() -> None:
    assert user("ada") == "user:ada"
    assert tenant("acme") == "tenant:acme"
    assert user("50%:x.esc:y") == "user:50%:x.esc:y"
    assert user("é日本") == "user:é日本"
    assert Caller.ip(ip("2001:db8::")).key_part() == "ip:2001:db8::"
    assert Caller.unknown().key_part() == "unknown"
    assert user("a}x1") == "user.esc:a%7Dx1"
    assert user("a}x2") == "user.esc:a%7Dx2"
    assert user("{x}") == "user.esc:%7Bx%7D"
    assert tenant("50%{") == "tenant.esc:50%25%7B"
    at_bound = "a" * (MAX_CALLER_KEY_BYTES - len("user:"))
    assert user(at_bound) == f"user:{at_bound}"
    hashed = user(at_bound + "a")
    assert hashed.startswith("user.sha256:") and len(hashed) == 76
    assert hashed != user(at_bound + "b")
    assert len(user("x" * 60_000)) == 76
    assert len(user("}" * 40)) == 76
    assert len(tenant("}" * 40)) == 78
    assert user("abc" * 50) == "user.sha256:" + hashlib.sha256(("abc" * 50).encode()).hexdigest()
    # Bytes, not characters, count toward the bound: 62 two-byte characters are 124 bytes + "user:".
    assert user("é" * 61) == "user:" + "é" * 61
    assert user("é" * 62).startswith("user.sha256:")


def test_braces_never_cut_the_tag_short() -> None:
    def key(c: Caller) -> str:
        return f"{caller_tag('rl', c)}:api"

    assert key(Caller.principal("a}x1")) == "rl:{user.esc:a%7Dx1}:api"
    assert key(Caller.tenant("{x}")) == "rl:{tenant.esc:%7Bx%7D}:api"
    assert key(Caller.principal("a}:api:{user:b")) != key(Caller.principal("b"))
    assert key(Caller.principal("ada")) == "rl:{user:ada}:api"


def redis_hash_tag(key: str) -> str | None:
    open_ = key.find("{")
    if open_ < 0:
        return None
    close = key.find("}", open_ + 1)
    return key[open_ + 1 : close] if close > open_ + 1 else None


ids = st.one_of(
    st.from_regex(r"[a-z0-9:._-]{0,16}", fullmatch=True),
    st.from_regex(r"[a-z{}%:.]{0,16}", fullmatch=True),
    st.lists(st.sampled_from(["{", "}", "%", "%7B", "%7D", ".esc:", ".sha256:", "user", ":", "x"]), max_size=12).map(
        "".join
    ),
    st.text(max_size=200),
    st.tuples(st.integers(MAX_CALLER_KEY_BYTES - 8, MAX_CALLER_KEY_BYTES + 8), st.sampled_from(["", "{", "}", "a}"])).map(
        lambda t: "y" * t[0] + t[1]
    ),
    st.tuples(st.sampled_from(["", "{", "a}"]), st.integers(1_000, 70_000)).map(lambda t: t[0] + "z" * t[1]),
)
callers = st.one_of(ids.map(Caller.principal), ids.map(Caller.tenant))


@settings(max_examples=500, deadline=None)
@given(callers)
def test_a_key_is_prefixed_tagged_by_the_whole_caller_and_bounded(c: Caller) -> None:
    key = f"{caller_tag('rl', c)}:api"
    part = c.key_part()
    assert key.startswith("rl:")
    assert key.count("{") == 1 and key.count("}") == 1
    assert redis_hash_tag(key) == part
    assert len(part.encode()) <= MAX_CALLER_KEY_BYTES
    plain = str(c)
    if "{" not in c.id and "}" not in c.id and len(plain.encode()) <= MAX_CALLER_KEY_BYTES:
        assert part == plain
    else:
        assert ".esc:" in part or ".sha256:" in part


@settings(max_examples=200, deadline=None)
@given(st.lists(callers, min_size=1, max_size=30))
def test_distinct_callers_have_distinct_keys(given_callers: list[Caller]) -> None:
    every: set[Caller] = {Caller.unknown(), Caller.ip(ip("192.0.2.1"))}
    for c in given_callers:
        tail = c.key_part().partition(":")[2]
        decoded = c.id.replace("%7D", "}").replace("%7B", "{").replace("%25", "%")
        for forged in (c.id, decoded, tail, f".esc:{tail}", f".sha256:{tail}"):
            every.add(Caller.principal(forged))
            every.add(Caller.tenant(forged))
        every.add(c)
    assert len({c.key_part() for c in every}) == len(every)


def test_ipv6_is_grouped_and_mapped_ipv4_is_ipv4() -> None:
    assert group_ip(ip("2001:db8:1:2:aaaa::1"), 64) == ip("2001:db8:1:2::")
    assert group_ip(ip("2001:db8:1:2:aaaa::1"), 48) == ip("2001:db8:1::")
    assert group_ip(ip("2001:db8::1"), 128) == ip("2001:db8::1")
    assert group_ip(ip("2001:db8::1"), 0) == ip("::")
    assert group_ip(ip("::ffff:203.0.113.7"), 64) == ip("203.0.113.7")
    assert group_ip(ip("203.0.113.7"), 64) == ip("203.0.113.7")
    assert str(Caller.ip(group_ip(ip("2001:db8:1:2:aaaa::1"), 64))) == "ip:2001:db8:1:2::"


# -- forwarding headers -----------------------------------------------------------------------------


# How each way of writing a node reads is the contract's forwarded vectors (test_contract_vectors.py).


def test_forwarded_elements_give_their_for_parameter_in_any_case() -> None:
    assert for_parameter(b"for=192.0.2.1;proto=https") == b"192.0.2.1"
    assert for_parameter(b' proto=https; FOR="[2001:db8::1]"') == b'"[2001:db8::1]"'
    assert for_parameter(b"by=10.0.0.1") is None
    assert for_parameter(b"fo") is None


def test_hops_are_read_newest_first_across_lines_and_forwarded_alone_when_present() -> None:
    h = [(b"x-forwarded-for", b"192.0.2.1, 192.0.2.2"), (b"x-forwarded-for", b"192.0.2.3")]
    assert list(hops(h)) == [ip("192.0.2.3"), ip("192.0.2.2"), ip("192.0.2.1")]
    h = [(b"forwarded", b"for=\xff"), (b"x-forwarded-for", b"192.0.2.9")]
    assert list(hops(h)) == [None]
    h = [(b"x-forwarded-for", "été, 192.0.2.4".encode())]
    assert list(hops(h)) == [ip("192.0.2.4"), None]
    assert list(hops([])) == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.one_of(st.none(), st.binary(max_size=200)))
def test_arbitrary_header_bytes_never_raise(xff: bytes, fwd: bytes | None) -> None:
    h = [(b"x-forwarded-for", xff)]
    if fwd is not None:
        h.append((b"forwarded", fwd))
        assert len(list(hops(h))) == len(fwd.split(b","))
    else:
        assert len(list(hops(h))) == len(xff.split(b","))
    trusted = TrustedProxies(["10.0.0.0/8"])
    assert trusted.client_ip(ip("198.51.100.9"), h) == ip("198.51.100.9")
    assert trusted.client_ip(ip("10.0.0.1"), h) is not None


def test_ten_thousand_hops_cost_at_most_max_hops() -> None:
    trusted = TrustedProxies(["10.0.0.0/8"])
    proxy = ip("10.0.0.1")
    chain = [f"198.51.{i // 256 % 256}.{i % 256}" for i in range(10_000)] + ["203.0.113.7"]
    assert trusted.client_ip(proxy, [(b"x-forwarded-for", ", ".join(chain).encode())]) == ip("203.0.113.7")
    chain = [f"10.0.{i // 256 % 256}.{i % 256}" for i in range(10_000)]
    chain[10_000 - MAX_HOPS - 1] = "203.0.113.8"
    header = [(b"x-forwarded-for", ",".join(chain).encode())]
    assert trusted.client_ip(proxy, header) == ip(chain[10_000 - MAX_HOPS])
    chain[10_000 - MAX_HOPS] = "203.0.113.9"
    assert trusted.client_ip(proxy, [(b"x-forwarded-for", ",".join(chain).encode())]) == ip("203.0.113.9")
    lines = [(b"x-forwarded-for", hop.encode()) for hop in chain]
    assert trusted.client_ip(proxy, lines) == ip("203.0.113.9")


# -- headers and bodies -----------------------------------------------------------------------------

API = Described("api", 2, 1)


def fields(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in headers}


def test_headers_of_an_allowed_decision_and_of_a_degraded_one() -> None:
    h: list[tuple[bytes, bytes]] = [(b"ratelimit-limit", b"stale")]
    add_headers(h, Decision(True, 10, 9, 0.0, 0.2), API, structured=True)
    assert fields(h) == {
        "ratelimit-limit": "10",
        "ratelimit-remaining": "9",
        "ratelimit-reset": "1",
        "ratelimit-policy": '"api";q=10;w=2',
        "ratelimit": '"api";r=9;t=1',
    }
    assert len(h) == 5, "replaced, not added twice"
    h = []
    add_headers(h, Decision(True, 10, 10, 0.0, 0.0, degraded=True), API, structured=True)
    assert fields(h) == {"ratelimit-limit": "10", "ratelimit-policy": '"api";q=10;w=2', "x-ratelimit-degraded": "true"}


def test_the_429_body_is_the_rust_layers_byte_for_byte() -> None:
    answer = denied(Decision(False, 10, 0, 0.2, 2.0), API, structured=False)
    assert answer.status == 429
    assert answer.body == (
        b'{"detail":"rate limit \'api\' exceeded: retry in 1 s","limit":"api","quota":10,"remaining":0,'
        b'"retry_after_seconds":1,"status":429,"title":"Too Many Requests","type":"urn:redis-ratelimit:rate-limited"}'
    )
    assert fields(answer.headers) == {
        "content-type": "application/problem+json",
        "retry-after": "1",
        "ratelimit-limit": "10",
        "ratelimit-remaining": "0",
        "ratelimit-reset": "2",
    }
    never = denied(Decision(False, 10, 10, None, 0.0), Described("api", 2, 15), structured=False)
    body = json.loads(never.body)
    assert body["type"] == "urn:redis-ratelimit:cost-exceeds-limit" and body["cost"] == 15
    assert "retry-after" not in fields(never.headers)
    assert json.loads(forbidden().body)["type"] == "urn:redis-ratelimit:denied"
    outage = unavailable(Decision(False, 10, 0, 1.0, 0.0, degraded=True), API, False, 503, misconfigured=False)
    assert outage.status == 503 and json.loads(outage.body)["detail"] == (
        "rate limit 'api' could not be checked: the rate limiter is unavailable and fails closed; retry in 1 s"
    )


def test_windows_are_the_rust_layers() -> None:
    assert window_secs(TokenBucket(10, 5.0)) == 2
    assert window_secs(TokenBucket(5, 0.1)) == 50
    assert window_secs(TokenBucket(3, 2.0)) == 1
    assert window_secs(TokenBucket(1, 1000.0)) == 1
    assert window_secs(SlidingLog(100, 60.0)) == 60


# -- routes and configuration -----------------------------------------------------------------------


def test_prefixes_match_whole_segments() -> None:
    assert under_prefix("/api", "/api")
    assert under_prefix("/api/items", "/api")
    assert not under_prefix("/apiary", "/api")
    assert not under_prefix("/ap", "/api")
    assert under_prefix("/api/x", "/api/")
    assert not under_prefix("/api", "/api/")
    assert under_prefix("/anything", "/")


TB = TokenBucket(10, 5.0)
# Made, never called: no server is needed to plan requests.
LIMITER = AsyncLimiter(aioredis.Redis(port=1), FailurePolicy.open())


def test_the_middleware_needs_an_async_limiter() -> None:
    with pytest.raises(ConfigError, match="the middleware needs an AsyncLimiter"):
        RateLimitConfig(Limiter(redis.Redis(port=1), FailurePolicy.open()), global_limit=TB)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "the layer limits nothing"),
        ({"routes": [Route("a", "/a", TB), Route("a", "/b", TB)]}, "route 'a' is defined twice"),
        ({"routes": [Route("a", "/a", TB), Route("b", "/a", TB)]}, "routes 'a' and 'b' have the same prefix '/a'"),
        ({"routes": [Route("a", "a", TB)]}, "route 'a': the prefix 'a' must start with '/'"),
        ({"routes": [Route("all", "/a", TB)]}, "route 'all': the name is reserved"),
        ({"routes": [Route("a", "/a", Concurrency(2, 30.0))]}, "limit 'a': expected a rate policy"),
        ({"concurrency": [Route("a", "/a", TB)]}, "limit 'a': expected a concurrency policy"),
        ({"global_limit": TB, "ipv6_prefix": 129}, "IPv6 prefix /129"),
        ({"routes": [Route("a", "/a", TB)], "shadow": ["b"]}, "shadow 'b': there is no limit of that name (limits: 'a')"),
        ({"global_limit": TB, "shadow": ["x"]}, "(limits: 'all')"),
    ],
)
def test_configurations_that_cannot_work_are_refused_naming_the_route(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        RateLimitConfig(LIMITER, **kwargs)


@pytest.mark.parametrize("policy", ["10 per fortnight", 10, None, TokenBucket],
                         ids=["no-rate-string", "int", "none", "a-class"])
def test_a_route_without_a_policy_is_refused_when_built(policy: Any) -> None:
    """Accepted before, then every request answered 500 (UsageError: not a policy)."""
    with pytest.raises(ConfigError, match=r"route 'api': policy must be a policy \(TokenBucket, .*\) or a function "
                                          r"of the Caller giving one, not "):
        Route("api", "/api", policy)


def test_a_rate_string_is_the_sliding_counter_it_means() -> None:
    assert Route("api", "/api", "10/minute").policy == SlidingCounter(limit=10, window=60)
    assert RateLimitConfig(LIMITER, global_limit="5 per 15 minutes").global_limit == SlidingCounter(5, 900)
    with pytest.raises(ConfigError, match=re.escape("not '10/fortnight' (str) (nor a rate string")):
        Route("api", "/api", "10/fortnight")
    with pytest.raises(ConfigError, match=re.escape("limit 'api': expected a concurrency policy")):
        RateLimitConfig(LIMITER, concurrency=[Route("api", "/api", "10/minute")])


def test_a_route_cost_must_be_a_function() -> None:
    with pytest.raises(ConfigError, match=re.escape("route 'api': cost must be a function of the ASGI scope")):
        Route("api", "/api", TB, 2)  # type: ignore[arg-type]


@pytest.mark.parametrize("parameter", ["global_limit", "global_concurrency"])
def test_a_global_limit_without_a_policy_is_refused(parameter: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"limit 'all': {parameter} must be a policy")):
        RateLimitConfig(LIMITER, **{parameter: "100/fortnight"})
    if parameter == "global_concurrency":  # a rate string is a rate policy, not a concurrency one
        with pytest.raises(ConfigError, match=re.escape("limit 'all': global_concurrency must be a policy")):
            RateLimitConfig(LIMITER, global_concurrency="100/minute")


def test_plans_and_policies_are_still_accepted() -> None:
    RateLimitConfig(LIMITER, routes=[Route("api", "/api", lambda caller: TB, cost=lambda scope: 2)], global_limit=TB)


def scope(path: str, client: str | None = "192.0.2.1", headers: list[tuple[bytes, bytes]] | None = None, **state: str) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "http", "path": path, "headers": headers or [], "client": (client, 1234) if client else None}
    if state:
        s["state"] = dict(state)
    return s


def test_plans_name_keys_by_route_and_caller_longest_prefix_first() -> None:
    config = RateLimitConfig(
        LIMITER,
        routes=[Route("api", "/api", TB), Route("export", "/api/export", TB, cost=lambda s: 5)],
        global_limit=TokenBucket(100, 20.0),
        concurrency=[Route("slow", "/api/export", Concurrency(2, 30.0))],
        skip=["/health", "/admin/"],
        trusted_proxies=["127.0.0.0/8"],
    )
    p = plan(config, scope("/api/export/all", ratelimit_principal="a}x1"))
    assert isinstance(p, Plan) and p.route_name == "export"
    assert [(lim.key, lim.cost, lim.concurrency) for lim in p.limits] == [
        ("rl:{user.esc:a%7Dx1}:export:token_bucket", 5, False),
        ("rl:{user.esc:a%7Dx1}:all:token_bucket", 5, False),
        ("rl:{user.esc:a%7Dx1}:slow:concurrency", 1, True),
    ]
    p = plan(config, scope("/apiary", client="2001:db8:1:2:aaaa::1"))
    assert isinstance(p, Plan) and p.route_name == "all"
    assert [lim.key for lim in p.limits] == ["rl:{ip:2001:db8:1:2::}:all:token_bucket"]
    p = plan(config, scope("/x", client="127.0.0.1", headers=[(b"x-forwarded-for", b"203.0.113.7")], ratelimit_tenant="acme"))
    assert isinstance(p, Plan) and p.limits[0].key == "rl:{tenant:acme}:all:token_bucket"
    p = plan(config, scope("/x", client="127.0.0.1", headers=[(b"x-forwarded-for", b"203.0.113.7")]))
    assert isinstance(p, Plan) and p.limits[0].key == "rl:{ip:203.0.113.7}:all:token_bucket"
    assert plan(config, scope("/health")) is None
    assert plan(config, scope("/admin/x")) is None
    assert isinstance(plan(config, scope("/healthz")), Plan)


def test_access_lists_deny_wins_and_each_identity_is_on_one_list() -> None:
    lists = AccessLists()
    assert lists.is_empty()
    lists.allow_principal("ada")
    lists.deny_network("203.0.113.0/24")
    assert lists.access("ada", None, ip("198.51.100.1")) is Access.ALLOWED
    assert lists.access("ada", None, ip("203.0.113.9")) is Access.DENIED
    lists.deny_principal("ada")
    assert lists.access("ada") is Access.DENIED
    lists.allow_principal("ada")
    assert lists.access("ada") is Access.ALLOWED
    lists.remove_principal("ada")
    assert lists.access("ada") is Access.LIMITED
    lists.allow_network("10.1.2.3/8")
    assert lists.access(ip=ip("::ffff:10.200.0.1")) is Access.ALLOWED
    lists.remove_network("10.0.0.0/8")
    assert lists.access(ip=ip("10.200.0.1")) is Access.LIMITED
