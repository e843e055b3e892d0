"""The I/O under `Engine.run`: each `Send` goes to the server (in a cluster, to the node of its key)
and its reply or error reply goes back into the engine, all within one deadline that covers the whole
call, connecting included. Server error replies go back to the engine (it decides on NOSCRIPT, unknown
commands, ...); anything else ends the call and becomes a `CallError` (`errors.from_redis`).

- `SyncDriver`: redis-py's `Redis` (also a Sentinel `master_for` client) and `RedisCluster`. Each
  command takes a connection from the client's pool and sets its connect and socket timeouts to what
  is left of the deadline (a connection that timed out is closed, never reused half-read).
- `AsyncDriver`: `redis.asyncio.Redis` and `redis.asyncio.RedisCluster`, the whole call under
  `asyncio.wait_for` (redis-py closes a connection whose command was cancelled).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Generator, Union

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from .engine import Send
from .errors import CallError, from_redis

__all__ = ["SyncDriver", "AsyncDriver", "SyncClient", "AsyncClient"]

SyncClient = Union[redis.Redis, RedisCluster]
AsyncClient = Union[redis.asyncio.Redis, AsyncRedisCluster]
Steps = Generator[Send, Any, Any]


class SyncDriver:
    def __init__(self, client: SyncClient) -> None:
        self.client = client

    def run(self, steps: Steps, deadline: float) -> Any:
        """Runs `steps` to their reply within `deadline` seconds; raises CallError."""
        end = time.monotonic() + deadline
        try:
            step = next(steps)
            while True:
                try:
                    reply = self._send(step, end)
                except redis.exceptions.ResponseError as e:
                    step = steps.throw(e)
                    continue
                step = steps.send(reply)
        except StopIteration as done:
            return done.value
        except Exception as e:
            raise from_redis(e, deadline, time.monotonic() >= end) from e
        finally:
            steps.close()

    def _send(self, step: Send, end: float) -> Any:
        client = self.client
        if isinstance(client, RedisCluster):
            try:
                return _on_connection(self._node(client, step), step, end)
            except (redis.exceptions.MovedError, redis.exceptions.AskError):
                # The slot moved: learn the cluster's map again and send to the new owner, once.
                client.nodes_manager.initialize()
                return _on_connection(self._node(client, step), step, end)
        return _on_connection(client, step, end)

    @staticmethod
    def _node(client: RedisCluster, step: Send) -> redis.Redis:
        node = _node_of(client, step)
        connection: redis.Redis = node.redis_connection or client.get_redis_connection(node)
        return connection


def _node_of(cluster: Any, step: Send) -> Any:
    """The node of `step`'s key (any node for a keyless command), sync or asyncio RedisCluster."""
    if step.route is None:
        return cluster.get_default_node()
    return cluster.get_node_from_key(step.route.decode() if isinstance(step.route, bytes) else str(step.route))


def _on_connection(client: redis.Redis, step: Send, end: float) -> Any:
    """`step` on a connection of `client`'s pool with its timeouts set to what is left until `end`."""
    pool: Any = client.connection_pool
    try:
        conn = pool.get_connection()
    except TypeError:  # redis-py < 5.3 names the command
        conn = pool.get_connection(str(step.args[0]))
    saved = (conn.socket_timeout, conn.socket_connect_timeout)
    try:
        conn.socket_timeout = conn.socket_connect_timeout = _left(end)
        conn.connect()
        _set_timeout(conn, _left(end))
        conn.send_command(*step.args)
        _set_timeout(conn, _left(end))
        return conn.read_response()
    except redis.exceptions.ResponseError:
        raise
    except BaseException:
        conn.disconnect()  # in an unknown state: never reused
        raise
    finally:
        conn.socket_timeout, conn.socket_connect_timeout = saved
        _set_timeout(conn, saved[0])
        pool.release(conn)


def _left(end: float) -> float:
    left = end - time.monotonic()
    if left <= 0:
        raise redis.exceptions.TimeoutError("the deadline passed")
    return left


def _set_timeout(conn: Any, timeout: float | None) -> None:
    sock = getattr(conn, "_sock", None)
    if sock is not None:
        sock.settimeout(timeout)


class AsyncDriver:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def run(self, steps: Steps, deadline: float) -> Any:
        """Runs `steps` to their reply within `deadline` seconds; raises CallError."""
        try:
            return await asyncio.wait_for(self._drive(steps), deadline)
        except CallError:
            raise
        except asyncio.TimeoutError as e:
            raise from_redis(e, deadline, True) from e
        except Exception as e:
            raise from_redis(e, deadline, False) from e
        finally:
            steps.close()

    async def _drive(self, steps: Steps) -> Any:
        try:
            step = next(steps)
            while True:
                try:
                    reply = await self._send(step)
                except redis.exceptions.ResponseError as e:
                    step = steps.throw(e)
                    continue
                step = steps.send(reply)
        except StopIteration as done:
            return done.value

    async def _send(self, step: Send) -> Any:
        client = self.client
        if isinstance(client, AsyncRedisCluster):
            await client.initialize()  # once: returns at once when the slot map is known
            cluster: Any = client
            return await cluster.execute_command(*step.args, target_nodes=_node_of(cluster, step))
        single: Any = client
        return await single.execute_command(*step.args)
