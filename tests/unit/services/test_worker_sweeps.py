"""Sweeps in the worker, over the in-memory store and a sweep twin: a sweep run goes through
``prepare_sweep`` and ends with its document and usable capacity; abort, lease loss and shutdown stop it
as they stop a run; a sweep that cannot start is recorded as failed; a real sweep service's steps are
stored as a provisional document while it runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from worker_kit import WorkerRig, now, working

from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.bootstrap.sweep import SweepHandle
from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.errors import TargetUnreachable
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.service.runs import Run, RunKind
from cliffwatch.services.memory import CollectingObserver
from cliffwatch.services.memory_store import InMemoryStore
from cliffwatch.services.memory_sweep import model_runners
from cliffwatch.services.ports import SweepObserver
from cliffwatch.services.sweep import SweepService
from cliffwatch.services.worker import RunWorker, WorkerSettings

DOCUMENT: dict[str, Any] = {
    "name": "sweep-test",
    "seed": 4,
    "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 4}},
    "slo": {"e2e_ms": 500, "timeout_ms": 1000},
    "phases": [{"name": "calm", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 5}}],
}
SPEC = SweepSpec(start=1.0, stop=8.0, step_s=1.0, warmup_s=0.0, cooldown_s=0.0)


@dataclass(frozen=True)
class Outcome:
    status: RunStatus
    reason: str | None
    usable_rps: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"format": 1, "kind": "sweep", "status": self.status.value, "reason": self.reason,
                "usable_rps": self.usable_rps, "variants": []}  # fmt: skip


class TwinSweep:
    """Finishes after ``duration_s`` with a usable capacity, or earlier when stopped (as the real one does)."""

    target_url = "http://127.0.0.1:9"

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.stopped = asyncio.Event()
        self.stop: tuple[RunStatus, str] | None = None

    def interrupt(self) -> None:
        self.stop = self.stop or (RunStatus.INTERRUPTED, "the sweep was stopped before its end")
        self.stopped.set()

    def abort(self, reason: str) -> None:
        self.stop = self.stop or (RunStatus.ABORTED, reason)
        self.stopped.set()

    async def run(self) -> Outcome:
        try:
            await asyncio.wait_for(self.stopped.wait(), self.duration_s)
        except TimeoutError:
            return Outcome(status=RunStatus.SUCCEEDED, reason=None, usable_rps=6.5)
        assert self.stop is not None
        return Outcome(status=self.stop[0], reason=self.stop[1], usable_rps=None)


@dataclass
class Rig(WorkerRig):
    prepared: list[tuple[str, SweepSpec]] = field(default_factory=list)
    runs_prepared: list[str] = field(default_factory=list)
    duration_s: float = 0.05
    failing: bool = False

    async def queue(self, run_id: str, *, kind: RunKind = RunKind.SWEEP, sweep: SweepSpec | None = SPEC) -> Run:
        return await self.queue_run(DOCUMENT, run_id=run_id, kind=kind, sweep=sweep)


def rig(*, lease_s: float = 30.0, sweeps: bool = True) -> Rig:
    store = InMemoryStore()
    holder: dict[str, Rig] = {}

    @asynccontextmanager
    async def prepare(scenario: Scenario, run_id: str, sink: object) -> AsyncIterator[Any]:
        holder["rig"].runs_prepared.append(run_id)
        raise TargetUnreachable("http://127.0.0.1:9", "plain runs are not under test here")
        yield  # pragma: no cover

    @asynccontextmanager
    async def prepare_sweep(
        scenario: Scenario, spec: SweepSpec, run_id: str, steps: SweepObserver
    ) -> AsyncIterator[TwinSweep]:
        made = holder["rig"]
        if made.failing:
            raise TargetUnreachable("http://127.0.0.1:9", "connection refused")
        assert scenario.name == "sweep-test"
        made.prepared.append((run_id, spec))
        yield TwinSweep(made.duration_s)

    worker = RunWorker(runs=store, scenarios=store, prepare=prepare, now=now,
                    prepare_sweep=prepare_sweep if sweeps else None,
                    settings=WorkerSettings(owner="w1", max_concurrent_runs=2, lease_s=lease_s))  # fmt: skip
    made = Rig(store=store, worker=worker)
    holder["rig"] = made
    return made


async def test_a_sweep_run_goes_through_prepare_sweep_and_keeps_its_document_and_capacity() -> None:
    made = rig()
    await made.queue("s1")
    async with working(made):
        run = await made.wait_for("s1", RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert run.status is RunStatus.SUCCEEDED, run.reason
    assert made.prepared == [("s1", SPEC)]
    assert made.runs_prepared == []
    assert run.usable_rps == 6.5
    assert run.result is not None
    assert (run.result["kind"], run.result["usable_rps"]) == ("sweep", 6.5)
    assert (run.score, run.verdicts) == (None, ())


async def test_an_abort_requested_through_the_store_stops_the_sweep_with_its_reason() -> None:
    made = rig()
    made.duration_s = 30
    await made.queue("s1")
    async with working(made):
        await made.wait_for("s1", RunStatus.RUNNING)
        await made.store.request_abort("s1", "aborted by ops via the API")
        run = await made.wait_for("s1", RunStatus.ABORTED, within_s=5)
    assert run.reason == "aborted by ops via the API"
    assert run.usable_rps is None


async def test_shutting_down_interrupts_a_running_sweep_and_records_it() -> None:
    made = rig()
    made.duration_s = 30
    await made.queue("s1")
    task = asyncio.create_task(made.worker.run_forever())
    await made.wait_for("s1", RunStatus.RUNNING)
    await made.worker.shutdown(5)
    await asyncio.wait_for(task, 2)
    run = await made.store.get_run("s1")
    assert run is not None
    assert run.status is RunStatus.INTERRUPTED
    assert run.reason == "the sweep was stopped before its end"


async def test_a_worker_that_loses_the_lease_of_a_sweep_stops_it() -> None:
    made = rig(lease_s=0.3)
    made.duration_s = 30
    await made.queue("s1")
    async with working(made):
        await made.wait_for("s1", RunStatus.RUNNING)
        assert [r.id for r in await made.store.expire_leases(datetime(2999, 1, 1, tzinfo=UTC))] == ["s1"]
        await made.wait_idle()
        assert made.worker.active == 0
    run = await made.store.get_run("s1")
    assert run is not None
    assert run.status is RunStatus.INTERRUPTED


@pytest.mark.parametrize("why", ["unreachable", "no machinery", "no parameters"])
async def test_a_sweep_that_cannot_start_is_recorded_as_failed_with_the_reason(why: str) -> None:
    made = rig(sweeps=why != "no machinery")
    made.failing = why == "unreachable"
    await made.queue("s1", sweep=None if why == "no parameters" else SPEC)
    async with working(made):
        run = await made.wait_for("s1", RunStatus.FAILED)
    assert run.reason is not None
    expected = {"unreachable": "is unreachable, no load was sent", "no machinery": "cannot run sweeps",
                "no parameters": "has no sweep parameters"}  # fmt: skip
    assert expected[why] in run.reason
    assert made.prepared == []


async def test_a_running_sweep_stores_its_steps_so_far_after_every_step_until_its_end_replaces_them() -> None:
    """A real SweepService (model steps of 50 ms against 4.5 req/s) under the worker: the store holds the
    document of the steps so far while it runs, and the final document alone once it ends."""
    store = InMemoryStore()
    saved: list[int] = []
    save = store.save_provisional_result

    async def recording(run_id: str, *, owner: str, result: Any) -> bool:
        saved.append(result["steps_so_far"])
        return await save(run_id, owner=owner, result=result)

    store.save_provisional_result = recording  # type: ignore[method-assign]

    @asynccontextmanager
    async def prepare_sweep(
        scenario: Scenario, spec: SweepSpec, run_id: str, steps: SweepObserver
    ) -> AsyncIterator[SweepHandle]:
        runner_for, _ = model_runners({"as-written": 4.5}, step_delay_s=0.05)
        service = SweepService(scenario=scenario, spec=spec, runner_for=runner_for, observer=CollectingObserver(),
                               sweep_observer=steps)  # fmt: skip
        yield SweepHandle(sweep_id=run_id, scenario=scenario, spec=spec, service=service, clock=MonotonicClock(),
                          target_url="http://127.0.0.1:9")  # fmt: skip

    @asynccontextmanager
    async def prepare(scenario: Scenario, run_id: str, sink: object) -> AsyncIterator[Any]:
        raise AssertionError("not a run")
        yield  # pragma: no cover

    worker = RunWorker(runs=store, scenarios=store, prepare=prepare, prepare_sweep=prepare_sweep, now=now,
                    settings=WorkerSettings(owner="w1", max_concurrent_runs=1, lease_s=30))  # fmt: skip
    made = Rig(store=store, worker=worker)
    await made.queue("s1")
    async with working(made):
        async with asyncio.timeout(10):
            while True:
                run = await store.get_run("s1")
                assert run is not None
                if run.provisional_result is not None and run.provisional_result["steps_so_far"] >= 2:
                    break
                await asyncio.sleep(0.01)
        assert run.status is RunStatus.RUNNING
        assert run.result is None
        shown = run.provisional_result
        assert (shown["kind"], shown["status"], shown["provisional"], shown["sweep_id"]) == ("sweep", "running",
                                                                                             True, "s1")  # fmt: skip
        assert shown["target"]["url"] == "http://127.0.0.1:9"  # the prepared sweep's, not the run's request
        [variant] = shown["variants"]
        assert len(variant["result"]["steps"]) == shown["steps_so_far"]
        run = await made.wait_for("s1", RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert run.status is RunStatus.SUCCEEDED, run.reason
    assert run.provisional_result is None
    assert run.result is not None
    assert "provisional" not in run.result
    final_steps = len(run.result["variants"][0]["result"]["steps"])
    assert saved == sorted(set(saved))  # one document per step (or fewer, coalesced), never an older one later
    assert 2 <= saved[-1] <= final_steps
    assert run.usable_rps == 4.5
