"""Throwaway redis-server processes on free loopback ports for the tests: module-enabled or stock, a
3-primary cluster, a primary behind one Sentinel. Each can be hung (SIGSTOP), resumed, stopped and
restarted on its port; every process is killed by its owner (the fixtures in conftest.py), also when a
test fails.

Environment (as testkit/src/lib.rs): RL_MODULE (the module; default <repo>/target/release/
libredis_ratelimit.so), RL_REDIS_SERVER, RL_REDIS_CLI, RL_RUST_SERVER (the Rust demo service; default
<repo>/target/release/examples/server), RL_REDIS62_SERVER (a Redis 6.2 server, for the EVALSHA engine
where FUNCTION is unknown: scripts/servers.sh redis-6.2).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import redis

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
#: The deadline of limiters in tests not about deadlines: one a loaded machine (three suites on two
#: cores) always meets, so an answer is never turned into a degraded decision.
LONG_DEADLINE = 5.0


def module_path() -> Path:
    return Path(os.environ.get("RL_MODULE") or REPO / "target/release/libredis_ratelimit.so")


def rust_server_path() -> Path:
    return Path(os.environ.get("RL_RUST_SERVER") or REPO / "target/release/examples/server")


def server_binary() -> str:
    return os.environ.get("RL_REDIS_SERVER", "redis-server")


def cli_binary() -> str:
    return os.environ.get("RL_REDIS_CLI", "redis-cli")


def free_port(bus: bool = False) -> int:
    """A free loopback port; with `bus`, one whose cluster bus port (+10000) is free too."""
    while True:
        with socket.socket() as s:
            s.bind((HOST, 0))
            port: int = s.getsockname()[1]
        if not bus:
            return port
        if port + 10000 <= 65535 and _is_free(port + 10000):
            return port


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def wait_until(what: str, ready: Callable[[], bool], timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if ready():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.02)
    raise TimeoutError(f"waited {timeout}s for {what}")


async def aclose(client: Any) -> None:
    """Closes a redis.asyncio client: `aclose()` since redis-py 5.0.1, `close()` before."""
    await (client.aclose() if hasattr(client, "aclose") else client.close())


class Server:
    """One redis-server process. `module=True` loads the ratelimit module."""

    def __init__(self, module: bool, args: tuple[str, ...] = (), bus: bool = False, binary: str | None = None) -> None:
        self.module = module
        self.binary = binary or server_binary()
        self.args = args
        self.bus = bus
        self.port = free_port(bus)
        self.started = False
        self.dir = Path(tempfile.mkdtemp(prefix="rl-py-test-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.hung = False

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def log(self) -> Path:
        return self.dir / "server.log"

    def command(self) -> list[str]:
        cmd = [self.binary, "--port", str(self.port), "--bind", HOST, "--save", "", "--appendonly", "no",
               "--dir", str(self.dir), "--logfile", str(self.log)]
        if self.module:
            cmd += ["--loadmodule", str(module_path())]
        return cmd + list(self.args)

    @property
    def stderr(self) -> Path:
        """What the server wrote before its log was open (a config error, a module that fails to load)."""
        return self.dir / "server.stderr"

    def start(self) -> Server:
        # A first start whose port another process took since free_port() (the suite runs in parallel
        # workers) tries another port; a restart keeps its port, as a restarted server does.
        attempts = 1 if self.started else 5
        for attempt in range(attempts):
            with open(self.stderr, "wb") as stderr:
                self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=stderr)
            try:
                wait_until(f"redis-server on port {self.port}", self._ready, timeout=20.0)
            except RuntimeError:
                if "Address already in use" not in self.tail() or attempt == attempts - 1:
                    raise
                self.port = free_port(self.bus)
                self.log.unlink(missing_ok=True)
                continue
            except TimeoutError:
                self.stop()
                raise RuntimeError(f"redis-server did not start: {self.tail()}") from None
            self.started = True
            return self
        raise AssertionError("unreachable")

    def _ready(self) -> bool:
        """testkit's rule (testkit/src/lib.rs): ready once INFO on the port says this child's own
        process_id (not another server that took the port: that child then exits, and the start is
        tried on another port) and loading:0 (INFO is answered while an RDB or AOF loads)."""
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"redis-server exited: {self.tail()}")
        assert self.process is not None
        with self.client(timeout=0.5) as r:
            info = r.info()  # plain INFO: both sections (Redis 6.2 takes one section name only)
        return bool(info.get("process_id") == self.process.pid and info.get("loading") == 0)

    def tail(self) -> str:
        parts = []
        for path in (self.stderr, self.log):
            try:
                parts.append(path.read_text(errors="replace")[-2000:])
            except OSError:
                parts.append(f"(no {path.name})")
        return "\n".join(p for p in parts if p.strip()) or "(no log)"

    def client(self, timeout: float | None = 5.0, **kwargs: object) -> redis.Redis:
        options: dict[str, object] = {"socket_timeout": timeout, "socket_connect_timeout": timeout, **kwargs}
        return redis.Redis(host=HOST, port=self.port, **options)  # type: ignore[arg-type]

    def cluster_ok(self) -> bool:
        with self.client(timeout=1) as r:
            return bool(r.cluster("INFO").get("cluster_state") == "ok")

    def linked(self) -> bool:
        """A primary, or a replica whose link to its primary is up."""
        with self.client(timeout=1) as r:
            info = r.info("replication")
            return bool(info["role"] == "master" or info.get("master_link_status") == "up")

    def hang(self) -> None:
        """SIGSTOP: the port accepts connections (the kernel does) but nothing answers."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.hung = True

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.hung = False

    def stop(self) -> None:
        """Kills the process (nothing listens on the port afterwards)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process = None
        self.hung = False

    def restart(self) -> Server:
        """Stopped and started again on the same port: no data, no scripts, no functions."""
        self.stop()
        return self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


CLUSTER_ARGS = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout",
                "2000")


class Cluster:
    """Three primaries (with `replicas`: that many replicas each) made with `redis-cli --cluster create`."""

    def __init__(self, module: bool, replicas: int = 0) -> None:
        self.replicas = replicas
        self.nodes = [Server(module, CLUSTER_ARGS, bus=True) for _ in range(3 * (1 + replicas))]

    def start(self) -> Cluster:
        for node in self.nodes:
            node.start()
        addresses = [f"{HOST}:{n.port}" for n in self.nodes]
        out = subprocess.run([cli_binary(), "--cluster", "create", *addresses, "--cluster-replicas", str(self.replicas),
                              "--cluster-yes"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout}{out.stderr}")
        for node in self.nodes:
            wait_until(f"cluster_state:ok on port {node.port}", node.cluster_ok)
            if self.replicas:
                wait_until(f"the replication link of port {node.port}", node.linked)
        return self

    def primary_of(self, key: str) -> Server:
        """The node serving `key`'s slot now."""
        with self.client() as rc:
            port = rc.get_node_from_key(key).port
        return next(n for n in self.nodes if n.port == port)

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(HOST, n.port) for n in self.nodes]

    def client(self, **kwargs: object) -> redis.RedisCluster:
        from redis.cluster import ClusterNode
        node: Any = ClusterNode
        return redis.RedisCluster(startup_nodes=[node(h, p) for h, p in self.startup_nodes],
                                  **kwargs)  # type: ignore[arg-type]

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()


SENTINEL_SERVICE = "rl-primary"


class Sentinel:
    """A primary (module or stock) watched by one sentinel (`redis-server --sentinel`)."""

    def __init__(self, module: bool) -> None:
        self.primary = Server(module)
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="rl-py-sentinel-"))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Sentinel:
        self.primary.start()
        # Ready by testkit's rule too: INFO shows this child's own process_id (and it names the
        # primary); a sentinel that exits because its port was taken is started again on another.
        for attempt in range(5):
            conf = self.dir / "sentinel.conf"
            conf.write_text(
                f"port {self.port}\nbind {HOST}\ndir {self.dir}\nlogfile {self.dir / 'sentinel.log'}\n"
                f"sentinel monitor {SENTINEL_SERVICE} {HOST} {self.primary.port} 1\n"
                f"sentinel down-after-milliseconds {SENTINEL_SERVICE} 1000\n"
                f"sentinel failover-timeout {SENTINEL_SERVICE} 5000\n")
            self.process = subprocess.Popen([server_binary(), str(conf), "--sentinel"], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)
            try:
                wait_until("the sentinel to name the primary", self._ready, timeout=20.0)
                return self
            except RuntimeError:
                if attempt == 4:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"the sentinel exited: {self._log()}")
        with redis.Redis(host=HOST, port=self.port, socket_timeout=1) as r:
            if r.info("server").get("process_id") != self.process.pid:
                return False
            addr = r.execute_command("SENTINEL", "get-master-addr-by-name", SENTINEL_SERVICE)
            return addr is not None and int(addr[1]) == self.primary.port

    def _log(self) -> str:
        try:
            return (self.dir / "sentinel.log").read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        return [(HOST, self.port)]

    def cleanup(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            self.process = None
        shutil.rmtree(self.dir, ignore_errors=True)
        self.primary.cleanup()
