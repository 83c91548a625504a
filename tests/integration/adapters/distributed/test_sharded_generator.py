"""The generator in worker processes (``client.workers``) against a loopback server: the shares make the plan,
a dead worker loses only its share and says so, a stop reaches every worker, no worker outlives its coordinator.

Each test starts real worker processes (about a second each to import), so they are marked slow.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest
from aiohttp import web
from loadgen_testkit import CHAT_NONSTREAM, Serve, scenario_for

from cliffwatch.adapters.distributed import pool as pool_module
from cliffwatch.adapters.distributed.coordinator import ShardedGenerator
from cliffwatch.adapters.distributed.pool import GeneratorWorker, WorkerPool, agree_clock, spawn_worker
from cliffwatch.adapters.distributed.setup import worker_pool
from cliffwatch.adapters.distributed.spec import WorkerSpec
from cliffwatch.adapters.distributed.wire import plan_row, receive
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.errors import WorkersFailed
from cliffwatch.domain.outcomes import NS_PER_MS, NS_PER_S, Outcome, RequestRecord
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.security.allowlist import parse_allowlist
from cliffwatch.domain.traffic.plan import PlannedRequest, iter_plan

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # the generator must keep its schedule


class Records:
    def __init__(self) -> None:
        self.dispatched: list[int] = []
        self.records: list[RequestRecord] = []

    def dispatched_(self, request: PlannedRequest, at_ns: int) -> None:
        self.dispatched.append(request.id)

    def finished(self, record: RequestRecord) -> None:
        self.records.append(record)

    def once_each(self) -> dict[int, RequestRecord]:
        ids = [r.id for r in self.records]
        assert len(ids) == len(set(ids)), "a request was recorded twice"
        return {r.id: r for r in self.records}


class Listener:
    def __init__(self, records: Records) -> None:
        self.dispatched = records.dispatched_
        self.finished = records.finished


def load(url: str, *, rate: float, duration_s: float, workers: int) -> Scenario:
    scenario = scenario_for(url, api="http", request={"method": "GET", "path": "/load"},
                            phases=[{"name": "only", "role": "baseline", "duration_s": duration_s,
                                     "arrival": {"process": "constant", "rate": rate}}])  # fmt: skip
    return replace(scenario, client=replace(scenario.client, workers=workers))


async def answer(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@asynccontextmanager
async def started_pool(scenario: Scenario, url: str) -> AsyncIterator[WorkerPool]:
    async with HttpExecutor(scenario, url) as executor:
        made = worker_pool(scenario, executor, load_url=url, destinations=executor.destinations, cap=None,
                           count=scenario.client.workers or 1)  # fmt: skip
        async with made as pool:
            await pool.preflight()
            yield pool


@asynccontextmanager
async def coordinator(scenario: Scenario, url: str) -> AsyncIterator[ShardedGenerator]:
    async with started_pool(scenario, url) as pool:
        yield ShardedGenerator(pool, scenario, MonotonicClock())


def start_soon() -> int:
    return time.perf_counter_ns() + NS_PER_S // 10


async def test_the_shares_of_two_workers_are_the_plan_exactly(serve: Serve) -> None:
    served = await serve(answer)
    scenario = load(served.url, rate=200, duration_s=1.0, workers=2)
    records = Records()
    async with coordinator(scenario, served.url) as generator:
        report = await generator.run(iter_plan(scenario), start_ns=start_soon(), listener=Listener(records))
    plan = [r.id for r in iter_plan(scenario)]
    by_id = records.once_each()
    assert sorted(by_id) == plan
    assert all(r.outcome is Outcome.ON_TIME for r in by_id.values())
    assert len([s for s in served.requests if s.path == "/load"]) == len(plan)
    assert sorted(records.dispatched) == plan
    assert [w.planned for w in report.workers] == [100, 100]
    assert sum(w.finished for w in report.workers) == len(plan)
    assert [w.failure for w in report.workers] == [None, None]
    assert len({w.pid for w in report.workers}) == 2
    assert os.getpid() not in {w.pid for w in report.workers}
    assert report.lag["count"] == len(plan)
    assert report.coordinator_cpu_busy is not None
    assert 0 < report.coordinator_cpu_busy < 1


async def test_a_worker_that_dies_loses_only_its_share_and_the_run_says_so(serve: Serve) -> None:
    served = await serve(answer)
    scenario = load(served.url, rate=100, duration_s=2.0, workers=2)
    records = Records()
    async with coordinator(scenario, served.url) as generator:
        running = asyncio.create_task(
            generator.run(iter_plan(scenario), start_ns=start_soon(), listener=Listener(records))
        )
        await served.until_received(40, within_s=10)
        os.kill(generator.worker_pids[1], signal.SIGKILL)
        report = await running
    by_id = records.once_each()
    assert sorted(by_id) == [r.id for r in iter_plan(scenario)]
    lost = [r for r in by_id.values() if r.outcome is Outcome.NOT_SENT]
    assert lost
    assert all("generator worker 2 of 2 died (exit code -9)" in (r.not_sent_reason or "") for r in lost)
    assert all(r.id % 2 == 1 for r in lost), "only the dead worker's share is lost"
    assert sum(r.outcome is Outcome.ON_TIME for r in by_id.values()) >= 100 + 15  # the other share, and what 2 sent
    assert report.limited
    assert any("generator worker 2 of 2 died" in reason for reason in report.reasons)
    assert report.workers[1].failure == "died (exit code -9)"
    assert report.workers[1].lost == len(lost)
    assert report.workers[0].failure is None
    assert report.workers[0].finished == 100


async def test_one_pool_sends_run_after_run_and_a_worker_lost_in_one_is_lost_to_the_next(serve: Serve) -> None:
    """A sweep's steps reuse one pool: each run is dealt afresh, with fresh prompts when asked; a worker that
    died in one run is reported lost, with its whole share, in every later one."""
    bodies: list[str] = []

    async def keep(request: web.Request) -> web.Response:
        bodies.append(await request.text())
        return web.Response(body=CHAT_NONSTREAM, content_type="application/json")

    served = await serve(keep)
    scenario = scenario_for(
        served.url,
        api="openai-chat",
        request={"stream": False},
        phases=[
            {"name": "only", "role": "baseline", "duration_s": 1.0, "arrival": {"process": "constant", "rate": 40}}
        ],
    )
    scenario = replace(scenario, client=replace(scenario.client, workers=2))
    async with started_pool(scenario, served.url) as pool:
        first, second = Records(), Records()
        report = await ShardedGenerator(pool, scenario, MonotonicClock()).run(
            iter_plan(scenario), start_ns=start_soon(), listener=Listener(first)
        )
        sent_first = len(bodies)
        await ShardedGenerator(pool, scenario, MonotonicClock(), next_prompts=True).run(
            iter_plan(scenario), start_ns=start_soon(), listener=Listener(second)
        )
        assert len(first.once_each()) == len(second.once_each()) == 40
        assert {r.outcome for r in [*first.records, *second.records]} == {Outcome.ON_TIME}
        assert {w.failure for w in report.workers} == {None}
        assert not set(bodies[:sent_first]) & set(bodies[sent_first:]), "the second run sent fresh prompts"
        os.kill(pool.pids[0], signal.SIGKILL)
        await asyncio.sleep(0.2)
        third = Records()
        report = await ShardedGenerator(pool, scenario, MonotonicClock()).run(
            iter_plan(scenario), start_ns=start_soon(), listener=Listener(third)
        )
    records = third.once_each()
    assert len(records) == 40
    assert {r.outcome for r in records.values() if r.id % 2} == {Outcome.ON_TIME}
    assert {r.id for r in records.values() if r.outcome is Outcome.NOT_SENT} == {i for i in range(40) if i % 2 == 0}
    assert report.workers[0].failure == "died (exit code -9)"
    assert report.workers[0].lost == 20
    assert report.limited


async def test_a_stop_reaches_every_worker_and_nothing_more_is_sent(serve: Serve) -> None:
    served = await serve(answer)
    scenario = load(served.url, rate=100, duration_s=3.0, workers=2)
    records = Records()
    async with coordinator(scenario, served.url) as generator:
        running = asyncio.create_task(
            generator.run(iter_plan(scenario), start_ns=start_soon(), listener=Listener(records))
        )
        await served.until_received(50, within_s=10)
        generator.stop("aborted: test")
        report = await running
        seen = len(served.requests)
        await asyncio.sleep(0.3)
        assert len(served.requests) == seen
    by_id = records.once_each()
    assert sorted(by_id) == [r.id for r in iter_plan(scenario)]
    not_sent = [r for r in by_id.values() if r.outcome is Outcome.NOT_SENT]
    assert len(not_sent) >= 200  # two of the three seconds
    assert {r.not_sent_reason for r in not_sent} == {"aborted: test"}
    assert len([s for s in served.requests if s.path == "/load"]) == 300 - len(not_sent)
    assert [w.failure for w in report.workers] == [None, None]


async def test_a_worker_that_hears_no_beat_fences_itself(serve: Serve) -> None:
    served = await serve(answer)
    scenario = load(served.url, rate=50, duration_s=30.0, workers=1)
    allowlist, _ = parse_allowlist(["127.0.0.0/8"])
    assert allowlist is not None
    destinations = Destinations(allowlist)
    await destinations.admit(served.url)
    spec = WorkerSpec(index=0, count=1, scenario=scenario, base_url=served.url, allowlist=destinations.allowlist,
                      pins=destinations.pins(), cap=None, beat_timeout_s=1.0)  # fmt: skip
    worker = await spawn_worker(spec)
    try:
        assert (await asyncio.wait_for(receive(worker.reader), 60))[0] == "ready"
        worker.send(("go", start_soon(), scenario, False))
        worker.send(("plan", [plan_row(r) for r in iter_plan(scenario)]))
        await served.until_received(10, within_s=10)
        # no beat ever comes: within the timeout (and a probe's period) the worker stops and exits
        assert await worker.process.ended(10) == "exit code 0"
        seen = len(served.requests)
        await asyncio.sleep(0.3)
        assert len(served.requests) == seen < 50 * 5
    finally:
        worker.writer.close()
        if not worker.process.gone():
            await worker.process.kill()


COORDINATOR = textwrap.dedent(
    """
    import asyncio, sys, time
    from dataclasses import replace
    from cliffwatch.adapters.runtime.clock import MonotonicClock
    from cliffwatch.adapters.loadgen.http_client import HttpExecutor
    from cliffwatch.adapters.distributed.coordinator import ShardedGenerator
    from cliffwatch.adapters.distributed.setup import worker_pool
    from cliffwatch.domain.traffic.plan import iter_plan
    from cliffwatch.domain.scenario.scenario import parse_scenario

    url = sys.argv[1]
    scenario = parse_scenario({"name": "fence", "seed": 1, "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
        "target": {"url": url, "api": "http", "request": {"method": "GET", "path": "/load"}},
        "client": {"workers": 2},
        "phases": [{"name": "only", "role": "baseline", "duration_s": 60,
                    "arrival": {"process": "constant", "rate": 50}}]})

    class Quiet:
        def dispatched(self, request, at_ns): pass
        def finished(self, record): pass

    async def main():
        async with HttpExecutor(scenario, url) as executor:
            async with worker_pool(scenario, executor, load_url=url, destinations=executor.destinations,
                                   cap=None, count=2) as pool:
                generator = ShardedGenerator(pool, scenario, MonotonicClock())
                await generator.preflight()
                print(" ".join(map(str, generator.worker_pids)), flush=True)
                await generator.run(iter_plan(scenario), start_ns=time.perf_counter_ns(), listener=Quiet())

    asyncio.run(main())
    """
)


async def test_no_worker_outlives_a_coordinator_killed_outright(serve: Serve) -> None:
    served = await serve(answer)
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", COORDINATOR, served.url,
                                                   stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2
        await served.until_received(20, within_s=10)
        process.kill()
        await process.wait()
        await _until_gone(pids, within_s=10)
        seen = len(served.requests)
        await asyncio.sleep(0.5)
        assert len(served.requests) == seen
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _until_gone(pids: list[int], *, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            pytest.fail(f"worker processes {[p for p in pids if _alive(p)]} outlived their coordinator")
        await asyncio.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (dead, not yet reaped by init) is gone for our purpose: it sends nothing
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


async def test_a_worker_on_another_clock_is_measured_sent_its_start_and_its_skew_reported(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker under another boot id (as on another machine: here this machine's, told apart by the test) has
    its clock measured by round trips before the run and again after it; the run says how far off it could be."""
    monkeypatch.setattr(pool_module, "this_boot", lambda: "another machine")
    served = await serve(answer)
    scenario = load(served.url, rate=100, duration_s=1.0, workers=2)
    records = Records()
    async with coordinator(scenario, served.url) as generator:
        clocks = [w.clock for w in generator.pool.workers]
        report = await generator.run(iter_plan(scenario), start_ns=start_soon(), listener=Listener(records))
    assert all(not c.same_clock for c in clocks)
    # the same kernel clock, measured: the offset is within its uncertainty of zero, and both are small
    assert all(abs(c.offset_ns) <= c.uncertainty_ns < 5 * NS_PER_MS for c in clocks)
    assert all(abs(c.wall_offset_ns) < 5 * NS_PER_MS for c in clocks)
    assert all(r.outcome is Outcome.ON_TIME for r in records.once_each().values())
    skews = [w.clock_skew_ms for w in report.workers]
    assert all(s is not None and 0 < s < 5 for s in skews), skews
    assert not report.limited, report.reasons


async def test_a_worker_that_does_not_answer_its_clock_check_fails_the_run_before_any_load() -> None:
    mine, theirs = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=mine)

    class Gone:
        def gone(self) -> bool:
            return True

        async def ended(self, timeout_s: float) -> str | None:
            return "exit code 1"

        async def kill(self) -> None:
            return None

    worker = GeneratorWorker(index=2, process=Gone(), reader=reader, writer=writer)
    theirs.close()  # it ends its stream instead of answering
    try:
        with pytest.raises(WorkersFailed, match=r"worker 3 died \(exit code 1\) during its clock check"):
            await agree_clock(worker, MonotonicClock())
    finally:
        writer.close()
