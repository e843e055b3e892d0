"""Each redis-py name below its documented API that the package takes (`_redis_internals.py`), held
to the redis-py installed: the whole suite runs it on the newest, `scripts/python.sh floor
tests/test_redis_internals.py` on 5.0.0 (the oldest declared). A release that renames one fails
here, by name, before it fails every sync limiter."""

from __future__ import annotations

import inspect
import select
import socket

import pytest
import redis
from redis.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.sentinel import Sentinel, SentinelManagedConnection

from conftest import Servers
from redis_ratelimit import _redis_internals as internals
from servers import SENTINEL_SERVICE, Server, wait_until


def test_the_connection_class_of_a_client() -> None:
    assert internals.connection_class(redis.Redis()) is Connection
    assert internals.connection_class(redis.Redis(ssl=True)) is SSLConnection
    assert internals.connection_class(redis.Redis(unix_socket_path="/nonexistent")) is UnixDomainSocketConnection
    assert internals.connection_class(redis.Redis.from_url("rediss://localhost")) is SSLConnection


def test_timeouts_connected_and_the_socket_timeout(stock_server: Server) -> None:
    client = stock_server.client(timeout=None)
    conn = internals.connection_class(client)(**client.get_connection_kwargs())
    assert not internals.connected(conn)
    internals.set_socket_timeout(conn, 1.0)  # not connected: nothing to set, no error
    internals.set_timeouts(conn, 0.75)
    assert (conn.socket_timeout, conn.socket_connect_timeout) == (0.75, 0.75)
    conn.connect()
    try:
        assert internals.connected(conn)
        assert conn._sock.gettimeout() == 0.75  # what redis-py gave the socket when it connected
        internals.set_socket_timeout(conn, 0.5)
        assert conn._sock.gettimeout() == 0.5
    finally:
        conn.disconnect()
    assert not internals.connected(conn)


def test_stale_sees_a_stray_reply_and_a_closed_connection(stock_server: Server) -> None:
    client = stock_server.client()
    conn = internals.connection_class(client)(**client.get_connection_kwargs())
    conn.connect()
    try:
        # The fast path is the one taken on a plain socket with redis-py's own parser (not hiredis).
        if getattr(select, "poll", None) is not None and not redis.utils.HIREDIS_AVAILABLE:
            assert internals._SocketBuffer is not None, "redis._parsers.socket.SocketBuffer moved"
            assert type(conn._sock) is socket.socket
            assert isinstance(conn._parser._buffer, internals._SocketBuffer)
        assert not internals.stale(conn)
        conn.send_command("PING")
        conn.send_command("PING")
        assert conn.read_response() == b"PONG"
        internals.set_socket_timeout(conn, 2.0)
        assert conn.can_read(timeout=1.0)
        assert internals.stale(conn), "a reply nobody read"
        assert conn.read_response() == b"PONG"
        assert not internals.stale(conn)
        conn.send_command("CLIENT", "ID")
        own = conn.read_response()
        with stock_server.client() as other:
            other.execute_command("CLIENT", "KILL", "ID", own)
        wait_until("the close to reach the client", lambda: internals.stale(conn), timeout=2.0)
    finally:
        conn.disconnect()


def test_a_sentinel_client_and_its_sentinel() -> None:
    # `Sentinel(force_master_ip=)` is newer than redis-py 5.0.0 (which has no such attribute: None).
    forces = "force_master_ip" in inspect.signature(Sentinel).parameters
    manager = Sentinel([("127.0.0.1", 1), ("127.0.0.1", 2)], min_other_sentinels=2,
                       **({"force_master_ip": "10.1.2.3"} if forces else {}))
    primary = manager.master_for("svc")
    found = internals.sentinel_of(primary)
    assert found is not None and found[0] is manager and found[1] == "svc"
    assert internals.connection_class(primary) is SentinelManagedConnection
    assert internals.sentinel_of(manager.slave_for("svc")) is None, "a replica client: not the primary's"
    assert internals.sentinel_of(redis.Redis()) is None
    assert [s.get_connection_kwargs()["port"] for s in internals.sentinels(manager)] == [1, 2]
    assert internals.min_other_sentinels(manager) == 2
    assert internals.forced_primary_ip(manager) == ("10.1.2.3" if forces else None)
    assert internals.forced_primary_ip(Sentinel([("127.0.0.1", 1)])) is None


def test_connect_to_the_primary_a_sentinel_named(servers: Servers) -> None:
    sentinel = servers.sentinel()
    manager = Sentinel(sentinel.sentinels, socket_timeout=5)
    client = manager.master_for(SENTINEL_SERVICE)
    conn = internals.connection_class(client)(**client.get_connection_kwargs())
    internals.set_timeouts(conn, 2.0)
    internals.connect_to(conn, ("127.0.0.1", sentinel.primary.port))
    try:
        assert internals.connected(conn)
        conn.send_command("PING")
        assert conn.read_response() == b"PONG"
    finally:
        conn.disconnect()


@pytest.mark.parametrize("value", [None, 3.0])
def test_set_timeouts_before_connecting_is_what_connect_uses(stock_server: Server, value: float | None) -> None:
    client = stock_server.client(timeout=value)
    conn = internals.connection_class(client)(**client.get_connection_kwargs())
    internals.set_timeouts(conn, 1.25)
    conn.connect()
    try:
        assert conn._sock.gettimeout() == 1.25
    finally:
        conn.disconnect()
