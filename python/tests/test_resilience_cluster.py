"""Permits and waits on a 3-primary cluster of stock servers (the library through FCALL): each lease's
renew and release, and each reservation and refund, go to the node of its key."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode

from redis_ratelimit import AsyncLimiter, Concurrency, FailurePolicy, Limiter, TokenBucket
from servers import HOST, aclose


def test_permits_and_waits_on_a_cluster(servers: Any) -> None:
    cluster = servers.cluster(module=False)
    lim = Limiter(cluster.client(), FailurePolicy.closed(), deadline=2.0)
    short = Concurrency(limit=1, lease=1.0)
    keys = [f"rl:{{tenant:{i}}}:jobs" for i in range(6)]  # spread over the three primaries
    assert len({cluster.client().keyslot(k) * 3 // 16384 for k in keys}) > 1
    for key in keys:
        with lim.acquire(key, short) as permit:
            assert permit.granted
            with lim.acquire(key, short) as other:
                assert not other.granted
            if key in keys[:2]:
                time.sleep(1.2)  # past its first lease: renewed on the key's node
                with lim.acquire(key, short) as still:
                    assert not still.granted and not permit.lost
        with lim.acquire(key, short) as again:
            assert again.granted
    bucket = TokenBucket(capacity=1, per_second=10.0)
    both = [("rl:{w}:a", bucket, 1), ("rl:{w}:b", Concurrency(limit=5, lease=5.0), 1)]
    with lim.acquire_all(both) as permit:
        assert permit.granted
    buckets = [f"rl:{{tenant:{i}}}:calls" for i in range(6)]
    assert all(lim.until_ready(k, bucket, 1, max_wait=2.0).allowed for k in buckets for _ in range(2))

    async def run() -> None:
        client = redis.asyncio.RedisCluster(startup_nodes=[AsyncClusterNode(HOST, cluster.nodes[0].port)])
        alim = AsyncLimiter(client, FailurePolicy.closed(), deadline=2.0)
        async with alim.acquire(keys[0], short) as permit:
            assert permit.granted
            await asyncio.sleep(1.2)
            async with alim.acquire(keys[0], short) as other:
                assert not other.granted and not permit.lost
        assert all([(await alim.until_ready(buckets[1], bucket, 1, max_wait=2.0)).allowed for _ in range(2)])
        await aclose(client)

    asyncio.run(run())
