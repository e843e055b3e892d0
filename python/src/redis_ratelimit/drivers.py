"""The I/O under `Engine.run`: each `Send` goes to the server (in a cluster, to the node of its key)
and its reply or error reply goes back into the engine, all within one deadline that covers the whole
call, connecting included. Server error replies go back to the engine (it decides on NOSCRIPT, unknown
commands, ...); anything else ends the call and becomes a `CallError` (`errors.from_redis`).

- `SyncDriver`: redis-py's `Redis` (also a Sentinel `master_for` client) and `RedisCluster`. Each
  command goes on a connection of the limiter's own, made as the client's pool makes them, with its
  connect and socket timeouts set to what is left of the deadline (a connection that timed out is
  closed, never reused half-read). What the client would learn with its own timeouts is learned on
  these terms too: the primary's address behind Sentinel, a cluster's map of slots after a node
  failed to answer or answered MOVED. The redis-py names below its documented API that this takes,
  and why, are all in `_redis_internals.py`.
- `AsyncDriver`: `redis.asyncio.Redis` and `redis.asyncio.RedisCluster`, the whole call under
  `asyncio.timeout` (`asyncio.wait_for` before Python 3.11; redis-py closes a connection whose
  command was cancelled).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Generator, Union

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError

from . import _redis_internals as internals
from .engine import Send
from .errors import CallError, from_redis

__all__ = ["SyncDriver", "AsyncDriver", "SyncClient", "AsyncClient"]

_timeout: Any = getattr(asyncio, "timeout", None)

SyncClient = Union[redis.Redis, RedisCluster]
AsyncClient = Union[redis.asyncio.Redis, AsyncRedisCluster]
Steps = Generator[Send, Any, Any]


class _Flight:
    """A FUNCTION LOAD under way on one node, and its answer once it has one."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.reply: Any = None
        self.error: BaseException | None = None


# Each node's last FUNCTION LOAD that succeeded, as a 1-tuple of its answer (a new tuple per load), in
# a dict replaced whole, never updated in place: a call keeps the dict it saw as it sent its last
# command, and a load it has not seen means that command's 'function not found' is older than the
# library (or the library was flushed since; then its next FCALL finds it missing and it loads).
_Loaded = dict[Any, tuple[Any]]


def _loaded_since(loaded: _Loaded, seen: _Loaded, node: Any) -> tuple[Any] | None:
    """The answer of a load to `node` that succeeded after `seen` was read, if any."""
    done = loaded.get(node)
    return done if done is not None and done is not seen.get(node) else None


class _SyncLoads:
    """FUNCTION LOAD at most once per node at a time (the engine machine's rule): a call that finds the
    library missing while a load to that node is under way waits for it, within its own deadline, and
    takes its answer (then sends its own FCALL), instead of loading again; so does a call whose FCALL
    was answered before a load that has since finished (a thread that read its answer late)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.flights: dict[Any, _Flight] = {}
        self.loaded: _Loaded = {}

    def run(self, node: Any, send: Callable[[], Any], end: float, seen: _Loaded) -> Any:
        with self.lock:
            done = _loaded_since(self.loaded, seen, node)
            if done is not None:
                return done[0]
            flight = self.flights.get(node)
            mine = flight is None
            if flight is None:
                flight = self.flights[node] = _Flight()
        if not mine:
            if not flight.done.wait(_left(end)):
                raise redis.exceptions.TimeoutError("the deadline passed")
            if flight.error is not None:
                raise flight.error
            return flight.reply
        try:
            flight.reply = send()
            return flight.reply
        except BaseException as e:
            flight.error = e
            raise
        finally:
            with self.lock:
                if flight.error is None:
                    self.loaded = {**self.loaded, node: (flight.reply,)}
                del self.flights[node]
            flight.done.set()


class SyncDriver:
    def __init__(self, client: SyncClient) -> None:
        self.client = client
        self._single: _Connections | None = None
        self._cluster: _ClusterMap | None = None
        self._lock = threading.Lock()
        self._loads = _SyncLoads()

    def run(self, steps: Steps, deadline: float) -> Any:
        """Runs `steps` to their reply within `deadline` seconds; raises CallError."""
        end = time.monotonic() + deadline
        seen = self._loads.loaded  # the loads known when the call's last command was sent
        try:
            step = next(steps)
            while True:
                if not step.load:
                    seen = self._loads.loaded
                try:
                    reply = self._send(step, end, seen)
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

    def _send(self, step: Send, end: float, seen: _Loaded) -> Any:
        client = self.client
        if isinstance(client, RedisCluster):
            cluster = self._cluster
            if cluster is None:
                with self._lock:
                    cluster = self._cluster = self._cluster or _ClusterMap(client)
            if step.load:
                return self._loads.run(cluster.node_of(step), lambda: cluster.send(step, end), end, seen)
            return cluster.send(step, end)
        single = self._single
        if single is None:
            with self._lock:
                single = self._single = self._single or _Connections.of(client)
        if step.load:
            return self._loads.run(None, lambda: single.send(step, end), end, seen)
        return single.send(step, end)


class _ClusterMap:
    """The limiter's own map of a cluster's slots to their primaries: until it first learns the map
    itself, a slot's primary is the cluster client's (`get_node_from_key`, no I/O), remembered; it
    learns the map with CLUSTER SLOTS on the limiter's own connections, within the call's deadline,
    after a node failed to answer or answered MOVED (a failover, a resharding). (The cluster
    client's own refresh runs with the client's own timeouts, which may wait forever, and may ask the
    node that just hung.) The nodes that last failed are asked last."""

    SLOTS = 16384

    def __init__(self, cluster: RedisCluster) -> None:
        client: Any = cluster  # redis-py's cluster methods are untyped
        self.client = client
        self.lock = threading.Lock()
        default = client.get_default_node()
        base: redis.Redis = client.get_redis_connection(default)
        self.connection_class: Any = internals.connection_class(base)
        self.kwargs: dict[str, Any] = dict(base.get_connection_kwargs())
        self.nodes: dict[tuple[str, int], _Connections] = {}
        self.slots: list[tuple[str, int] | None] = [None] * self.SLOTS
        self.learned = False  # the slots above are the limiter's own map (None: no node serves it)
        self.primaries: list[tuple[str, int]] = [(n.host, int(n.port)) for n in client.get_primaries()]
        self.default: tuple[str, int] = (default.host, int(default.port))
        self.suspects: set[tuple[str, int]] = set()
        self.remap = False

    def connections(self, node: tuple[str, int]) -> _Connections:
        found = self.nodes.get(node)
        if found is None:
            with self.lock:
                found = self.nodes.get(node)
                if found is None:
                    kwargs = {**self.kwargs, "host": node[0], "port": node[1]}
                    found = self.nodes[node] = _Connections(self.connection_class, kwargs)
        return found

    def node_of(self, step: Send) -> tuple[str, int]:
        if step.route is None:
            healthy = [n for n in self.known() if n not in self.suspects]
            return healthy[0] if healthy else self.default
        slot: int = self.client.keyslot(step.route)
        node = self.slots[slot]
        if node is None and not self.learned:
            try:
                holder = self.client.get_node_from_key(step.route)
            except redis.exceptions.SlotNotCoveredError:
                holder = None
            if holder is not None:
                node = self.slots[slot] = (holder.host, int(holder.port))
        if node is None:
            self.remap = True  # learned again on the next call
            raise redis.exceptions.ConnectionError("no node serves the key's slot (the cluster's map is incomplete)")
        return node

    def known(self) -> list[tuple[str, int]]:
        """Every node of the map (the default node first), those that last failed at the end."""
        primaries = [] if self.learned else self.primaries  # the client's, until the map is learned
        nodes = list(dict.fromkeys([self.default, *(n for n in self.slots if n is not None), *primaries,
                                    *self.nodes]))
        return [n for n in nodes if n not in self.suspects] + [n for n in nodes if n in self.suspects]

    def send(self, step: Send, end: float) -> Any:
        if self.remap:
            self.refresh(end)
        node = self.node_of(step)
        try:
            return self.send_to(node, step, end)
        except redis.exceptions.AskError as e:
            target = (e.host or node[0], int(e.port))  # no host: the one asked (cluster-announce)
            if isinstance(e, redis.exceptions.MovedError):
                # The slot moved: its new owner from the reply, the whole map learned again next call.
                self.slots[e.slot_id] = target
                self.remap = True
                return self.send_to(target, step, end)
            return self.send_to(target, step, end, asking=True)  # a slot migrating: once, ASKING first

    def send_to(self, node: tuple[str, int], step: Send, end: float, asking: bool = False) -> Any:
        try:
            reply = self.connections(node).send(step, end, asking)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
            # No answer: a failover may move its slots. The map is learned again on the next call.
            self.suspects.add(node)
            self.remap = True
            raise
        self.suspects.discard(node)
        return reply

    def refresh(self, end: float) -> None:
        """CLUSTER SLOTS from the first node that answers within the deadline, into the map."""
        error: BaseException | None = None
        for node in self.known():
            try:
                reply = self.connections(node).send(Send(("CLUSTER", "SLOTS"), None), end)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError,
                    redis.exceptions.ResponseError) as e:
                error = e
                self.suspects.add(node)
                if isinstance(e, redis.exceptions.TimeoutError) and time.monotonic() >= end:
                    raise
                continue
            self.suspects.discard(node)
            slots: list[tuple[str, int] | None] = [None] * self.SLOTS
            for entry in reply:
                start, stop, primary = int(entry[0]), int(entry[1]), entry[2]
                host = primary[0].decode() if isinstance(primary[0], bytes) else str(primary[0])
                owner = (host or node[0], int(primary[1]))
                for slot in range(start, stop + 1):
                    slots[slot] = owner
            self.slots = slots
            self.learned = True
            self.remap = False
            return
        if error is None or isinstance(error, redis.exceptions.ResponseError):  # not a reply to the call's command
            raise redis.exceptions.ConnectionError(f"no cluster node gave its map: {error!r}")
        raise error


class _Connections:
    """The limiter's own connections to one server, made like the client's pool makes them (its
    connection class and settings: credentials, database, TLS), so that every step, connecting
    included, runs under the call's timeouts. (The pool's `get_connection` connects with the client's
    own timeouts, which may wait forever.) Behind Sentinel (a `master_for` client), the primary's
    address is asked of the sentinels on these terms too (`_SentinelDiscovery`)."""

    IDLE = 32

    def __init__(self, connection_class: Any, kwargs: dict[str, Any], discovery: _SentinelDiscovery | None = None) -> None:
        self.connection_class = connection_class
        self.kwargs = kwargs
        self.discovery = discovery
        self.idle: list[Any] = []
        self.lock = threading.Lock()
        self.packs: dict[Any, Any] = {}  # `_packed`'s

    @classmethod
    def of(cls, client: redis.Redis) -> _Connections:
        sentinel = internals.sentinel_of(client)
        discovery = None if sentinel is None else _SentinelDiscovery(*sentinel)
        return cls(internals.connection_class(client), client.get_connection_kwargs(), discovery)

    def send(self, step: Send, end: float, asking: bool = False) -> Any:
        """`step` on an idle or a new connection, its timeouts set to what is left until `end`
        (`asking`: after ASKING, on the same connection: a cluster slot being migrated). An idle
        connection that the server had closed (a restart, a failover: `server_closed`) is replaced
        by a new one, once, within the same `end`; the other idle ones were opened to the same
        server, and are closed too."""
        with self.lock:
            conn = self.idle.pop() if self.idle else None
        if conn is not None:
            try:
                return self._send_on(conn, step, end, asking)
            except BaseException as e:
                if not server_closed(e):
                    raise
            self._drop_idle()
        # No retry after the deadline's own: one attempt.
        conn = self.connection_class(**{**self.kwargs, "retry": Retry(NoBackoff(), 0)})
        return self._send_on(conn, step, end, asking)

    def _send_on(self, conn: Any, step: Send, end: float, asking: bool) -> Any:
        try:
            internals.set_timeouts(conn, _left(end))
            if internals.connected(conn) and internals.stale(conn):
                conn.disconnect()  # the server closed it (a restart) or it holds a stray reply
            if self.discovery is not None and not internals.connected(conn):
                address = self.discovery.primary(end)
                internals.set_timeouts(conn, _left(end))
                internals.connect_to(conn, address)
            else:
                conn.connect()
            if asking:
                internals.set_socket_timeout(conn, _left(end))
                conn.send_command("ASKING")
                conn.read_response()
            internals.set_socket_timeout(conn, _left(end))
            conn.send_packed_command(_packed(self.packs, conn, step.args))
            internals.set_socket_timeout(conn, _left(end))
            reply = conn.read_response()
        except redis.exceptions.ResponseError:
            self._keep(conn)
            raise
        except BaseException:
            conn.disconnect()  # in an unknown state: never reused
            raise
        self._keep(conn)
        return reply

    def _drop_idle(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.disconnect()

    def _keep(self, conn: Any) -> None:
        with self.lock:
            if len(self.idle) < self.IDLE:
                self.idle.append(conn)
                return
        conn.disconnect()


class _SentinelDiscovery:
    """The primary's address behind Sentinel, asked of each sentinel in turn (SENTINEL MASTER, as
    redis-py's `discover_master` does: a primary neither subjectively nor objectively down, seen by
    enough other sentinels) on connections of the limiter's own, within the call's deadline. (The
    Sentinel client asks with its own timeouts, which may wait forever.)"""

    def __init__(self, manager: Any, service: str) -> None:
        self.manager: Any = manager
        self.service = service
        self.sentinels: dict[int, tuple[Any, _Connections]] = {}

    def connections(self, sentinel: Any) -> _Connections:
        found = self.sentinels.get(id(sentinel))
        if found is None or found[0] is not sentinel:
            found = self.sentinels.setdefault(id(sentinel), (sentinel, _Connections.of(sentinel)))
        return found[1]

    def primary(self, end: float) -> tuple[str, int]:
        errors: list[str] = []
        for sentinel in internals.sentinels(self.manager):
            try:
                reply = self.connections(sentinel).send(Send(("SENTINEL", "MASTER", self.service), None), end)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError,
                    redis.exceptions.ResponseError) as e:
                if isinstance(e, redis.exceptions.TimeoutError) and time.monotonic() >= end:
                    raise
                errors.append(f"{sentinel}: {e!r}")
                continue
            state = _fields(reply)
            flags = set(state.get("flags", "").split(","))
            if ("master" in flags and not flags & {"s_down", "o_down"}
                    and int(state.get("num-other-sentinels", "0")) >= internals.min_other_sentinels(self.manager)):
                forced = internals.forced_primary_ip(self.manager)
                return (forced if forced is not None else state["ip"]), int(state["port"])
            errors.append(f"{sentinel}: the primary is down or not seen by enough sentinels")
        raise MasterNotFoundError(f"No master found for {self.service!r} : {', '.join(errors)}")


def _fields(reply: Any) -> dict[str, str]:
    """SENTINEL MASTER's reply (field, value pairs; a map in RESP3) as text."""
    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    if isinstance(reply, dict):
        return {text(k): text(v) for k, v in reply.items()}
    return {text(reply[i]): text(reply[i + 1]) for i in range(0, len(reply) - 1, 2)}


def _node_of(cluster: Any, step: Send) -> Any:
    """The node of `step`'s key (any node for a keyless command), sync or asyncio RedisCluster."""
    if step.route is None:
        return cluster.get_default_node()
    return cluster.get_node_from_key(step.route.decode() if isinstance(step.route, bytes) else str(step.route))


#: What redis-py (5 to 8, both parsers) says when the server closed a connection or reset it.
_CLOSED_WORDS = ("closed by server", "error while reading", "while writing to socket", "connection reset",
                 "broken pipe")
_CLOSED_ERRORS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, asyncio.IncompleteReadError)


def server_closed(error: BaseException) -> bool:
    """Whether a call failed on a connection the server had closed or reset (a restart, a failover, an
    idle timeout): a new connection may well succeed. Not a timeout, a refused or failed connect,
    a full pool or a refused login: those a new connection would meet again."""
    if isinstance(error, (redis.exceptions.TimeoutError, redis.exceptions.AuthenticationError, TimeoutError)):
        return False
    seen: BaseException | None = error
    for _ in range(4):  # the error and its causes
        if seen is None:
            break
        if isinstance(seen, _CLOSED_ERRORS):
            return True
        if isinstance(seen, redis.exceptions.ConnectionError) and any(
                w in str(seen).lower() for w in _CLOSED_WORDS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


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


class AsyncDriver:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        # FUNCTION LOAD at most once per node at a time: as `_SyncLoads`, on the event loop.
        self._loads: dict[Any, asyncio.Future[Any]] = {}
        self._loaded: _Loaded = {}

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
        retried = False
        seen = self._loaded  # the loads known when the call's last command was sent
        try:
            step = next(steps)
            while True:
                if not step.load:
                    seen = self._loaded
                try:
                    reply = await self._send(step, seen)
                except redis.exceptions.ResponseError as e:
                    step = steps.throw(e)
                    continue
                except Exception as e:
                    # A pooled connection the server had closed (a restart, a failover): redis-py
                    # retries only when the client was given a `Retry` (`Redis(host=...)` has one,
                    # `from_url` none). Once per call, on new connections, within the same deadline.
                    if retried or not server_closed(e):
                        raise
                    retried = True
                    await fresh_connections(self.client)
                    continue
                step = steps.send(reply)
        except StopIteration as done:
            return done.value

    async def _send(self, step: Send, seen: _Loaded) -> Any:
        if not step.load:
            return await self._send_now(step)
        node = _node_of(self.client, step).name if isinstance(self.client, AsyncRedisCluster) else None
        done = _loaded_since(self._loaded, seen, node)
        if done is not None:  # the FCALL was answered before a load that has since finished
            return done[0]
        flight = self._loads.get(node)
        if flight is not None:
            return await asyncio.shield(flight)
        flight = self._loads[node] = asyncio.get_running_loop().create_future()
        flight.add_done_callback(_retrieved)
        try:
            reply = await self._send_now(step)
            flight.set_result(reply)
            self._loaded = {**self._loaded, node: (reply,)}
            return reply
        except BaseException as e:
            flight.set_exception(e if isinstance(e, Exception) else redis.exceptions.TimeoutError("cancelled"))
            raise
        finally:
            del self._loads[node]

    async def _send_now(self, step: Send) -> Any:
        client = self.client
        if isinstance(client, AsyncRedisCluster):
            await client.initialize()  # once: returns at once when the slot map is known
            cluster: Any = client
            return await cluster.execute_command(*step.args, target_nodes=_node_of(cluster, step))
        single: Any = client
        return await single.execute_command(*step.args)


def _retrieved(flight: asyncio.Future[Any]) -> None:
    """Marks a load's error as seen (its waiters, if any, raise it): no warning when none waited."""
    if not flight.cancelled():
        flight.exception()


async def fresh_connections(client: AsyncClient) -> None:
    """Closes the idle connections of an asyncio client's pool (opened to a server that has closed
    one of them: a restart, a failover), so that the next command connects anew. In use ones are left
    to their tasks (redis-py closes one that fails); a cluster client finds its nodes anew itself."""
    pool: Any = getattr(client, "connection_pool", None)
    if pool is not None and not isinstance(client, AsyncRedisCluster):
        await pool.disconnect(inuse_connections=False)
