"""Which engine answers, and the library coming back where a server lost it: NOSCRIPT after SCRIPT
FLUSH, "Function not found" after FUNCTION FLUSH, both after a restart; verify()'s answers for users
with fewer rights."""

from __future__ import annotations

import os

import pytest
import redis

from conftest import Blocking, MakeLimiter, Servers
from redis_ratelimit import Backend, ConfigurationError, FailurePolicy, FixedWindow, TokenBucket
from redis_ratelimit.engine import script
from servers import Server

BUCKET = TokenBucket(10, 0.001)


def remaining(limiter: object, key: str = "rl:n") -> int:
    decision = limiter.check(key, BUCKET)  # type: ignore[attr-defined]
    assert decision.allowed and not decision.degraded, decision
    return int(decision.remaining)


@pytest.mark.parametrize("backend", [Backend.AUTO, Backend.FUNCTIONS])
def test_function_flush_loads_the_library_again(stock_server: Server, make_limiter: MakeLimiter,
                                                backend: Backend) -> None:
    limiter = make_limiter(stock_server, backend=backend)
    assert remaining(limiter) == 9
    with stock_server.client() as r:
        r.execute_command("FUNCTION", "FLUSH")
        assert r.execute_command("FUNCTION", "LIST") == []
    assert remaining(limiter) == 8, "loaded again, and sent again once: counted once"
    with stock_server.client() as r:
        assert len(r.execute_command("FUNCTION", "LIST")) == 1
    assert limiter.verify()["engine"] == "functions"


def test_script_flush_loads_the_script_again(stock_server: Server, make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(stock_server, backend=Backend.SCRIPTS)
    assert remaining(limiter) == 9
    sha = script("rl_token").sha
    with stock_server.client() as r:
        r.execute_command("SCRIPT", "FLUSH")
        assert r.execute_command("SCRIPT", "EXISTS", sha) == [0]
    assert remaining(limiter) == 8
    with stock_server.client() as r:
        assert r.execute_command("SCRIPT", "EXISTS", sha) == [1]


@pytest.mark.parametrize("backend", [Backend.AUTO, Backend.FUNCTIONS, Backend.SCRIPTS])
def test_a_restarted_server_gets_the_library_again(stock_server: Server, make_limiter: MakeLimiter,
                                                   backend: Backend) -> None:
    limiter = make_limiter(stock_server, backend=backend)
    assert remaining(limiter) == 9
    stock_server.restart()  # empty: no keys, no functions, no scripts
    assert remaining(limiter) == 9
    assert remaining(limiter) == 8


def test_a_server_that_gains_the_module_after_an_outage_is_asked_again(
        servers: Servers, make_limiter: MakeLimiter) -> None:
    """Under AUTO, an outage sends the engine back to the start (a failover may land on another kind of
    server): the module is asked first again."""
    stock = servers.redis(module=False)
    limiter = make_limiter(stock)
    assert remaining(limiter) == 9 and limiter.verify()["engine"] == "functions"
    stock.stop()
    assert limiter.check("rl:n", BUCKET).degraded
    assert str(limiter.engine) == "not yet known"
    stock.module = True
    stock.start()
    assert remaining(limiter) == 9
    assert limiter.verify() == {"engine": "module", "why": "the module answered"}


def stats(server: Server, command: str) -> tuple[int, int]:
    """How many times the server ran `command`, and how many of them failed (INFO commandstats)."""
    with server.client() as r:
        found = r.info("commandstats").get(f"cmdstat_{command}", {})
    return int(found.get("calls", 0)), int(found.get("failed_calls", 0))


def test_function_not_found_loads_the_library_and_never_goes_back_to_the_module(
        stock_server: Server, make_limiter: MakeLimiter) -> None:
    """The machine's rule: in FCALL, "Function not found" loads the library and sends FCALL again; the
    module is not asked again (it was: it is not loaded): one failed FCALL, not two."""
    limiter = make_limiter(stock_server)
    assert str(limiter.engine) == "not yet known", "nothing decided yet"
    assert remaining(limiter) == 9
    assert str(limiter.engine) == "the Lua library through FCALL"
    with stock_server.client() as r:
        r.execute_command("FUNCTION", "FLUSH")
    fcalls, loads = stats(stock_server, "fcall"), stats(stock_server, "function|load")
    assert remaining(limiter) == 8
    calls, failed = stats(stock_server, "fcall")
    assert (calls - fcalls[0], failed - fcalls[1]) == (2, 1), "FCALL (Function not found), then FCALL"
    assert stats(stock_server, "function|load")[0] - loads[0] == 1
    assert str(limiter.engine) == "the Lua library through FCALL"


def test_the_engine_is_not_yet_known_before_the_first_decision(module_server: Server,
                                                               make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(module_server)
    assert str(limiter.engine) == "not yet known"
    assert remaining(limiter) == 9
    assert str(limiter.engine) == "the ratelimit module"
    assert str(make_limiter(module_server, backend=Backend.MODULE).engine) == "the ratelimit module"


def test_verify_says_which_engine_and_why(servers: Servers, make_limiter: MakeLimiter) -> None:
    module = servers.redis(module=True)
    assert make_limiter(module).verify() == {"engine": "module", "why": "the module answered"}
    assert make_limiter(module, backend=Backend.MODULE).verify() == {"engine": "module", "why": "asked for"}
    stock = servers.redis(module=False)
    assert make_limiter(stock).verify() == {
        "engine": "functions", "why": "module not loaded; using the Lua library through FCALL"}
    with stock.client() as r:
        r.execute_command("ACL", "SETUSER", "scripts", "on", ">pw", "~rl:*", "+@all", "-@scripting", "+evalsha",
                          "+eval")
        r.execute_command("ACL", "SETUSER", "nothing", "on", ">pw", "~rl:*", "+ping", "+hello", "+client")
    assert make_limiter(stock, client={"username": "scripts", "password": "pw"}).verify() == {
        "engine": "scripts",
        "why": "module not loaded; FCALL or FUNCTION LOAD refused to this user (NOPERM); "
               "using the Lua library through EVALSHA scripts"}
    nobody = make_limiter(stock, FailurePolicy.open(), client={"username": "nothing", "password": "pw"})
    with pytest.raises(ConfigurationError):
        nobody.verify()
    denied = nobody.check("rl:x", FixedWindow(1, 60))
    assert denied.degraded and denied.allowed, "decided by the failure policy, visibly"
    with pytest.raises(ConfigurationError):
        make_limiter(stock, backend=Backend.MODULE).verify()


def test_redis_6_2_takes_the_scripts(servers: Servers, make_limiter: MakeLimiter) -> None:
    """A server without FUNCTION (Redis 6.2, built by `scripts/servers.sh redis-6.2`; CI sets
    RL_REDIS62_SERVER): AUTO goes on to EVALSHA."""
    binary = os.environ.get("RL_REDIS62_SERVER")
    if not binary:
        pytest.skip("RL_REDIS62_SERVER is not set (scripts/servers.sh redis-6.2 builds one)")
    old = servers.redis(module=False, binary=binary)
    limiter = make_limiter(old)
    assert [remaining(limiter) for _ in range(3)] == [9, 8, 7]
    assert limiter.verify() == {
        "engine": "scripts",
        "why": "module not loaded; FCALL unknown to this server; using the Lua library through EVALSHA scripts"}
    with old.client() as r:
        r.execute_command("SCRIPT", "FLUSH")
    assert remaining(limiter) == 6
