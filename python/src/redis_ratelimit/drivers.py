"""The I/O under `Engine.run`: each `Send` goes to the server (in a cluster, to the node of its key)
and its reply or error reply goes back into the engine, all within one deadline that covers the whole
call, connecting included. Server error replies go back to the engine (it decides on NOSCRIPT, unknown
commands, ...); anything else ends the call and becomes a `CallError` (`errors.from_redis`).

- `SyncDriver`: redis-py's `Redis` (also a Sentinel `master_for` client) and `RedisCluster`. Each
  command goes on a connection of the limiter's own, made as the client's pool makes them, with its
  connect and socket timeouts set to what is left of the deadline (a connection that timed out is
  closed, never reused half-read).
- `AsyncDriver`: `redis.asyncio.Redis` and `redis.asyncio.RedisCluster`, the whole call under
  `asyncio.timeout` (`asyncio.wait_for` before Python 3.11; redis-py closes a connection whose
  command was cancelled).
"""

from __future__ import annotations

import asyncio
import select
import socket
import threading
import time
from typing import Any, Generator, Union

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from .engine import Send
from .errors import CallError, from_redis

__all__ = ["SyncDriver", "AsyncDriver", "SyncClient", "AsyncClient"]

_timeout: Any = getattr(asyncio, "timeout", None)

SyncClient = Union[redis.Redis, RedisCluster]
AsyncClient = Union[redis.asyncio.Redis, AsyncRedisCluster]
Steps = Generator[Send, Any, Any]


class SyncDriver:
    def __init__(self, client: SyncClient) -> None:
        self.client = client
        self._servers: dict[int, tuple[redis.Redis, _Connections]] = {}
        self._remap = False

    def _connections(self, client: redis.Redis) -> _Connections:
        # Keyed by the server's client object (one per cluster node), which it keeps alive.
        found = self._servers.get(id(client))
        if found is None or found[0] is not client:
            found = self._servers.setdefault(id(client), (client, _Connections(client)))
        return found[1]

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
        if not isinstance(client, RedisCluster):
            return self._connections(client).send(step, end)
        if self._remap:
            # A node did not answer last time (a failover may have moved its slots): the cluster's map
            # is learned again first, through the cluster client (its own timeouts apply).
            self._remap = False
            try:
                client.nodes_manager.initialize()
            except BaseException:
                self._remap = True
                raise
        try:
            return self._connections(self._node(client, step)).send(step, end)
        except (redis.exceptions.MovedError, redis.exceptions.AskError):
            # The slot moved: learn the cluster's map again and send to the new owner, once.
            client.nodes_manager.initialize()
            return self._connections(self._node(client, step)).send(step, end)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
            self._remap = True
            raise

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


class _Connections:
    """The limiter's own connections to one server, made like the client's pool makes them (its
    connection class and settings: credentials, database, TLS, Sentinel's discovery), so that every
    step, connecting included, runs under the call's timeouts. (The pool's `get_connection` connects
    with the client's own timeouts, which may wait forever.)"""

    IDLE = 32

    def __init__(self, client: redis.Redis) -> None:
        self.pool: Any = client.connection_pool
        self.idle: list[Any] = []
        self.lock = threading.Lock()
        self.packs: dict[Any, Any] = {}  # `_packed`'s

    def send(self, step: Send, end: float) -> Any:
        """`step` on an idle or a new connection, its timeouts set to what is left until `end`."""
        with self.lock:
            conn = self.idle.pop() if self.idle else None
        if conn is None:
            conn = self.pool.connection_class(**self.pool.connection_kwargs)
            conn.retry = Retry(NoBackoff(), 0)  # no retry after the deadline's own: one attempt
        try:
            conn.socket_timeout = conn.socket_connect_timeout = _left(end)
            if getattr(conn, "_sock", None) is not None and _stale(conn):
                conn.disconnect()  # the server closed it (a restart) or it holds a stray reply
            conn.connect()
            _set_timeout(conn, _left(end))
            conn.send_packed_command(_packed(self.packs, conn, step.args))
            _set_timeout(conn, _left(end))
            reply = conn.read_response()
        except redis.exceptions.ResponseError:
            self._keep(conn)
            raise
        except BaseException:
            conn.disconnect()  # in an unknown state: never reused
            raise
        self._keep(conn)
        return reply

    def _keep(self, conn: Any) -> None:
        with self.lock:
            if len(self.idle) < self.IDLE:
                self.idle.append(conn)
                return
        conn.disconnect()


def _socket_buffer_class() -> Any:
    try:
        from redis._parsers.socket import SocketBuffer
    except ImportError:  # another redis-py layout: `_stale` asks can_read
        return None
    return SocketBuffer


_poll: Any = getattr(select, "poll", None)
_SocketBuffer: Any = _socket_buffer_class()


def _stale(conn: Any) -> bool:
    """Whether an idle connection has anything to read (a stray reply, or the server closed it), as
    redis-py's `can_read(timeout=0)` says. On a plain socket with redis-py's own parser, the parser's
    buffer and one poll() of the socket say it for a third of the cost (no timeout changes, no
    exception); anything else (TLS, whose layer may hold bytes poll() cannot see; hiredis) asks
    `can_read`."""
    sock = conn._sock
    buffer = getattr(getattr(conn, "_parser", None), "_buffer", None)
    if (_poll is not None and _SocketBuffer is not None and type(sock) is socket.socket
            and isinstance(buffer, _SocketBuffer)):
        if buffer.unread_bytes():
            return True
        try:
            poller = _poll()
            poller.register(sock.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True
    try:
        return bool(conn.can_read(timeout=0))
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
        return True


#: How many commands' packed bytes one server's connections remember (then they start again, empty).
PACKED = 1024


def _packed(cache: dict[Any, Any], conn: Any, args: tuple[Any, ...]) -> Any:
    """`conn.pack_command(*args)`, remembered in `cache` (one server's connections, all made with the
    same settings, so the same encoder): a limiter sends the same few commands over and over (hits on
    one key with one limit), and packing is a good part of a call's own time. Keyed by the arguments
    and their types (1, 1.0 and True are equal keys but pack differently)."""
    key = (args, tuple(map(type, args)))
    try:
        found = cache.get(key)
    except TypeError:  # an unhashable argument (a memoryview): packed every time
        return conn.pack_command(*args)
    if found is None:
        found = conn.pack_command(*args)
        if len(cache) >= PACKED:
            cache.clear()
        cache[key] = found
    return found


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
            if _timeout is not None:  # Python 3.11+: no task per call
                async with _timeout(deadline):
                    return await self._drive(steps)
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
