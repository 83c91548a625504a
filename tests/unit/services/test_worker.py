"""The worker over the in-memory store: claim, execute under a lease, stream outcomes, finish, abort, shut down."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from worker_kit import Prepared, WorkerRig, answered, now, working

from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.errors import TargetUnreachable
from cliffwatch.domain.outcomes import Outcome
from cliffwatch.domain.ports import RecordSink
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.service.runs import Run, Trigger
from cliffwatch.services.catalog import ScenarioCatalog
from cliffwatch.services.memory import CollectingObserver, RecordingFaultInjector, ScriptedGenerator
from cliffwatch.services.memory_store import InMemoryStore
from cliffwatch.services.runner import RunService
from cliffwatch.services.worker import RunWorker, WorkerSettings

DOCUMENT: dict[str, Any] = {
    "name": "worker-test",
    "seed": 4,
    "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 4}},
    "slo": {"e2e_ms": 500, "timeout_ms": 1000},
    "phases": [
        {"name": "calm", "role": "baseline", "duration_s": 0.3, "arrival": {"process": "constant", "rate": 20}},
        {"name": "push", "role": "stress", "duration_s": 0.3, "arrival": {"process": "constant", "rate": 40}},
    ],
}


LONG: dict[str, Any] = {
    **DOCUMENT,
    "name": "long",
    "phases": [{"name": "calm", "role": "baseline", "duration_s": 30, "arrival": {"process": "constant", "rate": 5}}],
}


@dataclass
class Rig(WorkerRig):
    prepared: list[str]
    failing: bool = False

    async def queue(self, document: dict[str, Any] | None = None, *, run_id: str) -> Run:
        return await self.queue_run(document or DOCUMENT, run_id=run_id)


def rig(*, max_runs: int = 2, lease_s: float = 30.0, latency_s: float = 0.01) -> Rig:
    store = InMemoryStore()
    prepared: list[str] = []
    holder: dict[str, Rig] = {}

    @asynccontextmanager
    async def prepare(scenario: Scenario, run_id: str, sink: RecordSink) -> AsyncIterator[Prepared]:
        if holder["rig"].failing:
            raise TargetUnreachable("http://127.0.0.1:9", "connection refused")
        prepared.append(run_id)
        clock = MonotonicClock()
        generator = ScriptedGenerator(clock, lambda r: (latency_s, answered(r, scenario)))
        service = RunService(clock=clock, generator=generator, faults=RecordingFaultInjector(clock), sink=sink,
                             observer=CollectingObserver())  # fmt: skip
        yield Prepared(service=service, target_url="http://127.0.0.1:9", run_id=run_id)

    worker = RunWorker(runs=store, scenarios=store, prepare=prepare, now=now,
                    settings=WorkerSettings(owner="w1", max_concurrent_runs=max_runs, lease_s=lease_s))  # fmt: skip
    made = Rig(store=store, worker=worker, prepared=prepared)
    holder["rig"] = made
    return made


async def test_a_queued_run_is_executed_and_its_end_outcomes_and_time_series_are_stored() -> None:
    """Claimed, run, finished: the store holds the score, every outcome, phases and per-second rows."""
    made = rig()
    await made.queue(run_id="r1")
    async with working(made):
        run = await made.wait_for("r1", RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert run.status is RunStatus.SUCCEEDED, run.reason
    assert run.owner == "w1"
    assert run.score is not None
    assert run.score_version == "4"
    assert run.result is not None
    assert "timeseries" not in run.result
    assert [p["name"] for p in run.result["phases"]] == ["calm", "push"]
    planned = sum(p["offered"] for p in run.result["phases"])
    outcomes = await made.store.list_outcomes("r1", after=None, limit=1000)
    assert len(outcomes) == planned
    assert {o.outcome for o in outcomes} == {Outcome.ON_TIME.value}
    assert await made.store.timeseries("r1")


async def test_no_more_runs_execute_at_once_than_the_cap_allows() -> None:
    """With a cap of 2 and three queued runs, the third waits until one ends."""
    made = rig(max_runs=2, latency_s=0.05)
    for index in range(3):
        await made.queue(run_id=f"r{index}")
    async with working(made):
        await made.wait_for("r0", RunStatus.RUNNING, RunStatus.SUCCEEDED)
        await asyncio.sleep(0.1)
        statuses = [(await made.store.get_run(f"r{i}")) for i in range(3)]
        assert sum(1 for r in statuses if r is not None and r.status is RunStatus.RUNNING) <= 2
        for index in range(3):
            await made.wait_for(f"r{index}", RunStatus.SUCCEEDED)


async def test_an_abort_requested_through_the_store_stops_the_running_run_promptly() -> None:
    """A running run whose abort is requested ends as aborted, with the reason, within a couple of seconds."""
    made = rig()
    long_run = LONG
    await made.queue(long_run, run_id="r1")
    async with working(made):
        await made.wait_for("r1", RunStatus.RUNNING)
        await made.store.request_abort("r1", "aborted by ops via the API")
        run = await made.wait_for("r1", RunStatus.ABORTED, within_s=5)
    assert run.reason == "aborted by ops via the API"


async def test_a_run_that_cannot_start_is_recorded_as_failed_with_the_reason() -> None:
    """An unreachable target (raised before any load) ends the run as failed, and the worker goes on."""
    made = rig()
    made.failing = True
    await made.queue(run_id="r1")
    async with working(made):
        run = await made.wait_for("r1", RunStatus.FAILED)
        assert run.reason is not None
        assert "unreachable" in run.reason
        made.failing = False
        await made.queue({**DOCUMENT, "name": "second"}, run_id="r2")
        await made.wait_for("r2", RunStatus.SUCCEEDED)


async def test_shutting_down_interrupts_running_runs_and_records_them() -> None:
    """On shutdown, running runs are stopped and recorded as interrupted within the grace period."""
    made = rig()
    long_run = LONG
    await made.queue(long_run, run_id="r1")
    task = asyncio.create_task(made.worker.run_forever())
    await made.wait_for("r1", RunStatus.RUNNING)
    await made.worker.shutdown(5)
    await asyncio.wait_for(task, 2)
    run = await made.store.get_run("r1")
    assert run is not None
    assert run.status is RunStatus.INTERRUPTED


async def test_a_worker_that_loses_its_lease_stops_the_run() -> None:
    """When the lease cannot be renewed (another instance expired it), the run is stopped here."""
    made = rig(lease_s=0.3)
    long_run = LONG
    await made.queue(long_run, run_id="r1")
    async with working(made):
        await made.wait_for("r1", RunStatus.RUNNING)
        expired = await made.store.expire_leases(datetime(2999, 1, 1, tzinfo=UTC))
        assert [r.id for r in expired] == ["r1"]
        await made.wait_idle()
        assert made.worker.active == 0
    run = await made.store.get_run("r1")
    assert run is not None
    assert run.status is RunStatus.INTERRUPTED


def test_the_documents_used_by_these_tests_are_valid_scenarios() -> None:
    """The fixture scenarios validate (so the tests above test the worker, not a parse error)."""
    assert [parse_scenario(d).name for d in (DOCUMENT, LONG)] == ["worker-test", "long"]


async def test_a_run_of_a_masked_version_gets_its_credentials_back_and_shows_the_versions_hash() -> None:
    """The worker's scenario carries the literal key kept apart from the stored (masked) document, and the
    version's hash; its stored result shows neither the key nor a hash of it."""
    made = rig()
    seen: list[Scenario] = []
    prepare = made.worker.prepare

    def recording(scenario: Scenario, run_id: str, sink: RecordSink) -> Any:
        seen.append(scenario)
        return prepare(scenario, run_id, sink)

    made.worker.prepare = recording
    request = {"model": "m", "headers": {"x-api-key": "sk-kept-1"}}
    keyed = {**DOCUMENT, "name": "keyed", "target": {**DOCUMENT["target"], "request": request}}
    version = await ScenarioCatalog(made.store, now=now).register(keyed)
    await made.store.create_run(
        Run(id="r1", scenario_name="keyed", scenario_hash=version.content_hash, status=RunStatus.QUEUED,
            trigger=Trigger.API, triggered_by="test", created_at=now(), target_url="http://127.0.0.1:9", seed=4,
            threshold=70.0)
    )  # fmt: skip
    async with working(made):
        run = await made.wait_for("r1", RunStatus.SUCCEEDED, RunStatus.FAILED)

    assert version.document["target"]["request"]["headers"] == {"x-api-key": "***"}
    assert [s.target.request.headers for s in seen] == [(("x-api-key", "sk-kept-1"),)]
    assert seen[0].content_hash == version.content_hash
    assert run.status is RunStatus.SUCCEEDED, run.reason
    assert run.result is not None
    assert run.result["scenario"]["content_hash"] == version.content_hash
    assert "sk-kept-1" not in str(run.result)
