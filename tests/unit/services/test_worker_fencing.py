"""The worker through a database outage: it fences a run whose lease it cannot renew before the lease
expires, loses no outcome in an outage shorter than the lease, records its end when the database is back,
and stops a run that would overflow its outcome buffer, saying why."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from outage_kit import OutageStore
from worker_kit import Prepared, WorkerRig, answered, now, working

from cliffwatch.adapters.network.target_policies import AllowlistPolicy
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.errors import EmergencyStopNotRecorded, StoreUnavailable
from cliffwatch.domain.outcomes import Outcome, RequestRecord
from cliffwatch.domain.ports import RecordSink
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from cliffwatch.domain.service.caps import Caps
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.services.catalog import ScenarioCatalog
from cliffwatch.services.memory import CollectingObserver, RecordingFaultInjector, ScriptedGenerator
from cliffwatch.services.memory_store import InMemoryStore
from cliffwatch.services.runner import RunService
from cliffwatch.services.runs import RunsService
from cliffwatch.services.worker import RunWorker, WorkerSettings

LEASE_S = 1.5


def scenario(duration_s: float, rate: float, *, faulty: bool = False) -> dict[str, Any]:
    phase: dict[str, Any] = {"name": "steady", "role": "baseline", "duration_s": duration_s,
                             "arrival": {"process": "constant", "rate": rate}}  # fmt: skip
    document: dict[str, Any] = {
        "name": "fencing",
        "seed": 4,
        "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 4}},
        "slo": {"e2e_ms": 500, "timeout_ms": 1000},
        "phases": [phase],
    }
    if faulty:
        document["proxies"] = [{"name": "p", "listen": "127.0.0.1:0"}]
        phase["faults"] = [{"proxy": "p", "type": "latency", "attributes": {"latency": 10}}]
    return document


@dataclass
class Rig(WorkerRig):
    outage: OutageStore
    sent_at: list[float] = field(default_factory=list)  # monotonic time of every request the target got
    faults: list[RecordingFaultInjector] = field(default_factory=list)


def rig(*, lease_s: float = LEASE_S, outcome_buffer: int = 100_000) -> Rig:
    memory = InMemoryStore()
    outage = OutageStore(memory)
    holder: dict[str, Rig] = {}

    @asynccontextmanager
    async def prepare(scenario: Scenario, run_id: str, sink: RecordSink) -> AsyncIterator[Prepared]:
        clock = MonotonicClock()

        def respond(request: PlannedRequest) -> tuple[float, RequestRecord]:
            holder["rig"].sent_at.append(time.monotonic())
            return 0.05, answered(request, scenario)

        faults = RecordingFaultInjector(clock)
        holder["rig"].faults.append(faults)
        service = RunService(clock=clock, generator=ScriptedGenerator(clock, respond), faults=faults, sink=sink,
                             observer=CollectingObserver())  # fmt: skip
        yield Prepared(service=service, target_url="http://127.0.0.1:9", run_id=run_id)

    worker = RunWorker(runs=outage, scenarios=memory, prepare=prepare, now=now,  # type: ignore[arg-type]
                    settings=WorkerSettings(owner="w1", max_concurrent_runs=1, lease_s=lease_s,
                                            outcome_buffer=outcome_buffer))  # fmt: skip
    made = Rig(store=memory, worker=worker, outage=outage)
    holder["rig"] = made
    return made


@pytest.mark.parametrize("failing", [["*"], ["renew_lease"]], ids=["database down", "renewals refused"])
async def test_a_worker_that_cannot_renew_its_lease_stops_the_load_before_the_lease_expires(failing: list[str]) -> None:
    """With the database down (or only renewals failing, as under a lock that other writes outwait), nothing
    is sent later than the lease's expiry, the faults come off, and once the database is back the run is
    recorded interrupted, fenced, with every outcome stored."""
    made = rig()
    await made.queue_run(scenario(30, 20, faulty=True), run_id="r1")
    async with working(made):
        await made.wait_for("r1", RunStatus.RUNNING)
        await asyncio.sleep(0.5)
        made.outage.down(failing)
        went_down = time.monotonic()  # every renewal before this: the lease ends by went_down + LEASE_S
        await asyncio.sleep(LEASE_S + 1.5)
        assert made.sent_at, "the run sent nothing before the outage"
        assert max(made.sent_at) <= went_down + LEASE_S, "requests were sent after the lease expired"
        assert made.faults[0].active == {}, "the fault is still on after fencing"
        made.outage.up()
        run = await made.wait_for("r1", RunStatus.INTERRUPTED, RunStatus.SUCCEEDED, RunStatus.FAILED, within_s=10)
    assert run.status is RunStatus.INTERRUPTED
    assert run.reason is not None
    assert run.reason.startswith("fenced: the lease could not be renewed")
    assert run.result is not None
    offered = sum(p["offered"] for p in run.result["phases"])
    stored = await made.store.list_outcomes("r1", after=None, limit=10_000)
    assert len(stored) == offered
    # the requests cut in flight by the fence are recorded too (this generator records them as not sent)
    assert sum(1 for o in stored if o.outcome != Outcome.NOT_SENT.value) <= len(made.sent_at)


async def test_an_outage_shorter_than_the_lease_loses_no_outcome() -> None:
    """Outcome writes and renewals fail for a third of the lease, the most a lease renewed every third of it
    always outlasts (less the fence's margin): the run goes on and ends succeeded, with every outcome stored."""
    made = rig(lease_s=3.0)
    await made.queue_run(scenario(3, 20), run_id="r1")
    async with working(made):
        await made.wait_for("r1", RunStatus.RUNNING)
        await asyncio.sleep(0.7)
        made.outage.down(["add_outcomes", "renew_lease", "get_run"])
        await asyncio.sleep(1.0)
        made.outage.up()
        run = await made.wait_for("r1", RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.INTERRUPTED, within_s=10)
    assert run.status is RunStatus.SUCCEEDED, run.reason
    assert made.outage.refused.get("add_outcomes", 0) >= 1, "the outage missed every outcome write"
    assert run.result is not None
    offered = sum(p["offered"] for p in run.result["phases"])
    assert len(await made.store.list_outcomes("r1", after=None, limit=10_000)) == offered == 60


async def test_a_database_down_at_the_end_delays_the_end_until_it_is_back() -> None:
    """The run ends while the database is down: its end and outcomes are recorded once it answers again."""
    made = rig(lease_s=3.0)
    await made.queue_run(scenario(1, 20), run_id="r1")
    async with working(made):
        await made.wait_for("r1", RunStatus.RUNNING)
        made.outage.down(["add_outcomes", "finish_run"])
        await asyncio.sleep(1.6)
        assert (await made.store.get_run("r1")).status is RunStatus.RUNNING  # type: ignore[union-attr]
        made.outage.up()
        run = await made.wait_for("r1", RunStatus.SUCCEEDED, RunStatus.FAILED, within_s=10)
    assert run.status is RunStatus.SUCCEEDED, run.reason
    assert len(await made.store.list_outcomes("r1", after=None, limit=10_000)) == 20


async def test_a_run_whose_outcomes_would_overflow_the_buffer_is_stopped_saying_why() -> None:
    """With outcome writes failing and room for 10, the run is aborted; its end says the buffer was full and
    how many outcomes could not be stored."""
    made = rig(lease_s=30.0, outcome_buffer=10)
    await made.queue_run(scenario(30, 20), run_id="r1")
    async with working(made):
        await made.wait_for("r1", RunStatus.RUNNING)
        made.outage.down(["add_outcomes"])
        await asyncio.sleep(1.5)
        sent = len(made.sent_at)
        await asyncio.sleep(0.5)
        assert len(made.sent_at) == sent, "the run kept sending with its outcome buffer full"
        made.outage.up()
        run = await made.wait_for("r1", RunStatus.ABORTED, RunStatus.SUCCEEDED, within_s=10)
    assert run.status is RunStatus.ABORTED
    assert run.reason is not None
    assert "outcome buffer" in run.reason
    assert "could not be stored" in run.reason


async def test_a_run_stopped_before_its_load_began_sends_nothing() -> None:
    """An abort through this instance while the run is being prepared ends it aborted with nothing sent."""
    made = rig()
    gate = asyncio.Event()
    original = made.worker.prepare

    @asynccontextmanager
    async def slow_prepare(scenario: Scenario, run_id: str, sink: RecordSink) -> AsyncIterator[Any]:
        await gate.wait()
        async with original(scenario, run_id, sink) as prepared:
            yield prepared

    made.worker.prepare = slow_prepare
    await made.queue_run(scenario(5, 20), run_id="r1")
    async with working(made):
        await made.wait_for("r1", RunStatus.RUNNING)
        assert made.worker.abort_local("r1", "stop it") is not None
        gate.set()
        run = await made.wait_for("r1", RunStatus.ABORTED, RunStatus.SUCCEEDED, within_s=5)
    assert run.status is RunStatus.ABORTED
    assert run.reason == "stop it"
    assert made.sent_at == []


def runs_service(made: Rig) -> RunsService:
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    return RunsService(runs=made.outage, control=made.outage, catalog=ScenarioCatalog(made.outage, now=now),  # type: ignore[arg-type]
                       policy=AllowlistPolicy(allowlist, listen=allowlist),
                       caps=Caps(),
                       now=now, local=made.worker)  # fmt: skip


async def test_an_abort_reaches_a_run_of_this_instance_while_its_database_is_down() -> None:
    """With every store call failing, aborting through the instance that runs the run stops its load at once."""
    made = rig(lease_s=30.0)
    service = runs_service(made)
    await made.queue_run(scenario(30, 20), run_id="r1")
    async with working(made):
        await made.wait_for("r1", RunStatus.RUNNING)
        await asyncio.sleep(0.3)
        made.outage.down()
        aborted = await service.abort("r1", "operator: stop now")
        stopped_at = time.monotonic()
        assert aborted.id == "r1"
        assert aborted.abort_requested == "operator: stop now"
        await asyncio.sleep(0.5)
        assert max(made.sent_at) <= stopped_at
        with pytest.raises(StoreUnavailable):
            await service.abort("elsewhere", "not a run of this instance")
        made.outage.up()
        run = await made.wait_for("r1", RunStatus.ABORTED, RunStatus.SUCCEEDED, within_s=10)
    assert run.status is RunStatus.ABORTED
    assert run.reason == "operator: stop now"


async def test_the_emergency_stop_stops_this_instance_while_its_database_is_down() -> None:
    """stop-all with the database down stops the runs here at once, says it could not be recorded, and this
    instance claims nothing more until the stop is recorded."""
    made = rig(lease_s=30.0)
    service = runs_service(made)
    await made.queue_run(scenario(30, 20), run_id="r1")
    async with working(made):
        await made.wait_for("r1", RunStatus.RUNNING)
        await asyncio.sleep(0.3)
        made.outage.down()
        with pytest.raises(EmergencyStopNotRecorded) as refused:
            await service.stop_all("pager")
        stopped_at = time.monotonic()
        assert refused.value.stopped_here == ("r1",)
        made.outage.up()
        run = await made.wait_for("r1", RunStatus.ABORTED, RunStatus.SUCCEEDED, within_s=10)
        assert run.reason == "emergency stop: pager"
        assert made.sent_at
        assert max(made.sent_at) <= stopped_at
        await made.queue_run(scenario(1, 5), run_id="r2")
        await asyncio.sleep(1.2)  # two claim polls
        assert (await made.store.get_run("r2")).status is RunStatus.QUEUED  # type: ignore[union-attr]
        # recorded now: the database's stop holds every instance from here, and the queued run is aborted
        assert [run.id for run in await service.stop_all("pager")] == ["r2"]
        assert await made.store.emergency_stop() == "pager"
        assert (await made.store.get_run("r2")).status is RunStatus.ABORTED  # type: ignore[union-attr]
