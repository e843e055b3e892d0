"""RL.* from Python with redis-py: token bucket decisions, a sliding log, a route + global limit in one
atomic call, the five reply fields by name mapped to HTTP headers, and an explicit fail-open /
fail-closed choice when Redis is unreachable. `make examples` runs it against a throwaway server:

    python ratelimit_example.py redis://127.0.0.1:6379/ <a closed port>
"""
import sys

import redis

# [readme:python]
FIELDS = ("allowed", "limit", "remaining", "retry_after_ms", "reset_after_ms")


def token(r, key, capacity, rate, cost=1, *more):
    """RL.TOKEN key capacity rate cost [key capacity rate cost ...] as a dict of the named fields."""
    reply = r.execute_command("RL.TOKEN", key, capacity, rate, cost, *more)
    decision = dict(zip(FIELDS, reply))
    decision["allowed"] = decision["allowed"] == 1
    if len(reply) > 5:
        decision["limiting"] = reply[5]  # which key group of a multi-key call the reply describes
    return decision


def http_headers(d):
    """The README's mapping: seconds rounded up; Retry-After at least 1; none when it can never fit."""
    headers = {
        "RateLimit-Limit": str(d["limit"]),
        "RateLimit-Remaining": str(d["remaining"]),
        "RateLimit-Reset": str(-(-d["reset_after_ms"] // 1000)),
    }
    if not d["allowed"] and d["retry_after_ms"] >= 0:
        headers["Retry-After"] = str(max(1, -(-d["retry_after_ms"] // 1000)))
    return headers


def check(r, key, fail_open):
    """A decision that survives an unreachable Redis by an explicit choice, never silently."""
    try:
        return token(r, key, 10, 5)["allowed"], False
    except (redis.ConnectionError, redis.TimeoutError):
        return fail_open, True  # degraded: count it, alert on it, send X-RateLimit-Degraded
# [/readme:python]


def main(url, closed_port):
    r = redis.Redis.from_url(url)
    r.delete("py:user:ada", "py:slide", "py:{c1}:search", "py:{c1}:all", "py:cell:user123")

    decisions = [token(r, "py:user:ada", 10, 5) for _ in range(12)]
    allowed = sum(d["allowed"] for d in decisions)
    first_denial = next(d for d in decisions if not d["allowed"])
    assert allowed == 10 and first_denial["remaining"] == 0
    assert 0 < first_denial["retry_after_ms"] <= 200
    print(f"python token: {allowed} allowed, {12 - allowed} denied; first denial headers {http_headers(first_denial)}")

    slide = [r.execute_command("RL.SLIDE", "py:slide", 3, 60, f"req-{i}")[0] for i in range(4)]
    assert slide == [1, 1, 1, 0]
    print(f"python slide: {sum(slide)} of 4 allowed in a 3 per 60 s window")

    both = [token(r, "py:{c1}:search", 10, 0.001, 1, "py:{c1}:all", 3, 0.001, 1) for _ in range(4)]
    assert [d["allowed"] for d in both] == [True, True, True, False] and both[3]["limiting"] == 2
    print("python multi-key: route + global, 3 allowed, then the global limit (group 2) denies")

    never = token(r, "py:user:bob", 10, 5, 11)
    assert never["retry_after_ms"] == -1 and "Retry-After" not in http_headers(never)
    print("python cost above capacity: retry_after_ms -1, no Retry-After")

    # CL.THROTTLE as redis-cell's users call it: a burst of 15, 30 per 60 s, quantity 1.
    limited, limit, remaining, retry_after, reset_after = r.execute_command("CL.THROTTLE", "py:cell:user123", 15, 30, 60, 1)
    assert [limited, limit, remaining, retry_after, reset_after] == [0, 16, 15, -1, 2]
    rest = [r.execute_command("CL.THROTTLE", "py:cell:user123", 15, 30, 60, 1) for _ in range(16)]
    first = [limited, limit, remaining, retry_after, reset_after]
    limited, limit, remaining, retry_after, reset_after = rest[-1]
    assert [reply[0] for reply in rest] == [0] * 15 + [1] and remaining == 0 and retry_after > 0
    print(f"python CL.THROTTLE: first {first}; 16 allowed, the 17th limited, retry_after {retry_after} s")

    dead = redis.Redis(host="127.0.0.1", port=int(closed_port), socket_connect_timeout=0.1, socket_timeout=0.1)
    for fail_open in (True, False):
        allowed, degraded = check(dead, "py:user:ada", fail_open)
        assert allowed == fail_open and degraded
        print(f"python redis down, fail_open={fail_open} -> allowed={allowed} degraded={degraded}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
