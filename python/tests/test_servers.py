"""The test harness's own rule (testkit's): a server is ready when INFO on its port shows this child's
process_id and loading:0, not when something answers PING there. A start whose port another server
took is tried again on another port, and the server returned is the one started."""

from __future__ import annotations

from conftest import Servers
from servers import Server


def test_a_start_on_a_taken_port_moves_to_another_and_is_its_own_child(servers: Servers) -> None:
    holder = servers.redis(module=False)
    late = Server(module=False)
    servers._own(late)
    late.port = holder.port  # another server took it since the port was picked
    late.start()
    assert late.port != holder.port, "tried again on another port"
    assert late.process is not None
    with late.client() as r:
        assert r.info("server")["process_id"] == late.process.pid, "its own child answers, not the holder"


def test_a_restart_answers_once_its_data_is_loaded(servers: Servers) -> None:
    """A restart with an RDB loaded slowly (key-load-delay): ready means loading:0, so its first
    command sees every key (PING is answered while it loads)."""
    server = servers.redis(module=False, args=("--key-load-delay", "200", "--loading-process-events-interval-bytes",
                                               "1024"))
    with server.client() as r:
        r.mset({f"k:{i}": "v" * 100 for i in range(2000)})
        r.save()
    server.stop()
    server.start()
    with server.client() as r:
        assert r.dbsize() == 2000
