"""Faults through a real Toxiproxy, end to end: each toxic felt by the load, and never left behind.

Every run goes through ``prepare_run`` and ``RunService.execute`` exactly as the CLI does, against the
session's private toxiproxy-server. toxiproxy-python, an independent client, is the oracle for what the
server holds while a phase runs and after the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from toxiproxy import Toxiproxy

from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.config import Settings
from cliffwatch.domain.errors import FaultInjectionFailed
from cliffwatch.domain.outcomes import Outcome
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from cliffwatch.services.memory import CollectingObserver

pytestmark = pytest.mark.slow

FAST_TARGET = {"max_batch": 16, "decode_base_ms": 2, "decode_per_seq_ms": 0.2, "prefill_base_ms": 1}


def settings(toxiproxy_url: str, state_dir: Path, **overrides: Any) -> Settings:
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    return Settings(allowlist=allowlist, state_dir=state_dir, toxiproxy_url=toxiproxy_url, **overrides)


def scenario(
    fault: dict[str, Any] | None,
    *,
    proxy: str,
    target: str = "builtin",
    api: str = "openai-chat",
    request: dict[str, Any] | None = None,
    client: dict[str, Any] | None = None,
    slo: dict[str, Any] | None = None,
    abort: dict[str, Any] | None = None,
    stress_s: float = 1.5,
    rate: float = 5,
) -> Scenario:
    """Baseline 1 s, a faulted stress phase, recovery 1 s; the load routed through ``proxy``."""
    faulted: dict[str, Any] = {
        "name": "faulted", "role": "stress", "duration_s": stress_s, "arrival": {"process": "constant", "rate": rate},
    }  # fmt: skip
    if fault is not None:
        faulted["faults"] = [{"proxy": proxy, **fault}]
    document: dict[str, Any] = {
        "name": "fault-it",
        "seed": 1,
        "target": {
            "url": target,
            "api": api,
            "via_proxy": proxy,
            "request": request or {"model": "sim-llm", "prompt_tokens": 8, "max_tokens": 16},
        },
        "proxies": [{"name": proxy}],
        "slo": slo or {"e2e_ms": 2000, "timeout_ms": 4000},
        "client": client or {"attempt_timeout_ms": 4000},
        "phases": [
            {"name": "before", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": rate}},
            faulted,
            {"name": "after", "role": "recovery", "duration_s": 1, "arrival": {"process": "constant", "rate": rate}},
        ],
    }
    if target == "builtin":
        document["target"]["builtin"] = FAST_TARGET
    if abort is not None:
        document["abort"] = abort
    return parse_scenario(document)


@dataclass(kw_only=True)
class Oracle:
    """Polls the server with toxiproxy-python in a thread and keeps every distinct view of our proxy."""

    host: str
    port: int
    proxy: str
    seen: list[dict[str, tuple[str, str, float, dict[str, int]]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def server(self) -> Toxiproxy:
        server = Toxiproxy()
        server.update_api_consumer(self.host, self.port)
        return server

    def toxics_now(self) -> dict[str, tuple[str, str, float, dict[str, int]]] | None:
        found = self.server().get_proxy(self.proxy)
        if found is None:
            return None
        return {name: (t.type, t.stream, float(t.toxicity), dict(t.attributes)) for name, t in found.toxics().items()}

    def poll(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                view = self.toxics_now()
                if view and (not self.seen or self.seen[-1] != view):
                    self.seen.append(view)
            self._stop.wait(0.05)

    @contextlib.contextmanager
    def watching(self) -> Iterator[Oracle]:
        thread = threading.Thread(target=self.poll, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(timeout=5)


@pytest.fixture
def proxy_name() -> str:
    return f"it-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


async def run(scenario: Scenario, config: Settings) -> tuple[RunResult, str]:
    async with prepare_run(config, scenario, observer=CollectingObserver()) as prepared:
        result = await prepared.service.execute(scenario, run_id=prepared.run_id, target_url=prepared.target_url)
        return result, prepared.run_id


def phase(result: RunResult, index: int) -> Any:
    return result.metrics.phases[index]


def p50(result: RunResult, index: int, metric: str) -> float:
    value = phase(result, index).latency[metric].quantile(0.5)
    assert value is not None, f"no {metric} in phase {index}"
    return float(value)


async def test_a_latency_toxic_adds_its_delay_to_time_to_first_token_only_while_its_phase_runs(
    toxiproxy: Any, proxy_name: str, state_dir: Path
) -> None:
    """A 300 ms downstream latency toxic adds its 300 ms to TTFT in its phase; the oracle sees exactly
    the declared toxic while it runs, and nothing of ours remains after the run."""
    fault = {"type": "latency", "stream": "downstream", "attributes": {"latency": 300}}
    oracle = Oracle(host=toxiproxy.host, port=toxiproxy.port, proxy=proxy_name)
    with oracle.watching():
        result, run_id = await run(scenario(fault, proxy=proxy_name), settings(toxiproxy.url, state_dir))
    assert result.status is RunStatus.SUCCEEDED
    assert p50(result, 1, "ttft") >= 300  # the configured delay, at least, on top of the target's own time
    assert p50(result, 1, "ttft") >= p50(result, 0, "ttft") + 280  # less the target's own jitter
    assert p50(result, 2, "ttft") < p50(result, 1, "ttft") - 200  # gone in the recovery phase
    assert oracle.seen == [
        {f"cliffwatch-{run_id}-p1-0-latency": ("latency", "downstream", 1.0, {"latency": 300, "jitter": 0})}
    ]
    assert oracle.toxics_now() is None  # the run's proxy (and any toxic on it) is gone
    on, off = result.fault_events
    assert (on.action, off.action, on.ok, off.ok) == ("on", "off", True, True)
    starts = {t.index: t for t in result.phase_timings}
    assert abs(on.at_ns - starts[1].began_ns) < 200_000_000
    assert abs(off.at_ns - starts[1].ended_ns) < 200_000_000


async def test_a_bandwidth_toxic_slows_large_responses(toxiproxy: Any, proxy_name: str, state_dir: Path) -> None:
    """At 8 KB/s an ~8 KB streamed answer (80 chunks) takes most of a second longer than without the toxic."""
    fault = {"type": "bandwidth", "attributes": {"rate": 8}}
    request = {"model": "sim-llm", "prompt_tokens": 8, "max_tokens": 80}
    chosen = scenario(fault, proxy=proxy_name, request=request, rate=2, slo={"e2e_ms": 5000, "timeout_ms": 9000},
                      client={"attempt_timeout_ms": 9000})  # fmt: skip
    result, _ = await run(chosen, settings(toxiproxy.url, state_dir))
    assert p50(result, 1, "e2e") >= p50(result, 0, "e2e") + 600


async def test_a_timeout_toxic_turns_into_client_timeouts(toxiproxy: Any, proxy_name: str, state_dir: Path) -> None:
    """A timeout toxic that holds all data makes the requests of its phase time out at the client; those
    still held when it is removed (sent in its last 0.8 s) are disconnected by Toxiproxy, so none is on time."""
    fault = {"type": "timeout", "attributes": {"timeout": 0}}
    chosen = scenario(fault, proxy=proxy_name, slo={"e2e_ms": 500, "timeout_ms": 800},
                      client={"attempt_timeout_ms": 800}, stress_s=3)  # fmt: skip
    result, _ = await run(chosen, settings(toxiproxy.url, state_dir))
    baseline, faulted = phase(result, 0), phase(result, 1)
    assert baseline.outcomes[Outcome.ON_TIME] == baseline.offered
    assert faulted.outcomes[Outcome.TIMEOUT] >= round(faulted.offered * (3 - 0.8) / 3) - 1
    assert faulted.outcomes[Outcome.TIMEOUT] + faulted.outcomes[Outcome.ERROR] == faulted.offered


async def test_a_reset_peer_toxic_turns_into_connection_errors(
    toxiproxy: Any, proxy_name: str, state_dir: Path
) -> None:
    """A reset_peer toxic resets connections: the phase's requests end as errors, not timeouts."""
    fault = {"type": "reset_peer", "attributes": {"timeout": 0}}
    result, _ = await run(scenario(fault, proxy=proxy_name), settings(toxiproxy.url, state_dir))
    faulted = phase(result, 1)
    assert faulted.outcomes[Outcome.ERROR] >= faulted.offered - 1
    assert faulted.outcomes[Outcome.TIMEOUT] == 0


async def test_a_limit_data_toxic_cuts_streams_short(toxiproxy: Any, proxy_name: str, state_dir: Path) -> None:
    """A limit_data toxic closes connections after a few hundred bytes: streams end truncated (errors)."""
    fault = {"type": "limit_data", "attributes": {"bytes": 400}}
    result, _ = await run(scenario(fault, proxy=proxy_name), settings(toxiproxy.url, state_dir))
    faulted = phase(result, 1)
    assert faulted.outcomes[Outcome.ERROR] >= faulted.offered - 1
    assert phase(result, 2).outcomes[Outcome.ON_TIME] >= phase(result, 2).offered - 1


async def test_a_slicer_toxic_stretches_a_stream_into_many_delayed_pieces(
    toxiproxy: Any, proxy_name: str, state_dir: Path
) -> None:
    """Slicing the answer into ~64-byte pieces 15 ms apart makes each stream take far longer to arrive."""
    fault = {"type": "slicer", "attributes": {"average_size": 64, "size_variation": 16, "delay": 15_000}}
    result, _ = await run(scenario(fault, proxy=proxy_name, rate=3), settings(toxiproxy.url, state_dir))
    assert p50(result, 1, "e2e") >= p50(result, 0, "e2e") + 300


@contextlib.asynccontextmanager
async def close_delimited_server() -> AsyncIterator[str]:
    """An HTTP server whose answers end when it closes the connection (no length, no chunking)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nhello")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_a_slow_close_toxic_delays_answers_that_end_with_the_connection(
    toxiproxy: Any, proxy_name: str, state_dir: Path
) -> None:
    """For answers delimited by the connection closing, slow_close's 600 ms delay is felt in full (but for
    requests in the phase's last 0.6 s, which the toxic's removal releases early)."""
    fault = {"type": "slow_close", "attributes": {"delay": 600}}
    async with close_delimited_server() as url:
        chosen = scenario(fault, proxy=proxy_name, target=url, api="http", request={"path": "/"}, stress_s=3)
        result, _ = await run(chosen, settings(toxiproxy.url, state_dir))
    assert p50(result, 1, "e2e") >= 600  # the close (which ends the answer) waits the full delay
    assert p50(result, 0, "e2e") < 300


async def test_faults_are_removed_when_an_abort_guard_fires_mid_phase(
    toxiproxy: Any, proxy_name: str, state_dir: Path
) -> None:
    """Errors caused by a reset_peer toxic trip the error-rate guard: the run aborts long before the phase's
    end, the toxic is removed at once, and the reason is recorded."""
    fault = {"type": "reset_peer", "attributes": {"timeout": 0}}
    guard = {"error_rate": {"window_s": 2, "max_ratio": 0.5, "min_requests": 3, "outcomes": ["error"]}}
    oracle = Oracle(host=toxiproxy.host, port=toxiproxy.port, proxy=proxy_name)
    chosen = scenario(fault, proxy=proxy_name, abort=guard, stress_s=20, rate=10)
    with oracle.watching():
        result, _ = await run(chosen, settings(toxiproxy.url, state_dir))
    assert result.status is RunStatus.ABORTED
    assert result.abort_reason is not None
    assert "were error" in result.abort_reason
    assert result.duration_s < 12
    assert len(oracle.seen) == 1
    assert [e.action for e in result.fault_events] == ["on", "off"]
    assert all(e.ok for e in result.fault_events)
    assert oracle.toxics_now() is None


async def test_faults_are_removed_when_the_run_task_is_cancelled(
    toxiproxy: Any, proxy_name: str, state_dir: Path
) -> None:
    """Cancelling the run while a toxic is on removes the toxic and the run's proxy before the
    cancellation finishes propagating."""
    fault = {"type": "latency", "attributes": {"latency": 50}}
    chosen = scenario(fault, proxy=proxy_name, stress_s=30)
    oracle = Oracle(host=toxiproxy.host, port=toxiproxy.port, proxy=proxy_name)
    task = asyncio.create_task(run(chosen, settings(toxiproxy.url, state_dir)))
    for _ in range(200):
        view = await asyncio.to_thread(oracle.toxics_now)
        if view:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the toxic never appeared")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(oracle.toxics_now) is None


async def test_an_unreachable_toxiproxy_fails_before_any_load(state_dir: Path, proxy_name: str) -> None:
    """A Toxiproxy that does not answer is a clear error naming it, raised before the target sees a request."""
    seen: list[str] = []

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append("request")
        writer.close()

    target = await asyncio.start_server(count, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{target.sockets[0].getsockname()[1]}"
    with contextlib.closing(__import__("socket").socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    chosen = scenario(None, proxy=proxy_name, target=url, api="http", request={"path": "/"})
    async with target:
        with pytest.raises(FaultInjectionFailed, match=closed.replace(".", r"\.")):
            await run(chosen, settings(closed, state_dir, toxiproxy_timeout_s=0.5))
    assert seen == []


async def test_removing_a_toxic_while_clients_disconnect_leaves_nothing_behind(
    toxiproxy: Any, proxy_name: str, state_dir: Path
) -> None:
    """Clients dropping their streams at the very moment a latency toxic is removed stall Toxiproxy's
    removal (its issue #558; on 2.12.0 this test hits it most times). The injector still gets the toxic off —
    by recreating the run's proxy at the same address — and the proxy serves again at once."""
    import aiohttp

    from cliffwatch.adapters.faults.fault_ledger import FileFaultLedger
    from cliffwatch.adapters.faults.toxiproxy import ToxiproxyClient
    from cliffwatch.adapters.faults.toxiproxy_faults import ToxiproxyFaultInjector
    from cliffwatch.adapters.runtime.builtin_target import BuiltinTarget
    from cliffwatch.adapters.runtime.clock import MonotonicClock
    from cliffwatch.domain.scenario.target_model import TargetModel

    fault = {"type": "latency", "attributes": {"latency": 1000}}
    chosen = scenario(fault, proxy=proxy_name)
    ledger = FileFaultLedger(state_dir / "faults.jsonl")
    async with BuiltinTarget(TargetModel(**FAST_TARGET)) as target, ToxiproxyClient(toxiproxy.url) as api:
        injector = ToxiproxyFaultInjector(
            api, ledger, run_id="stall", scenario=chosen, clock=MonotonicClock(), managed=False
        )
        load_url = await injector.set_up(target)
        await injector.apply(1, chosen.phases[1].faults)
        body = {"model": "sim-llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200, "stream": True}
        async with aiohttp.ClientSession() as session:

            async def stream() -> None:
                async with session.post(f"{load_url}/v1/chat/completions", json=body) as response:
                    async for _ in response.content.iter_any():
                        pass

            streams = [asyncio.create_task(stream()) for _ in range(5)]
            await asyncio.sleep(1.5)  # data is now held inside the toxic
            for task in streams:
                task.cancel()
            await asyncio.sleep(0)
            [event] = await injector.remove(1)
            await asyncio.gather(*streams, return_exceptions=True)
            assert event.ok, event.detail
            async with session.post(f"{load_url}/v1/chat/completions", json={**body, "stream": False}) as response:
                assert response.status == 200
        state = await api.get_proxy(proxy_name)
        assert state is not None
        assert state.toxics == ()
        await injector.tear_down()
    assert await ledger.outstanding() == []
