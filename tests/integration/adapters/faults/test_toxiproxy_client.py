"""The Toxiproxy client against a real toxiproxy-server, checked with toxiproxy-python as an oracle; the
managed server's life cycle; and bounded failure against servers that refuse, hang or fail."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from toxiproxy import Toxiproxy
from toxiproxy_testkit import (
    alive,
    closed_port,
    echo_server,
    hanging_server,
    oracle,
    oracle_toxics,
    recording_proxy,
    round_trip_s,
    scripted_server,
    stubborn_binary,
    wait_until,
)

from cliffwatch.adapters.faults import toxiproxy_server
from cliffwatch.adapters.faults.toxiproxy import ToxiproxyClient
from cliffwatch.adapters.faults.toxiproxy_server import ManagedToxiproxy, find_toxiproxy_server
from cliffwatch.domain.errors import FaultInjectionFailed
from cliffwatch.domain.scenario.faults import ProxySpec, ToxicState, ToxicType, toxic_name

if TYPE_CHECKING:
    from conftest import ToxiproxyServer

Names = Callable[[str], str]


@pytest.fixture
def truth(toxiproxy: ToxiproxyServer, monkeypatch: pytest.MonkeyPatch) -> Toxiproxy:
    """toxiproxy-python on the session's server (it uses requests, which would follow an HTTP proxy)."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    return oracle(toxiproxy.host, toxiproxy.port)


@pytest.fixture
def names(truth: Toxiproxy) -> Iterator[Names]:
    """Proxy names unique to the test; its proxies are deleted afterwards (with the oracle)."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    yield lambda what: f"{prefix}-{what}"
    for name, proxy in truth.proxies().items():
        if name.startswith(prefix):
            proxy.destroy()


@pytest.fixture
async def client(toxiproxy: ToxiproxyServer) -> AsyncIterator[ToxiproxyClient]:
    async with ToxiproxyClient(toxiproxy.url, timeout_s=2.0) as opened:
        yield opened


async def test_the_server_is_the_pinned_release(client: ToxiproxyClient) -> None:
    assert await client.version() == "2.12.0"


async def test_a_proxy_on_port_0_reports_the_port_it_bound(
    client: ToxiproxyClient, truth: Toxiproxy, names: Names
) -> None:
    created = await client.create_proxy(name=names("p"), listen="127.0.0.1:0", upstream="127.0.0.1:9")
    host, _, port = created.listen.rpartition(":")
    assert (host, created.upstream, created.enabled, created.toxics) == ("127.0.0.1", "127.0.0.1:9", True, ())
    assert int(port) > 0
    seen = truth.get_proxy(names("p"))
    assert (seen.listen, seen.upstream, seen.enabled) == (created.listen, "127.0.0.1:9", True)
    assert await client.get_proxy(names("p")) == created
    assert (await client.proxies())[names("p")] == created
    assert await client.get_proxy(names("absent")) is None


async def test_update_proxy_changes_only_what_is_given(client: ToxiproxyClient, truth: Toxiproxy, names: Names) -> None:
    created = await client.create_proxy(name=names("p"), listen="127.0.0.1:0", upstream="127.0.0.1:9")
    disabled = await client.update_proxy(names("p"), enabled=False)
    assert disabled == replace(created, enabled=False)
    assert truth.get_proxy(names("p")).enabled is False
    moved = await client.update_proxy(names("p"), upstream="127.0.0.1:10", enabled=True)
    assert (moved.upstream, moved.enabled) == ("127.0.0.1:10", True)
    assert (truth.get_proxy(names("p")).upstream, truth.get_proxy(names("p")).enabled) == ("127.0.0.1:10", True)


async def test_delete_proxy_says_whether_it_was_there(client: ToxiproxyClient, truth: Toxiproxy, names: Names) -> None:
    await client.create_proxy(name=names("p"), listen="127.0.0.1:0", upstream="127.0.0.1:9")
    assert await client.delete_proxy(names("p")) is True
    assert truth.get_proxy(names("p")) is None
    assert await client.delete_proxy(names("p")) is False


async def test_ensure_proxy_creates_once_then_reuses(client: ToxiproxyClient, names: Names) -> None:
    first, created = await client.ensure_proxy(names("p"), "127.0.0.1:0", "127.0.0.1:9")
    assert created is True
    assert await client.ensure_proxy(names("p"), "127.0.0.1:0", "127.0.0.1:9") == (first, False)
    assert await client.ensure_proxy(names("p"), first.listen, "127.0.0.1:9") == (first, False)  # the actual port


@pytest.mark.parametrize(
    ("listen", "upstream"), [("127.0.0.1:0", "127.0.0.1:10"), ("127.0.0.1:{other}", "127.0.0.1:9")]
)
async def test_ensure_proxy_leaves_someone_elses_proxy_alone(
    client: ToxiproxyClient, truth: Toxiproxy, names: Names, listen: str, upstream: str
) -> None:
    theirs = truth.create(upstream="127.0.0.1:9", name=names("theirs"), listen="127.0.0.1:0")
    theirs.add_toxic(type="latency", name="their-latency", attributes={"latency": 5})
    with pytest.raises(FaultInjectionFailed) as failed:
        await client.ensure_proxy(names("theirs"), listen.format(other=closed_port()), upstream)
    assert (failed.value.status, failed.value.proxy) == (409, names("theirs"))
    assert client.url in str(failed.value)
    seen = truth.get_proxy(names("theirs"))
    assert (seen.listen, seen.upstream) == (theirs.listen, "127.0.0.1:9")
    assert list(oracle_toxics(truth, names("theirs"))) == ["their-latency"]


async def test_populate_creates_the_missing_and_keeps_the_existing(
    client: ToxiproxyClient, truth: Toxiproxy, names: Names
) -> None:
    kept = truth.create(upstream="127.0.0.1:9", name=names("kept"), listen="127.0.0.1:0")
    kept.add_toxic(type="latency", name="kept-latency", attributes={"latency": 5})
    specs = [
        ProxySpec(name=names("new"), listen="127.0.0.1:0", upstream="127.0.0.1:11"),
        ProxySpec(name=names("kept"), listen="127.0.0.1:0", upstream="127.0.0.1:9"),
    ]
    new, same = await client.populate(specs)
    assert (new.name, new.upstream, same.name, same.listen) == (
        names("new"),
        "127.0.0.1:11",
        names("kept"),
        kept.listen,
    )
    assert truth.get_proxy(names("new")).listen == new.listen
    assert list(oracle_toxics(truth, names("kept"))) == ["kept-latency"]  # not replaced, as Toxiproxy would
    conflicting = [
        ProxySpec(name=names("other"), listen="127.0.0.1:0", upstream="127.0.0.1:12"),
        ProxySpec(name=names("kept"), listen="127.0.0.1:0", upstream="127.0.0.1:13"),
    ]
    with pytest.raises(FaultInjectionFailed, match="left alone"):
        await client.populate(conflicting)
    assert truth.get_proxy(names("other")) is None  # refused before anything was created


TOXICS = [  # type, stream, attributes set, attributes then updated
    (ToxicType.LATENCY, "downstream", {"latency": 150, "jitter": 10}, {"jitter": 20}),
    (ToxicType.BANDWIDTH, "upstream", {"rate": 64}, {"rate": 128}),
    (ToxicType.TIMEOUT, "downstream", {"timeout": 500}, {"timeout": 0}),
    (ToxicType.RESET_PEER, "upstream", {"timeout": 100}, {"timeout": 200}),
    (ToxicType.SLOW_CLOSE, "downstream", {"delay": 100}, {"delay": 250}),
    (ToxicType.SLICER, "upstream", {"average_size": 64, "size_variation": 16, "delay": 10}, {"delay": 20}),
    (ToxicType.LIMIT_DATA, "downstream", {"bytes": 4096}, {"bytes": 8192}),
]


@pytest.mark.parametrize(("kind", "stream", "attributes", "update"), TOXICS, ids=[t[0].value for t in TOXICS])
async def test_each_toxic_is_stored_exactly_as_set(
    client: ToxiproxyClient,
    truth: Toxiproxy,
    names: Names,
    kind: ToxicType,
    stream: str,
    attributes: dict[str, int],
    update: dict[str, int],
) -> None:
    proxy = names("p")
    await client.create_proxy(name=proxy, listen="127.0.0.1:0", upstream="127.0.0.1:9")
    name = toxic_name("run1", 0, 0, kind)
    wanted = ToxicState(name=name, type=kind.value, stream=stream, toxicity=0.5, attributes=attributes)
    assert await client.add_toxic(proxy, wanted) == wanted
    assert oracle_toxics(truth, proxy) == {name: wanted}
    assert await client.toxics(proxy) == [wanted]
    assert (await client.get_proxy(proxy)).toxics == (wanted,)  # type: ignore[union-attr]

    updated = replace(wanted, toxicity=0.25, attributes={**attributes, **update})
    assert await client.update_toxic(proxy, name, toxicity=0.25, attributes=update) == updated
    assert oracle_toxics(truth, proxy) == {name: updated}

    assert await client.remove_toxic(proxy, name) is True
    assert oracle_toxics(truth, proxy) == {}
    assert await client.remove_toxic(proxy, name) is False  # already gone
    assert await client.remove_toxic(names("absent"), name) is False


async def test_a_latency_toxic_delays_traffic_until_removed(client: ToxiproxyClient, names: Names) -> None:
    async with echo_server() as upstream:
        proxy, _ = await client.ensure_proxy(names("p"), "127.0.0.1:0", upstream)
        latency = ToxicState(
            name="slow", type="latency", stream="downstream", toxicity=1.0, attributes={"latency": 300}
        )
        await client.add_toxic(proxy.name, latency)
        assert await round_trip_s(proxy.listen) >= 0.3
        await client.remove_toxic(proxy.name, "slow")
        assert await round_trip_s(proxy.listen) < 0.2


async def test_toxiproxys_refusal_comes_back_with_its_message_unretried(
    toxiproxy: ToxiproxyServer, truth: Toxiproxy, names: Names
) -> None:
    bad = ToxicState(name="bad", type="latency", stream="downstream", toxicity=1.0, attributes={"latency": "slow"})  # type: ignore[dict-item]
    async with recording_proxy(toxiproxy.url) as recorder, ToxiproxyClient(recorder.url, retries=2) as client:
        await client.create_proxy(name=names("p"), listen="127.0.0.1:0", upstream="127.0.0.1:9")
        with pytest.raises(FaultInjectionFailed) as failed:
            await client.add_toxic(names("p"), bad)
    assert (failed.value.status, failed.value.proxy, failed.value.toxic) == (400, names("p"), "bad")
    assert "cannot unmarshal string" in str(failed.value)
    assert f"{recorder.url}/proxies/{names('p')}/toxics" in str(failed.value)
    assert recorder.seen.count(("POST", f"/proxies/{names('p')}/toxics")) == 1
    assert oracle_toxics(truth, names("p")) == {}


async def test_no_call_resets_the_server_or_touches_other_proxies(
    toxiproxy: ToxiproxyServer, truth: Toxiproxy, names: Names
) -> None:
    theirs = truth.create(upstream="127.0.0.1:9", name=names("theirs"), listen="127.0.0.1:0")
    theirs.add_toxic(type="latency", name="their-latency", attributes={"latency": 5})
    before = (truth.get_proxy(names("theirs")).listen, oracle_toxics(truth, names("theirs")))
    public = {n for n, f in inspect.getmembers(ToxiproxyClient) if inspect.iscoroutinefunction(f) and n[0] != "_"}
    called: set[str] = set()
    toxic = ToxicState(name="mine", type="bandwidth", stream="upstream", toxicity=1.0, attributes={"rate": 10})
    async with recording_proxy(toxiproxy.url) as recorder, ToxiproxyClient(recorder.url) as client:

        async def call(method: str, *args: object, **kwargs: object) -> object:
            called.add(method)
            try:
                return await getattr(client, method)(*args, **kwargs)
            except FaultInjectionFailed:
                return None

        p = names("mine")
        await call("version")
        await call("proxies")
        await call("create_proxy", name=p, listen="127.0.0.1:0", upstream="127.0.0.1:9")
        await call("create_proxy", name=names("theirs"), listen="127.0.0.1:0", upstream="127.0.0.1:9")
        await call("ensure_proxy", names("theirs"), "127.0.0.1:0", "127.0.0.1:10")
        await call("populate", [ProxySpec(name=names("theirs"), listen="127.0.0.1:0", upstream="127.0.0.1:10")])
        await call("populate", [ProxySpec(name=names("more"), listen="127.0.0.1:0", upstream="127.0.0.1:9")])
        await call("get_proxy", p)
        await call("update_proxy", p, enabled=False)
        await call("add_toxic", p, toxic)
        await call("add_toxic", p, toxic)
        await call("toxics", p)
        await call("update_toxic", p, "mine", toxicity=0.5)
        await call("remove_toxic", p, "mine")
        await call("remove_toxic", names("theirs"), "not-there")
        await call("delete_proxy", p)
        await call("delete_proxy", names("more"))
    assert called == public, "a public method is not exercised here"
    assert recorder.seen, "nothing was recorded"
    assert all("reset" not in path for _, path in recorder.seen)
    assert (truth.get_proxy(names("theirs")).listen, oracle_toxics(truth, names("theirs"))) == before


async def test_an_unreachable_server_fails_fast_naming_it() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    start = time.monotonic()
    async with ToxiproxyClient(url, timeout_s=1.0, retries=2) as client:
        with pytest.raises(FaultInjectionFailed) as failed:
            await client.remove_toxic("api", "cliffwatch-r1-p0-0-latency")
    elapsed = time.monotonic() - start
    assert elapsed < 1.0 * 3 + 0.5, elapsed
    assert (failed.value.proxy, failed.value.toxic, failed.value.status) == ("api", "cliffwatch-r1-p0-0-latency", None)
    assert url in str(failed.value)
    assert "after 3 attempts" in str(failed.value)


async def test_a_hanging_server_fails_within_the_timeout_of_every_attempt() -> None:
    async with hanging_server() as hanging, ToxiproxyClient(hanging.url, timeout_s=0.3, retries=2) as client:
        start = time.monotonic()
        with pytest.raises(FaultInjectionFailed) as failed:
            await client.remove_toxic("api", "slow")
        elapsed = time.monotonic() - start
    assert 0.3 * 3 <= elapsed < 0.3 * 3 + 0.3 + 0.5, elapsed  # three attempts and 0.1 + 0.2 s of backoff
    assert hanging.connections == 3
    assert "no answer within 0.3s" in str(failed.value)
    assert hanging.url in str(failed.value)


async def test_server_errors_are_retried_until_an_answer() -> None:
    async with scripted_server(500, 500, 200) as server, ToxiproxyClient(server.url, retries=2) as client:
        assert await client.version() == "2.12.0"
    assert server.seen == ["GET /version"] * 3


async def test_server_errors_past_the_retries_fail_with_the_status() -> None:
    async with scripted_server(503) as server, ToxiproxyClient(server.url, retries=1) as client:
        with pytest.raises(FaultInjectionFailed) as failed:
            await client.delete_proxy("api")
    assert (failed.value.status, len(server.seen)) == (503, 2)
    assert "scripted failure 503" in str(failed.value)


async def test_a_managed_server_is_private_and_gone_after_exit(toxiproxy: ToxiproxyServer) -> None:
    async with ManagedToxiproxy() as server, ToxiproxyClient(server.url) as client:
        pid = server.pid
        assert pid is not None
        assert alive(pid)
        assert server.port not in (8474, toxiproxy.port)
        assert await client.version() == "2.12.0"
        assert await client.proxies() == {}  # the start-up marker proxy is gone
    assert not alive(pid)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(server.host, server.port)


async def test_a_managed_server_never_takes_another_servers_port_for_its_own(
    toxiproxy: ToxiproxyServer, truth: Toxiproxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = iter([toxiproxy.port])  # the first "free" port is taken by the session's server
    real = toxiproxy_server._free_port
    monkeypatch.setattr(toxiproxy_server, "_free_port", lambda host: next(ports, None) or real(host))
    async with ManagedToxiproxy() as server:
        assert server.port != toxiproxy.port
    assert not [name for name in truth.proxies() if name.startswith("cliffwatch-managed")]


async def test_a_server_that_never_answers_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    server = ManagedToxiproxy(stubborn_binary(tmp_path), start_timeout_s=0.5, stop_timeout_s=0.3)
    start = time.monotonic()
    with pytest.raises(FaultInjectionFailed, match=r"did not answer within 0\.5s"):
        await server.__aenter__()
    assert time.monotonic() - start < 0.5 + 0.3 + 1.0
    assert not alive(int(server.output[0]))  # it ignored SIGTERM: SIGKILL ended it


def test_without_a_binary_the_error_says_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(FaultInjectionFailed, match="run `make toxiproxy`"):
        asyncio.run(ManagedToxiproxy(tmp_path / "missing").__aenter__())


def test_the_binary_on_path_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stub = stubborn_binary(tmp_path)
    (tmp_path / "toxiproxy-server").symlink_to(stub)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert find_toxiproxy_server() == tmp_path / "toxiproxy-server"
    assert find_toxiproxy_server(stub) == stub
    assert find_toxiproxy_server(tmp_path / "missing") is None  # a wrong explicit path is not replaced


PARENT = """
import asyncio
from cliffwatch.adapters.faults.toxiproxy_server import ManagedToxiproxy

async def main():
    async with ManagedToxiproxy() as server:
        print(server.pid, server.port, flush=True)
        await asyncio.sleep(60)

asyncio.run(main())
"""


def port_accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
async def test_a_managed_server_dies_with_its_parent_even_on_sigkill() -> None:
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PARENT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        assert parent.stdout is not None
        assert parent.stderr is not None
        line = await asyncio.wait_for(parent.stdout.readline(), 20.0)
        if not line:  # the parent failed: show why rather than a bare unpacking error
            pytest.fail((await parent.stderr.read()).decode(errors="replace"))
        pid, port = map(int, line.split())
        assert alive(pid)
        parent.send_signal(signal.SIGKILL)  # no finally, no __aexit__: only the kernel can stop the child
        await parent.wait()
        await wait_until(lambda: not alive(pid), within_s=5.0)
        # The leader thread turns zombie before its sibling threads finish dying and release the socket.
        await wait_until(lambda: not port_accepts(port), within_s=5.0)
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()
