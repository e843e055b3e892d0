"""Every redis-py name the package uses that redis-py does not document as public, in one place, each
with why the public API does not serve. `drivers.py` goes through these functions and nothing else
below redis-py's documented surface; `tests/test_redis_internals.py` holds each of them to the
redis-py installed (the whole suite: the newest; `scripts/python.sh floor`: 5.0.0, the oldest
declared), so that a release that renames one fails there, by name, rather than in every limiter.

Why the public API does not serve: a limiter's deadline covers the whole call, connecting included,
whatever timeouts the client was made with (`tests/test_deadline.py`, the hung sentinel and cluster
primary of `tests/test_topologies.py`). `Redis.execute_command`, `Sentinel.discover_master` and
`RedisCluster`'s own refresh of its slots all run with the client's timeouts (by default none: they
may wait forever), so the sync driver sends on connections of its own, made as the client's pool
makes them, and sets their timeouts per step. The public API is used wherever it serves:
`Redis.get_connection_kwargs`, `RedisCluster.get_node_from_key` / `keyslot` / `get_primaries` /
`get_default_node` / `get_redis_connection`, `SentinelConnectionPool` (the class), and the
`Connection` methods (`connect`, `disconnect`, `pack_command`, `send_packed_command`,
`send_command`, `read_response`, `can_read`) and its `retry` constructor parameter.

The private or undocumented names, and why each:

- ``ConnectionPool.connection_class`` (an attribute, undocumented): the class the client's pool makes
  connections of (`Connection`, `SSLConnection`, `UnixDomainSocketConnection`, Sentinel's
  `SentinelManagedConnection`). `ConnectionPool.make_connection` would count the connection against
  the pool's `max_connections` and never give it back.
- ``Connection.socket_timeout`` / ``socket_connect_timeout`` (written): the timeouts the next
  connect and the socket get; a property of the connection interface in redis-py 6+, a plain
  attribute in 5. Set to what is left of the deadline before each step.
- ``Connection._sock``: whether a connection is connected (no public property in redis-py 5), and
  the socket whose timeout is set between the steps of a call (redis-py sets it only when
  connecting; `read_response` and `send_packed_command` take no timeout).
- ``Connection._parser._buffer`` and ``redis._parsers.socket.SocketBuffer`` (``unread_bytes``):
  whether an idle connection holds a stray reply or was closed by the server, for a third of what
  ``Connection.can_read(timeout=0)`` costs (it changes the socket's timeout twice and may raise).
  Only on a plain socket with redis-py's own parser; anything else (TLS, hiredis, a redis-py whose
  names moved) asks ``can_read``.
- ``SentinelConnectionPool.is_master`` / ``service_name`` / ``sentinel_manager`` (attributes,
  undocumented): that a client is a Sentinel ``master_for`` one, which service, which `Sentinel`.
- ``Sentinel.sentinels`` / ``min_other_sentinels`` / ``_force_master_ip``: the sentinels to ask and
  what `discover_master` requires of the primary they name, asked by the driver itself within the
  deadline (`discover_master` asks with the sentinels' own timeouts).
- ``SentinelManagedConnection.connect_to(address)`` (undocumented): connects to the primary the
  driver found (its `connect` would ask the sentinels again, with their own timeouts), with the
  pool's health check as redis-py does.
"""

from __future__ import annotations

import select
import socket
from typing import Any

import redis
from redis.sentinel import SentinelConnectionPool

try:
    from redis._parsers.socket import SocketBuffer as _SocketBuffer
except ImportError:  # another redis-py layout: `can_read`
    _SocketBuffer = None  # type: ignore[assignment,misc]

_poll: Any = getattr(select, "poll", None)  # not on Windows: `can_read` there

__all__ = ["connection_class", "set_timeouts", "connected", "set_socket_timeout", "stale", "sentinel_of",
           "sentinels", "min_other_sentinels", "forced_primary_ip", "connect_to"]


def connection_class(client: redis.Redis) -> Any:
    """The class `client`'s pool makes its connections of."""
    pool: Any = client.connection_pool
    return pool.connection_class


def set_timeouts(conn: Any, timeout: float) -> None:
    """The connect and socket timeouts `conn` uses when it next connects."""
    conn.socket_timeout = conn.socket_connect_timeout = timeout


def connected(conn: Any) -> bool:
    return getattr(conn, "_sock", None) is not None


def set_socket_timeout(conn: Any, timeout: float | None) -> None:
    """The timeout of `conn`'s socket, connected (nothing when it is not)."""
    sock = getattr(conn, "_sock", None)
    if sock is not None:
        sock.settimeout(timeout)


def stale(conn: Any) -> bool:
    """Whether a connected idle connection has anything to read (a stray reply, or the server closed
    it), as redis-py's `can_read(timeout=0)` says. On a plain socket with redis-py's own parser, the
    parser's buffer and one poll() of the socket say it for a third of the cost (no timeout changes,
    no exception); anything else (TLS, whose layer may hold bytes poll() cannot see; hiredis) asks
    `can_read`."""
    sock = getattr(conn, "_sock", None)
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


def sentinel_of(client: redis.Redis) -> tuple[Any, str] | None:
    """`(the Sentinel, the service name)` of a Sentinel `master_for` client; None for any other."""
    pool: Any = client.connection_pool
    if isinstance(pool, SentinelConnectionPool) and getattr(pool, "is_master", False):
        manager = getattr(pool, "sentinel_manager", None)
        if manager is not None:
            return manager, str(pool.service_name)
    return None


def sentinels(manager: Any) -> list[redis.Redis]:
    """The clients of a `Sentinel`'s sentinels, in the order it asks them."""
    return list(manager.sentinels)


def min_other_sentinels(manager: Any) -> int:
    return int(manager.min_other_sentinels)


def forced_primary_ip(manager: Any) -> str | None:
    """`Sentinel(force_master_ip=...)`: the address to use instead of the one the sentinels give."""
    forced = getattr(manager, "_force_master_ip", None)
    return None if forced is None else str(forced)


def connect_to(conn: Any, address: tuple[str, int]) -> None:
    """Connects a `SentinelManagedConnection` to `address` (the primary the sentinels named)."""
    conn.connect_to(address)
