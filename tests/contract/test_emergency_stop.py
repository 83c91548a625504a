"""The emergency stop wins every race, on every store: a claim never starts a run while the stop is on, a run
queued while it is on is aborted (never left to fire the moment the stop is released), and no submission
that crosses stop-all's sweep of active runs is ever started."""

from __future__ import annotations

import asyncio
import contextlib

from store_kit import T0, Backend, Store, make_run, seconds

from cliffwatch.domain.errors import EmergencyStopActive
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.caps import Caps
from cliffwatch.domain.service.runs import Quotas, Run, RunQuery
from cliffwatch.services.catalog import ScenarioCatalog
from cliffwatch.services.runs import RunRequest, RunsService

LEASE = seconds(30)
SCENARIO = {
    "name": "stop-race",
    "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
    "target": {"url": "builtin", "request": {"model": "m", "max_tokens": 4}},
    "phases": [{"name": "a", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
}


class AnyTarget:
    async def check(self, url: str) -> str | None:
        return None

    async def check_upstream(self, url: str) -> str | None:
        return None

    async def check_listen(self, address: str) -> str | None:
        return None


async def runs_service(backend: Backend, store: Store) -> RunsService:
    catalog = ScenarioCatalog(store, now=backend.clock)
    await catalog.register(SCENARIO)
    # Quotas well above the races' dozen submissions: what is tested is the stop, not a token's share.
    return RunsService(
        runs=store,
        control=store,
        catalog=catalog,
        policy=AnyTarget(),
        caps=Caps(),
        quotas=Quotas(max_queued_runs=1_000, max_documents=1_000),
        now=backend.clock,
    )


async def claim(store: Store, owner: str = "instance-a") -> Run | None:
    return await store.claim_run(owner=owner, now=T0 + seconds(5), lease_until=T0 + seconds(5) + LEASE)


async def test_a_claim_never_starts_a_run_while_the_stop_is_on_and_aborts_it(backend: Backend) -> None:
    """While the stop is on, a claim starts nothing: the queued runs it finds end as aborted, with the
    stop's reason, on every instance."""
    for i in range(3):
        await backend.store.create_run(make_run(f"r{i}", at=T0 + seconds(i)))
    await backend.store.set_emergency_stop("target on fire")
    assert await claim(backend.another_store()) is None
    for i in range(3):
        run = await backend.store.get_run(f"r{i}")
        assert run is not None
        assert (run.status, run.reason, run.started_at) == (RunStatus.ABORTED, "emergency stop: target on fire", None)
        assert run.finished_at is not None
    await backend.store.set_emergency_stop(None)
    assert await claim(backend.store) is None  # nothing was left to fire on release


async def test_runs_claim_again_once_the_stop_is_released(backend: Backend) -> None:
    """The stop blocks claims only while it is on: a run queued after the release is claimed as usual."""
    await backend.store.set_emergency_stop("drill")
    await backend.store.set_emergency_stop(None)
    await backend.store.create_run(make_run("after", at=T0))
    claimed = await claim(backend.store)
    assert claimed is not None
    assert (claimed.id, claimed.status) == ("after", RunStatus.RUNNING)


async def test_releasing_the_stop_aborts_the_runs_it_caught_queued(backend: Backend) -> None:
    """A run that slipped into the queue while the stop was on, with no claim since, is aborted by the
    release itself: it never fires the moment the stop is released."""
    await backend.store.set_emergency_stop("drill")
    await backend.another_store().create_run(make_run("slipped", at=T0))  # past the check before the stop
    await backend.store.set_emergency_stop(None)
    run = await backend.store.get_run("slipped")
    assert run is not None
    assert (run.status, run.reason) == (RunStatus.ABORTED, "emergency stop: drill")
    assert await claim(backend.store) is None


async def test_a_submission_that_crosses_stop_all_is_never_started(backend: Backend) -> None:
    """The race: a submission passes the stop check, stop-all sets the stop and sweeps the active runs, and
    only then is the run inserted. It is never started: the next claim aborts it."""
    submitter = await runs_service(backend, backend.another_store())
    stopper = await runs_service(backend, backend.store)
    run = await submitter.build(RunRequest(scenario="stop-race"))  # the stop check passed
    assert await stopper.stop_all("drill") == []  # the sweep finds nothing: the run is not stored yet
    stored, created = await submitter.runs.create_run(run)
    assert created
    assert stored.status is RunStatus.QUEUED
    assert await claim(backend.another_store()) is None
    after = await backend.store.get_run(run.id)
    assert after is not None
    assert (after.status, after.reason) == (RunStatus.ABORTED, "emergency stop: drill")


async def test_stop_all_racing_submissions_and_claims_leaves_nothing_to_run(backend: Backend) -> None:
    """Submissions, claims and stop-all all at once from three instances: once stop-all has returned and one
    more claim has been made, every run is aborted or was asked to abort by the stop; none is left queued,
    and none runs unasked."""
    submitter = await runs_service(backend, backend.another_store())
    stopper = await runs_service(backend, backend.another_store())
    claimer = backend.another_store()

    async def submit(n: int) -> None:
        await asyncio.sleep(0.001 * (n % 4))
        with contextlib.suppress(EmergencyStopActive):  # refused once the stop is on: a late submission's end
            await submitter.submit(RunRequest(scenario="stop-race", idempotency_key=f"k{n}"))

    async def claims() -> None:
        for _ in range(10):
            await claim(claimer, owner="claimer")
            await asyncio.sleep(0.001)

    async def stop() -> None:
        await asyncio.sleep(0.004)
        await stopper.stop_all("drill")

    await asyncio.gather(*(submit(n) for n in range(12)), claims(), stop())
    await claim(claimer, owner="claimer")
    for run in await backend.store.active_runs():
        assert run.status is RunStatus.RUNNING, run
        assert run.abort_requested == "emergency stop: drill", run
    page = await backend.store.list_runs(RunQuery(limit=200))
    for run in page.runs:
        if run.status is RunStatus.ABORTED:
            assert run.reason == "emergency stop: drill"
