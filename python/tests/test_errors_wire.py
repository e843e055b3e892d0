"""errors.json (contract/vectors) over real sockets, as node/test/replies-wire.test.ts does for Node: a TCP
server on loopback answers every limiter command with a case's RESP2 bytes (its RESP3 bytes to a
connection that said HELLO 3), or fails as its transport says (no answer, a reset, a closed connection,
a port nothing listens on), and the real redis-py client (RESP2 and RESP3) under the real `Limiter` and
`AsyncLimiter` reads it. Each case's outcome is the vector's: its class (the error `check_strict`
raises), the failure policy's decision or the UsageError raised, what the breaker records (``failure``:
a failure in a row, ``answered``: a success, as a decision is), the counter that went up by one and
the log (``outage``, ``once_per_cause``, ``once_per_key``, ``none``)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import socket
import struct
import threading
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from conftest import Lines
from redis_ratelimit import AsyncLimiter, Backend, Breaker, FailurePolicy, Limiter, TokenBucket, UsageError
from redis_ratelimit.decision import Decision
from redis_ratelimit.errors import CallError
from servers import HOST, LONG_DEADLINE, aclose, free_port
from test_contract_vectors import cases

#: The deadline of the `timeout` case only (the server never answers: each call waits it out).
NO_ANSWER_DEADLINE = 0.3


def commands_in(buf: bytes) -> tuple[list[list[bytes]], bytes]:
    """The whole commands in `buf` (RESP arrays of bulk strings), and what is left of it."""
    out: list[list[bytes]] = []
    at = 0
    while True:
        start = at
        end = buf.find(b"\r\n", at)
        if end < 0 or not buf.startswith(b"*", at):
            return out, buf[start:]
        count, at = int(buf[at + 1:end]), end + 2
        args: list[bytes] = []
        for _ in range(count):
            end = buf.find(b"\r\n", at)
            if end < 0:
                return out, buf[start:]
            length = int(buf[at + 1:end])
            at = end + 2
            if at + length + 2 > len(buf):
                return out, buf[start:]
            args.append(buf[at:at + length])
            at += length + 2
        out.append(args)


class Answering:
    """A loopback server whose every limiter command (RL.*, FCALL, EVALSHA) gets the case's answer; the
    client's own setup commands (HELLO, CLIENT SETINFO, ...) get what they need. `refused`: a free port
    nothing listens on."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.transport: str | None = spec.get("transport")
        self.hello3 = 0  # connections that said HELLO 3 (answered with the RESP3 bytes)
        self.sent: list[list[bytes]] = []  # the limiter commands received
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        if self.transport == "refused":
            self.port = free_port()
            return
        self._listener = socket.create_server((HOST, 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            conn.settimeout(None)
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        pending, resp3 = b"", False
        try:
            while not self._stop.is_set():
                data = conn.recv(65536)
                if not data:
                    return
                cmds, pending = commands_in(pending + data)
                for cmd in cmds:
                    name = cmd[0].decode().upper()
                    if name == "HELLO" and cmd[1:2] == [b"3"]:
                        resp3 = True
                        with self._lock:
                            self.hello3 += 1
                        conn.sendall(b"%1\r\n+proto\r\n:3\r\n")
                    elif name == "PING":
                        conn.sendall(b"+PONG\r\n")
                    elif not (name.startswith("RL.") or name in ("FCALL", "FCALL_RO", "EVALSHA")):
                        conn.sendall(b"+OK\r\n")
                    else:
                        with self._lock:
                            self.sent.append(cmd)
                        if "resp2" in self.spec:
                            conn.sendall((self.spec["resp3"] if resp3 else self.spec["resp2"]).encode())
                        elif self.transport == "reset":
                            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                            conn.close()  # an RST
                            return
                        elif self.transport == "closed":
                            conn.shutdown(socket.SHUT_RDWR)
                            conn.close()
                            return
                        # timeout: no answer, ever
        except OSError:
            return

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.close()
            except OSError:
                pass


#: (limiter, RESP version): the sync Limiter (its own connections, made as redis.Redis' pool makes them)
#: and the AsyncLimiter (redis.asyncio.Redis' pool), each on RESP2 and RESP3.
FLAVORS = [("sync", 2), ("sync", 3), ("async", 2), ("async", 3)]


class Flavor:
    """A limiter of one flavor on the server's port, its methods called alike (awaited on one loop for
    the asyncio limiter)."""

    def __init__(self, mode: str, protocol: int, port: int) -> None:
        self.mode = mode
        self.loop = asyncio.new_event_loop() if mode == "async" else None
        if mode == "sync":
            self.client: Any = redis.Redis(host=HOST, port=port, protocol=protocol)
        else:
            # No retry of redis-py's own (its back-off would outlast the deadline on a refused or reset
            # connection, which then reads as a deadline: an outage either way, but not the case's transport).
            self.client = aioredis.Redis(host=HOST, port=port, protocol=protocol, retry=Retry(NoBackoff(), 0))

    def limiter(self, failure: FailurePolicy, deadline: float, breaker: Breaker | None = None) -> Any:
        cls: Any = Limiter if self.mode == "sync" else AsyncLimiter
        return cls(self.client, failure, backend=Backend.MODULE, deadline=deadline, breaker=breaker, name="wire")

    def run(self, limiter: Any, method: str, *args: Any) -> Decision | BaseException:
        """The call's decision, or what it raised."""
        try:
            if self.loop is None:
                decided: Decision = getattr(limiter, method)(*args)
                return decided
            return self.loop.run_until_complete(getattr(limiter, method)(*args))  # type: ignore[no-any-return]
        except Exception as e:  # noqa: BLE001 - what the call raised is the outcome
            return e

    def close(self) -> None:
        if self.loop is None:
            self.client.close()
            return
        self.loop.run_until_complete(aclose(self.client))
        self.loop.close()


def _call(spec: dict[str, Any]) -> tuple[str, TokenBucket, int]:
    call = spec["call"]
    policy = call["policy"]
    assert call["method"] == "check" and policy["kind"] == "token_bucket", call
    return call["key"], TokenBucket(capacity=policy["limit"], per_second=policy["rate"]), call["cost"]


def _logged(lines: Lines, since: int) -> list[logging.LogRecord]:
    """The limiter's lines since `since`, but the breaker's own (its opening is the breaker's check)."""
    return [r for r in lines.records[since:] if "circuit breaker" not in r.getMessage()]


ZERO = {"outage": 0, "misconfigured": 0, "conflicts": 0, "usage_errors": 0, "local": 0}


@pytest.mark.parametrize("flavor", FLAVORS, ids=lambda f: f"{f[0]}-resp{f[1]}")
@pytest.mark.parametrize("case", cases("errors"), ids=lambda c: json.dumps(
    {k: v for k, v in c["input"].items() if k not in ("call", "resp2", "resp3")})[:100])
def test_errors_on_the_wire(case: dict[str, Any], flavor: tuple[str, int], lines: Lines) -> None:
    spec, expected = case["input"], case["output"]
    mode, protocol = flavor
    key, policy, cost = _call(spec)
    failure = FailurePolicy.open() if spec["failure"] == "open" else FailurePolicy.closed()
    deadline = NO_ANSWER_DEADLINE if spec.get("transport") == "timeout" else LONG_DEADLINE
    server = Answering(spec)
    made = Flavor(mode, protocol, server.port)
    try:
        # The breaker opens after 2 failures in a row, and has seen one (as after an outage's first call).
        limiter = made.limiter(failure, deadline, Breaker(failures=2, cooldown=60.0))
        limiter.breaker.failure()
        since = len(lines.records)
        got = made.run(limiter, "check", key, policy, cost)

        # The outcome: the failure policy's decision, or the caller's mistake raised.
        if "raise" in expected:
            assert isinstance(got, UsageError), got
            assert {"code": got.code, "message": got.message} == expected["raise"]
        else:
            assert isinstance(got, Decision), got
            assert {"allowed": got.allowed, "degraded": got.degraded} == expected["decision"]
        # The counter named by the case, up by one; no other.
        assert dataclasses.asdict(limiter.counts) == {**ZERO, expected["counter"]: 1}
        # The breaker: a failure (the second in a row opens it), or an answer (the run of failures ends).
        if expected["breaker"] == "failure":
            assert limiter.breaker.open and limiter.breaker.opened == 1
        else:
            assert expected["breaker"] == "answered"
            assert not limiter.breaker.open
            limiter.breaker.failure()
            assert not limiter.breaker.open, "the answer ended the failures in a row: one more does not open it"
        # The log.
        logged = _logged(lines, since)
        log = expected["log"]
        if log == "none":
            assert logged == []
        elif log == "outage":
            [line] = logged
            assert line.levelno == logging.WARNING and "Redis did not decide" in line.getMessage()
            assert getattr(line, "cause")
        else:
            [line] = logged
            assert line.levelno == logging.ERROR
            if log == "once_per_cause":
                assert "misconfigured" in line.getMessage() and limiter.misconfigured
            else:
                assert log == "once_per_key", log
                assert f"conflict on {key} " in line.getMessage()
            again = made.run(limiter, "check", key, policy, cost)
            assert isinstance(again, Decision) and again.degraded
            assert _logged(lines, since) == [line], "logged once"

        # The class, as the error the strict call raises says (a limiter of its own: the breaker above may be open).
        strict = made.run(made.limiter(failure, deadline), "check_strict", key, policy, cost)
        if expected["class"] == "usage":
            assert isinstance(strict, UsageError) and strict.message == expected["raise"]["message"], strict
        else:
            assert isinstance(strict, CallError), strict
            assert strict.reply_class.value == expected["class"], strict
            if "transport" in spec:
                assert getattr(strict, "transport") == spec["transport"], strict
            else:
                assert getattr(strict, "reply") == spec["reply"], "the reply as the server wrote it"

        # What went on the wire: the call's command (module engine), on RESP3 after HELLO 3.
        if spec.get("transport") != "refused":
            assert server.sent and server.sent[0][0].upper().startswith(b"RL.") and server.sent[0][1] == key.encode()
            assert (server.hello3 > 0) == (protocol == 3), server.hello3
    finally:
        made.close()
        server.close()
