"""Redis Cluster (3 primaries, stock servers: the library through FCALL and EVALSHA, loaded on each
node as it turns out to lack it) and Sentinel, through redis-py's own clients."""

from __future__ import annotations

import signal
import time

import pytest

from conftest import MakeLimiter, Servers
from redis_ratelimit import Backend, Decision, FailurePolicy, FixedWindow, SlidingLog, TokenBucket, UsageError
from redis_ratelimit.engine import script
from servers import wait_until

BUCKET = TokenBucket(3, 0.001)


@pytest.mark.parametrize("backend", [Backend.AUTO, Backend.FUNCTIONS, Backend.SCRIPTS])
def test_a_cluster_of_stock_servers(servers: Servers, make_limiter: MakeLimiter, backend: Backend) -> None:
    cluster = servers.cluster(module=False)
    limiter = make_limiter(cluster, backend=backend)
    keys = [f"rl:user:{i}" for i in range(24)]  # spread over the three primaries' slots
    for _ in range(3):
        assert all(limiter.check(k, BUCKET).allowed for k in keys)
    assert not any(limiter.check(k, BUCKET).allowed for k in keys)
    # One atomic call over keys of one slot (a hash tag), of mixed kinds.
    limits = [("rl:{ada}:login", SlidingLog(1, 600), 1), ("rl:{ada}:all", FixedWindow(5, 600), 1)]
    assert limiter.check_all(limits).allowed
    assert (limiter.check_all(limits).allowed, limiter.peek("rl:{ada}:all", limits[1][1]).remaining) == (False, 4)
    # Every primary got the library (or the scripts) when it first turned out to lack it.
    engine = limiter.verify()["engine"]
    assert engine == ("scripts" if backend is Backend.SCRIPTS else "functions")
    for node in cluster.nodes:
        with node.client() as r:
            if engine == "functions":
                assert len(r.execute_command("FUNCTION", "LIST")) == 1
            else:
                assert r.execute_command("SCRIPT", "EXISTS", script("rl_token").sha) == [1]
    # Flushed on every node: each loads it again on its next call.
    for node in cluster.nodes:
        with node.client() as r:
            r.execute_command("FUNCTION", "FLUSH")
            r.execute_command("SCRIPT", "FLUSH")
    fresh = TokenBucket(5, 0.001)
    assert all(limiter.check(f"rl:again:{i}", fresh).remaining == 4 for i in range(24))


def test_a_cluster_of_module_servers(servers: Servers, make_limiter: MakeLimiter) -> None:
    cluster = servers.cluster(module=True)
    limiter = make_limiter(cluster)
    assert all(limiter.check(f"rl:user:{i}", BUCKET).remaining == 2 for i in range(12))
    assert limiter.verify()["engine"] == "module"


@pytest.mark.parametrize("module", [False, True], ids=["library", "module"])
def test_sentinel(servers: Servers, make_limiter: MakeLimiter, module: bool) -> None:
    sentinel = servers.sentinel(module=module)
    limiter = make_limiter(sentinel)
    assert [limiter.check("rl:s", BUCKET).allowed for _ in range(4)] == [True, True, True, False]
    assert limiter.verify()["engine"] == ("module" if module else "functions")
    with sentinel.primary.client() as r:
        assert r.exists("rl:s") == 1, "decided on the primary Sentinel names"


def test_a_cluster_failover(servers: Servers, make_limiter: MakeLimiter) -> None:
    """A primary stops and its replica takes its slots: the limiter learns the new map and decides
    there again (meanwhile the failure policy decides, visibly)."""
    cluster = servers.cluster(module=False, replicas=1)
    limiter = make_limiter(cluster, FailurePolicy.closed(), breaker=(3, 0.2))
    key = "rl:failover"
    assert limiter.check(key, BUCKET).allowed
    old = cluster.primary_of(key)
    old.stop()
    answers: list[Decision] = []

    def decided_again() -> bool:
        answers.append(limiter.check(key, BUCKET))
        time.sleep(0.1)
        return not answers[-1].degraded

    wait_until("a decision from the new primary", decided_again, timeout=60)
    assert answers[-1].limit == 3 and cluster.primary_of(key).port != old.port
    assert all(not d.allowed for d in answers if d.degraded), "closed: denied while nobody could decide"


def test_a_hung_cluster_primary_never_blocks_past_the_deadline(servers: Servers, make_limiter: MakeLimiter) -> None:
    """One primary SIGSTOPped (the kernel accepts, nobody answers): each call returns within the
    deadline, those on its slots degraded, the others answered; learning the cluster's map again
    after a node failed to answer happens within the deadline too and asks the hung node last. (The
    cluster client's own refresh would wait its socket timeout, 3 s here, on the hung node.)"""
    cluster = servers.cluster(module=False)
    deadline = 0.1
    limiter = make_limiter(cluster, FailurePolicy.open(), client={"socket_timeout": 3, "socket_connect_timeout": 3},
                           deadline=deadline, breaker=(1000, 0.1))
    keys = [f"rl:hung:{i}" for i in range(12)]
    assert all(limiter.check(k, TokenBucket(1000, 1)).allowed for k in keys)  # engines loaded everywhere
    hung = cluster.primary_of(keys[0])
    on_hung = {k for k in keys if cluster.primary_of(k).port == hung.port}
    hung.hang()
    slowest = 0.0
    answered: list[bool] = []
    for _ in range(4):
        for key in keys:
            start = time.monotonic()
            decision = limiter.check(key, TokenBucket(1000, 1))
            slowest = max(slowest, time.monotonic() - start)
            if key in on_hung:
                assert decision.degraded and decision.allowed, "open: allowed, visibly, while its node hangs"
            else:
                answered.append(not decision.degraded)
    assert slowest < deadline + 0.5, f"a call took {slowest:.2f} s with a deadline of {deadline} s"
    assert sum(answered) >= len(answered) // 2, "the other primaries kept answering"


def test_a_hung_sentinel_never_blocks_past_the_deadline(servers: Servers, make_limiter: MakeLimiter) -> None:
    """The sentinel SIGSTOPped before the first call: asking it for the primary's address is part of
    the call, within its deadline (the Sentinel client's own timeout is 5 s here): a degraded decision
    in time; once it answers again, the primary's."""
    sentinel = servers.sentinel(module=False)
    deadline = 0.1
    limiter = make_limiter(sentinel, FailurePolicy.open(), deadline=deadline, breaker=(1000, 0.1))
    assert sentinel.process is not None
    sentinel.process.send_signal(signal.SIGSTOP)
    try:
        for _ in range(3):
            start = time.monotonic()
            decision = limiter.check("rl:sentinel-hung", BUCKET)
            took = time.monotonic() - start
            assert decision.degraded and decision.allowed
            assert took < deadline + 0.5, f"a call took {took:.2f} s with a deadline of {deadline} s"
    finally:
        sentinel.process.send_signal(signal.SIGCONT)
    wait_until("an answer through the sentinel", lambda: not limiter.check("rl:sentinel-hung", BUCKET).degraded)


def test_keys_of_one_call_in_different_cluster_slots_are_refused(servers: Servers, make_limiter: MakeLimiter) -> None:
    """On a cluster client, keys of one call in different slots raise UsageError up front: Redis would
    answer CROSSSLOT, which the open policy would otherwise turn into an allowed, degraded decision."""
    cluster = servers.cluster(module=False)
    limiter = make_limiter(cluster, FailurePolicy.open())
    apart = [("rl:user:1", FixedWindow(5, 60), 1), ("rl:user:2", FixedWindow(5, 60), 1)]
    for method in (limiter.check_all, limiter.check_all_strict, limiter.acquire_all):
        with pytest.raises(UsageError, match="^CROSSSLOT "):
            method(apart)
    tagged = [("rl:{user:1}:a", FixedWindow(5, 60), 1), ("rl:{user:1}:b", FixedWindow(5, 60), 1)]
    decision = limiter.check_all(tagged)
    assert decision.allowed and not decision.degraded


def test_a_slot_migrating_then_moved(servers: Servers, make_limiter: MakeLimiter) -> None:
    """A key's slot migrates to another primary while the limiter runs: the key already moved
    (ASK: sent again after ASKING to the importing node), then the slot given to it (MOVED: sent to
    the new owner, the map learned again): every call answered, on the state that moved with it."""
    cluster = servers.cluster(module=False)
    limiter = make_limiter(cluster, FailurePolicy.closed())
    assert all(limiter.check(f"rl:warm:{i}", BUCKET).allowed for i in range(24))  # the library everywhere
    key = "rl:migrating"
    assert limiter.check(key, BUCKET).remaining == 2
    source = cluster.primary_of(key)
    target = next(n for n in cluster.nodes if n.port != source.port)
    with source.client() as src, target.client() as dst:
        slot = int(src.execute_command("CLUSTER", "KEYSLOT", key))
        src_id, dst_id = (c.execute_command("CLUSTER", "MYID") for c in (src, dst))
        src_id, dst_id = (i.decode() if isinstance(i, bytes) else i for i in (src_id, dst_id))
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        src.execute_command("MIGRATE", "127.0.0.1", target.port, key, 0, 5000)
        asked = limiter.check(key, BUCKET)
        assert (asked.degraded, asked.remaining) == (False, 1), "ASK: decided on the importing node"
        for node in cluster.nodes:
            with node.client() as r:
                r.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    moved = limiter.check(key, BUCKET)
    assert (moved.degraded, moved.remaining) == (False, 0), "MOVED: decided on the new owner"
    again = limiter.check(key, BUCKET)
    assert again.degraded is False and not again.allowed
    with target.client() as r:
        assert r.exists(key) == 1
