"""What the middleware tells the caller: `RateLimit-*` headers on every limited response, and for a
denial a 429 with `Retry-After` and an RFC 9457 problem body (a 403 for a caller on the deny list).
Field for field and byte for byte the Rust layer's answers (`client/src/http/response.rs`): the bodies
are compact JSON with sorted keys, as serde_json writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, MutableSequence

from ..contract import HTTP, PROBLEM_WHAT, PROBLEMS, fill
from ..decision import Decision

# The names, problem types and problem texts are the contract's (contract/contract.json's "http", from
# the Rust layer).
_HEADERS = HTTP["headers"]
_TYPES = HTTP["problem_types"]
RATELIMIT_LIMIT: bytes = _HEADERS["limit"].encode()
RATELIMIT_REMAINING: bytes = _HEADERS["remaining"].encode()
RATELIMIT_RESET: bytes = _HEADERS["reset"].encode()
RATELIMIT_POLICY: bytes = _HEADERS["policy"].encode()
RATELIMIT: bytes = _HEADERS["state"].encode()
DEGRADED: bytes = _HEADERS["degraded"].encode()
RETRY_AFTER: bytes = _HEADERS["retry_after"].encode()
CONTENT_TYPE = b"content-type"
PROBLEM_JSON: bytes = _HEADERS["content_type"].encode()

#: The problem type of an ordinary denial.
RATE_LIMITED: str = _TYPES["rate_limited"]
#: The problem type of a request that costs more than the limit: it can never be allowed.
COST_EXCEEDS_LIMIT: str = _TYPES["cost_exceeds_limit"]
#: A denial by the closed failure policy: Redis could not decide. Not the caller's overuse.
UNAVAILABLE: str = _TYPES["unavailable"]
#: A denial by the closed failure policy while Redis answers that the limiter cannot work with it as
#: configured (the module not loaded, a renamed or refused command).
MISCONFIGURED: str = _TYPES["misconfigured"]
#: A denial by a concurrency limit: too many of the caller's requests in flight.
CONCURRENCY_LIMITED: str = _TYPES["concurrency_limited"]
#: A caller on the deny list: 403, no `Retry-After`, no `RateLimit-*` fields.
DENIED: str = _TYPES["denied"]

RawHeaders = MutableSequence[tuple[bytes, bytes]]


@dataclass(frozen=True)
class Described:
    """The limit a decision describes, for headers and problem bodies."""

    name: str
    window_secs: int
    cost: int
    #: A rate policy: the `RateLimit-*` fields describe it. A concurrency limit has none of them.
    rate: bool = True


@dataclass(frozen=True)
class Answer:
    """A complete response the middleware sends by itself: status, headers, body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """An ASGI app answering with this response (what `on_denial` hooks may return too)."""
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})

    def json(self) -> Any:
        return json.loads(self.body)


def problem_body(body: dict[str, Any]) -> bytes:
    """JSON as serde_json writes a `json!` object: keys sorted, no spaces, UTF-8 as it is."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def put(headers: RawHeaders, name: bytes, value: bytes) -> None:
    """Sets `name` to `value`, replacing any value it had (as `HeaderMap::insert`)."""
    for i in range(len(headers) - 1, -1, -1):
        if headers[i][0].lower() == name:
            del headers[i]
    headers.append((name, value))


def _append(headers: RawHeaders, name: bytes, value: bytes) -> None:
    headers.append((name, value))


def _n(value: int) -> bytes:
    return str(value).encode()


def add_headers(headers: RawHeaders, d: Decision, limit: Described, structured: bool) -> None:
    """Adds the rate limit headers of `d`. A degraded decision was made without Redis: the policy is
    known, what is left of it and when it resets are not, so those headers are left out."""
    # Replace what is there (as `HeaderMap::insert`); most responses have none of these fields yet.
    set_ = put if any(k[:1] in b"rRxX" for k, _ in headers) else _append
    if not limit.rate:
        if d.degraded:
            set_(headers, DEGRADED, b"true")
        return
    set_(headers, RATELIMIT_LIMIT, _n(d.limit))
    if not d.degraded:
        set_(headers, RATELIMIT_REMAINING, _n(d.remaining))
        set_(headers, RATELIMIT_RESET, _n(d.reset_after_secs()))
    if structured:
        # draft-ietf-httpapi-ratelimit-headers: quota and window of the policy; remaining and reset.
        name = limit.name.replace('"', "").replace("\\", "")
        if _is_header_text(name):
            set_(headers, RATELIMIT_POLICY, f'"{name}";q={d.limit};w={limit.window_secs}'.encode())
            if not d.degraded:
                set_(headers, RATELIMIT, f'"{name}";r={d.remaining};t={d.reset_after_secs()}'.encode())
    if d.degraded:
        set_(headers, DEGRADED, b"true")


def _is_header_text(text: str) -> bool:
    # What `HeaderValue::from_str` takes: visible ASCII, space and tab.
    return all(c == "\t" or " " <= c <= "~" for c in text)


def _texts(body: dict[str, Any], problem: str, **values: object) -> dict[str, Any]:
    """`body` with the problem's type, title and detail (the contract's, its placeholders filled)."""
    texts = PROBLEMS[problem]
    body.update(type=_TYPES[problem], title=texts["title"], detail=fill(texts["detail"], **values))
    return body


def _problem(status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None) -> Answer:
    out: list[tuple[bytes, bytes]] = [] if headers is None else headers
    out.insert(0, (CONTENT_TYPE, PROBLEM_JSON))
    return Answer(status, out, problem_body(body))


def denied(d: Decision, limit: Described, structured: bool) -> Answer:
    """The 429 answer. An ordinary denial says when to retry (`Retry-After`, whole seconds >= 1); a
    request that costs more than the limit gets no `Retry-After` and its own problem type."""
    body: dict[str, Any] = {"status": 429, "limit": limit.name, "quota": d.limit}
    if not d.degraded:
        body["remaining"] = d.remaining
    headers: list[tuple[bytes, bytes]] = []
    secs = d.retry_after_secs()
    if secs is not None:
        _texts(body, "rate_limited", name=limit.name, retry_after_secs=secs)
        body["retry_after_seconds"] = secs
        headers.append((RETRY_AFTER, _n(secs)))
    else:
        _texts(body, "cost_exceeds_limit", name=limit.name, cost=limit.cost, limit=d.limit)
        body["cost"] = limit.cost
    answer = _problem(429, body, headers)
    add_headers(answer.headers, d, limit, structured)
    return answer


def forbidden() -> Answer:
    """The answer to a caller on the deny list: 403 with its own problem type, nothing to wait for."""
    return _problem(403, _texts({"status": 403}, "denied"))


def unavailable(d: Decision, limit: Described, structured: bool, status: int, misconfigured: bool) -> Answer:
    """The answer when Redis could not decide and the failure policy is closed: the request was not
    checked, so it says so, with the `Retry-After` the limiter suggests."""
    secs = d.retry_after_secs() or 1
    what = PROBLEM_WHAT["rate" if limit.rate else "concurrency"]
    body = {"status": status, "limit": limit.name, "retry_after_seconds": secs}
    _texts(body, "misconfigured" if misconfigured else "unavailable", what=what, name=limit.name, retry_after_secs=secs)
    answer = _problem(status, body, [(RETRY_AFTER, _n(secs))])
    add_headers(answer.headers, d, limit, structured)
    return answer


def concurrency_limited(d: Decision, limit: Described) -> Answer:
    """The 429 of a concurrency limit: so many requests in flight already. `Retry-After` is when the
    soonest held lease ends, an upper bound. No `RateLimit-*` fields: those describe rate limits."""
    secs = d.retry_after_secs() or 1
    body = {"status": 429, "limit": limit.name, "in_flight_limit": d.limit, "retry_after_seconds": secs}
    _texts(body, "concurrency_limited", name=limit.name, limit=d.limit, retry_after_secs=secs)
    headers = [(RETRY_AFTER, _n(secs))]
    if d.degraded:
        headers.append((DEGRADED, b"true"))
    return _problem(429, body, headers)
