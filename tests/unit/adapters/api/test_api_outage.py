"""The API while its database is down: a caller this instance knew is still authenticated, and an abort or
the emergency stop still reaches the runs this instance executes (here a stand-in for its worker)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from api_harness import Api, build_parts, make_settings, serve

from cliffwatch.adapters.network.target_policies import AllowlistPolicy
from cliffwatch.domain.errors import StoreUnavailable
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import Run, TokenRole
from cliffwatch.services.runs import RunRequest, RunsService

DOWN_METHODS = ("token_by_hash", "request_abort", "set_emergency_stop", "active_runs", "get_run", "emergency_stop")


@dataclass
class Instance:
    """What the instance runs: the worker's ``LocalRuns`` face, with one run in hand."""

    running: dict[str, Run]
    aborted: dict[str, str] = field(default_factory=dict)
    stopped: str | None = None

    def abort_local(self, run_id: str, reason: str) -> Run | None:
        run = self.running.get(run_id)
        if run is None:
            return None
        self.aborted[run_id] = reason
        return replace(run, abort_requested=reason)

    def stop_local(self, reason: str) -> list[Run]:
        self.stopped = reason
        return [r for run_id in self.running if (r := self.abort_local(run_id, f"emergency stop: {reason}"))]

    def release_local(self) -> None:
        self.stopped = None

    def unrecorded_stop(self) -> str | None:
        return self.stopped


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Api, Instance, list[bool]]]:
    settings = make_settings()
    parts = await build_parts(settings)
    queued = await parts.services.runs.submit(RunRequest(scenario="burst-storm"))
    run = await parts.store.claim_run(owner="me", now=parts.clock(), lease_until=parts.clock())
    assert run is not None
    assert run.id == queued[0].id
    instance = Instance(running={run.id: run})
    runs = RunsService(runs=parts.store, control=parts.store, catalog=parts.services.catalog,
                       policy=AllowlistPolicy(settings.allowlist, listen=settings.proxy_listen), caps=settings.caps,
                       now=parts.clock,
                       local=instance)  # fmt: skip
    parts.services = replace(parts.services, runs=runs)
    down = [False]
    for name in DOWN_METHODS:
        original = getattr(parts.store, name)

        async def guarded(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if down[0]:
                raise StoreUnavailable("memory://test", "down for the test")
            return await _original(*args, **kwargs)

        monkeypatch.setattr(parts.store, name, guarded)
    async with serve(parts, settings) as api:
        yield api, instance, down


async def test_an_abort_reaches_this_instances_run_while_the_database_is_down(
    served: tuple[Api, Instance, list[bool]],
) -> None:
    api, instance, down = served
    [run_id] = instance.running
    assert (await api.call("GET", "/api/v1/runs", role=TokenRole.OPERATOR)).status == 200  # the token is known here
    down[0] = True
    reply = await api.call("POST", f"/api/v1/runs/{run_id}/abort", role=TokenRole.OPERATOR, json={"reason": "now"})
    assert reply.status == 200
    assert reply.body["status"] == RunStatus.RUNNING.value
    assert reply.body["abort_requested"] == "now"
    assert instance.aborted == {run_id: "now"}
    elsewhere = await api.call("POST", "/api/v1/runs/not-here/abort", role=TokenRole.OPERATOR)
    assert elsewhere.status == 503


async def test_the_emergency_stop_reaches_this_instance_while_the_database_is_down(
    served: tuple[Api, Instance, list[bool]],
) -> None:
    api, instance, down = served
    [run_id] = instance.running
    assert (await api.call("GET", "/api/v1/stop-all")).status == 200  # the admin token is known here
    down[0] = True
    reply = await api.call("POST", "/api/v1/stop-all", json={"reason": "pager"})
    assert reply.status == 503
    assert reply.body["type"].endswith(":emergency-stop-not-recorded")
    assert reply.body["stopped_here"] == [run_id]
    assert instance.stopped == "pager"
    assert instance.aborted == {run_id: "emergency stop: pager"}
    down[0] = False
    recorded = await api.call("POST", "/api/v1/stop-all", json={"reason": "pager"})
    assert recorded.status == 200
    assert instance.stopped is None  # the database's stop governs this instance now
    assert (await api.call("GET", "/api/v1/stop-all")).body == {"active": True, "reason": "pager"}


async def test_a_token_never_seen_is_refused_while_the_database_is_down(
    served: tuple[Api, Instance, list[bool]],
) -> None:
    api, _, down = served
    down[0] = True
    reply = await api.call("GET", "/api/v1/stop-all", role=TokenRole.VIEWER)
    assert reply.status == 503
    assert reply.body["type"].endswith(":store-unavailable")


async def stop_unrecorded(api: Api, down: list[bool]) -> None:
    """Stop-all while the database is down (the admin token known before), then the database back: this instance
    holds a stop the database never recorded."""
    assert (await api.call("GET", "/api/v1/stop-all")).status == 200
    down[0] = True
    stopped = await api.call("POST", "/api/v1/stop-all", json={"reason": "pager"})
    assert stopped.body["type"].endswith(":emergency-stop-not-recorded")
    down[0] = False


async def test_no_run_is_accepted_while_this_instance_holds_a_stop_the_database_has_not_recorded(
    served: tuple[Api, Instance, list[bool]],
) -> None:
    """Stop-all while the database is down stops this instance; once the database answers again, a run asked of
    this instance is refused (503, the same problem type) until the stop is recorded, not queued to fire on release."""
    api, _, down = served
    await stop_unrecorded(api, down)
    before = {run.id for run in await api.store.active_runs()}

    reply = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR, json={"scenario": "burst-storm"})

    assert reply.status == 503
    assert reply.body["type"].endswith(":emergency-stop-not-recorded")
    assert "holds an emergency stop (pager) that the database has not recorded" in reply.body["detail"]
    assert {run.id for run in await api.store.active_runs()} == before
    assert (await api.call("POST", "/api/v1/stop-all", json={"reason": "pager"})).status == 200  # recorded now
    refused = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR, json={"scenario": "burst-storm"})
    assert refused.body["type"].endswith(":emergency-stop")


async def test_releasing_a_stop_that_was_never_recorded_aborts_the_runs_queued_under_it(
    served: tuple[Api, Instance, list[bool]],
) -> None:
    """Another instance, which never saw the stop, queues a run while this one holds it unrecorded: releasing the
    stop here aborts that run (it crossed the stop), and this instance may run again."""
    api, instance, down = served
    await stop_unrecorded(api, down)
    elsewhere = RunsService(runs=api.store, control=api.store, catalog=api.services.catalog,
                            policy=AllowlistPolicy(api.settings.allowlist, listen=api.settings.proxy_listen),
                            caps=api.settings.caps, now=api.clock)  # fmt: skip
    crossed, _ = await elsewhere.submit(RunRequest(scenario="burst-storm"))

    released = await api.call("DELETE", "/api/v1/stop-all")

    assert released.status in (200, 204)
    run = await api.store.get_run(crossed.id)
    assert run is not None
    assert run.status is RunStatus.ABORTED
    assert run.abort_requested == "emergency stop: pager"
    assert instance.stopped is None
    later, _ = await elsewhere.submit(RunRequest(scenario="burst-storm"))
    assert later.status is RunStatus.QUEUED
