"""What the worker tests share: a rig of an in-memory store and a worker, queueing runs into it, waiting for
a run's status or for the worker to go idle, and the worker running for the length of a block."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from cliffwatch.domain.outcomes import NS_PER_MS, Attempt, RequestRecord, classify
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import Scenario, content_hash
from cliffwatch.domain.service.runs import Run, ScenarioSource, Trigger
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.services.memory_store import InMemoryStore
from cliffwatch.services.runner import RunService
from cliffwatch.services.worker import RunWorker


def now() -> datetime:
    return datetime.now(UTC)


def answered(request: PlannedRequest, scenario: Scenario) -> RequestRecord:
    """The record of ``request`` answered in full 10 ms after its scheduled time (first token at 5 ms)."""
    attempt = Attempt(number=1, sent_ns=request.scheduled_ns, end_ns=request.scheduled_ns + 10 * NS_PER_MS,
                      first_token_ns=request.scheduled_ns + 5 * NS_PER_MS, output_tokens=4)  # fmt: skip
    outcome = classify((attempt,), scheduled_ns=request.scheduled_ns, slo=scenario.slo)
    return RequestRecord(id=request.id, phase=request.phase, scheduled_ns=request.scheduled_ns, prompt_tokens=0,
                         max_tokens=4, attempts=(attempt,), outcome=outcome)  # fmt: skip


@dataclass
class Prepared:
    """What a test's ``prepare`` yields the worker (``PreparedRunLike``)."""

    service: RunService
    target_url: str
    run_id: str


@dataclass
class WorkerRig:
    store: InMemoryStore
    worker: RunWorker

    async def queue_run(self, document: dict[str, Any], *, run_id: str, **fields: Any) -> Run:
        """Registers ``document`` and queues a run of it (``fields``: the Run's further fields, such as its kind)."""
        version = await self.store.save_scenario(name=document["name"], document=document,
                                                 content_hash=content_hash(document), source=ScenarioSource.REGISTERED,
                                                 at=now())  # fmt: skip
        run = Run(id=run_id, scenario_name=version.name, scenario_hash=version.content_hash, status=RunStatus.QUEUED,
                  trigger=Trigger.API, triggered_by="test", created_at=now(), target_url="http://127.0.0.1:9",
                  seed=4, threshold=70.0, **fields)  # fmt: skip
        created, _ = await self.store.create_run(run)
        return created

    async def wait_for(self, run_id: str, *statuses: RunStatus, within_s: float = 10.0) -> Run:
        async with asyncio.timeout(within_s):
            while True:
                run = await self.store.get_run(run_id)
                if run is not None and run.status in statuses:
                    return run
                await asyncio.sleep(0.02)

    async def wait_idle(self) -> None:
        """Waits up to five seconds for the worker to have no run in hand."""
        for _ in range(100):
            if not self.worker.active:
                break
            await asyncio.sleep(0.05)


R = TypeVar("R", bound=WorkerRig)


@asynccontextmanager
async def working(made: R) -> AsyncIterator[R]:
    task = asyncio.create_task(made.worker.run_forever())
    try:
        yield made
    finally:
        await made.worker.shutdown(5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
