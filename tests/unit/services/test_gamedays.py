"""Game days through the service on the in-memory store: a suite checked whole before anything is stored, each
experiment queued as an ordinary run of its caller (or schedule) and judged on the result its run stored, a
schedule's fire starting one game day, and a stop ending the suite with nothing queued after it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cliffwatch.adapters.network.target_policies import AllowlistPolicy
from cliffwatch.adapters.notify.webhooks import WebhookNotifier
from cliffwatch.adapters.scheduler.cron import ApschedulerCron
from cliffwatch.config import Settings
from cliffwatch.domain.errors import (
    IdempotencyKeyReused,
    QuotaExceeded,
    ScheduleInvalid,
    ServiceStopping,
    SuiteInvalid,
)
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import content_hash
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from cliffwatch.domain.service.gamedays import ExperimentState, Gameday, GamedayStatus
from cliffwatch.domain.service.runs import Quotas, RunEnd, ScenarioSource, Schedule, Trigger
from cliffwatch.services.catalog import ScenarioCatalog
from cliffwatch.services.gamedays import GamedaysService
from cliffwatch.services.memory_store import InMemoryStore
from cliffwatch.services.runs import RunRequest, RunsService
from cliffwatch.services.schedules import FireStatus, ScheduleService, ScheduleSpec
from run_results_kit import result

SCENARIO: dict[str, Any] = {"name": "minimal", "slo": {"e2e_ms": 2000, "timeout_ms": 5000},
                            "target": {"url": "builtin", "request": {"model": "sim-llm"}},
                            "phases": [{"name": "steady", "role": "baseline", "duration_s": 10,
                                        "arrival": {"process": "constant", "rate": 5}}]}  # fmt: skip
SUITE: dict[str, Any] = {"name": "weekly", "experiments": [
    {"scenario": "minimal", "expect": {"score_at_least": 50}},
    {"scenario": {**SCENARIO, "name": "inline"}, "expect": {"score_at_least": 100}},
]}  # fmt: skip
HEALTHY = {k: v for k, v in result().to_dict().items() if k != "timeseries"}  # as the worker stores a result
BURSTING = {k: v for k, v in result(burst_fails=True).to_dict().items() if k != "timeseries"}


class Parts:
    def __init__(self) -> None:
        self.store = InMemoryStore(now=lambda: datetime.now(UTC))
        allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
        assert allowlist is not None
        settings = Settings(allowlist=allowlist)
        catalog = ScenarioCatalog(self.store, now=lambda: datetime.now(UTC))
        self.runs = RunsService(runs=self.store, control=self.store, catalog=catalog,
                                policy=AllowlistPolicy(settings.allowlist, listen=settings.proxy_listen,
                                                       toxiproxy_url=settings.toxiproxy_url), caps=settings.caps,
                                now=lambda: datetime.now(UTC))  # fmt: skip
        self.gamedays = GamedaysService(store=self.store, runs=self.runs, run_store=self.store, scenarios=self.store,
                                        control=self.store, owner="here", lease_s=0.6,
                                        now=lambda: datetime.now(UTC))  # fmt: skip

    async def finish_next(self, document: dict[str, Any] | None = HEALTHY, *, within_s: float = 10) -> str:
        """Claims the next queued run as a worker would and ends it with ``document`` as its result."""
        deadline = asyncio.get_running_loop().time() + within_s
        while (
            run := await self.store.claim_run(
                owner="w", now=datetime.now(UTC), lease_until=datetime.now(UTC) + timedelta(hours=1)
            )
        ) is None:
            assert asyncio.get_running_loop().time() < deadline, "no run was queued"
            await asyncio.sleep(0.05)
        status = RunStatus.SUCCEEDED if document is not None else RunStatus.FAILED
        end = RunEnd(status=status, finished_at=datetime.now(UTC), result=document, reason="target unreachable")
        await self.store.finish_run(run.id, owner="w", end=end)
        return run.id

    async def first_queued(self, gameday_id: str, *, within_s: float = 10) -> None:
        deadline = asyncio.get_running_loop().time() + within_s
        while (await self.gamedays.get(gameday_id)).experiments[0].run_id is None:
            assert asyncio.get_running_loop().time() < deadline, "its first experiment was not queued"
            await asyncio.sleep(0.05)

    async def ended(self, gameday_id: str, *, within_s: float = 10) -> Gameday:
        deadline = asyncio.get_running_loop().time() + within_s
        while (gameday := await self.gamedays.get(gameday_id)).status is GamedayStatus.RUNNING:
            assert asyncio.get_running_loop().time() < deadline, gameday
            await asyncio.sleep(0.05)
        return gameday


@pytest.fixture
async def parts() -> Parts:
    made = Parts()
    await made.store.save_scenario(name="minimal", document=SCENARIO, content_hash=content_hash(SCENARIO),
                                   source=ScenarioSource.BUNDLED, at=datetime.now(UTC))  # fmt: skip
    return made


async def test_each_experiment_is_the_callers_run_judged_on_its_stored_result(parts: Parts) -> None:
    gameday, created = await parts.gamedays.start(SUITE, trigger=Trigger.API, triggered_by="ci")
    assert created
    first = await parts.finish_next()
    second = await parts.finish_next(BURSTING)
    done = await parts.ended(gameday.id)
    assert (done.status, done.verdict) == (GamedayStatus.FINISHED, "broken")
    assert [(e.run_id, e.state) for e in done.experiments] == [(first, ExperimentState.HELD),
                                                                (second, ExperimentState.BROKEN)]  # fmt: skip
    runs = [await parts.store.get_run(r) for r in (first, second)]
    assert [(r.trigger, r.triggered_by) for r in runs if r is not None] == [(Trigger.API, "ci")] * 2
    combined = await parts.gamedays.combined(done)
    assert [e["result"]["run_id"] for e in combined["experiments"]] == [HEALTHY["run_id"]] * 2
    assert combined["verdict"] == "broken"


async def test_a_run_that_could_not_run_fails_the_suite_and_nothing_runs_after_it(parts: Parts) -> None:
    gameday, _ = await parts.gamedays.start(SUITE, trigger=Trigger.API, triggered_by="ci")
    await parts.finish_next(None)  # failed: no result
    done = await parts.ended(gameday.id)
    assert done.verdict == "failed"
    assert [e.state for e in done.experiments] == [ExperimentState.FAILED, ExperimentState.NOT_RUN]
    assert "target unreachable" in (done.experiments[0].error or "")
    assert len(await parts.store.active_runs()) == 0


@pytest.mark.parametrize(
    ("experiment", "path"),
    [
        ({"scenario": "scenarios/burst-storm.yaml"}, "experiments[1].scenario"),
        ({"scenario": "no-such-scenario"}, "experiments[1].scenario"),
        ({"scenario": {**SCENARIO, "name": "x", "slo": {"e2e_ms": -1, "timeout_ms": 5000}}},
         "experiments[1].scenario.slo.e2e_ms"),
        ({"scenario": "minimal", "target": {"url": "http://203.0.113.9:8000"}}, "experiments[1].target.url"),
        ({"scenario": "minimal", "expect": {"score_at_least": 101}}, "experiments[1].expect.score_at_least"),
    ],
)  # fmt: skip
async def test_a_suite_with_a_bad_experiment_is_refused_whole_naming_the_field(
    parts: Parts, experiment: dict[str, Any], path: str
) -> None:
    suite = {"name": "bad", "experiments": [SUITE["experiments"][0], {"name": "second", **experiment}]}
    with pytest.raises(SuiteInvalid) as caught:
        await parts.gamedays.start(suite, trigger=Trigger.API, triggered_by="ci")
    assert path in [p.path for p in caught.value.problems], caught.value.problems
    assert await parts.gamedays.latest(10) == []
    assert await parts.store.active_runs() == []


async def test_a_stop_ends_the_suite_with_no_experiment_queued_after_it(parts: Parts) -> None:
    gameday, _ = await parts.gamedays.start(SUITE, trigger=Trigger.API, triggered_by="ci")
    await parts.first_queued(gameday.id)
    await parts.gamedays.abort(gameday.id, "drill")
    done = await parts.ended(gameday.id)
    assert (done.verdict, done.reason, done.abort_requested) == ("stopped", "drill", "drill")
    # its run was queued when the stop came (and aborted at once): stopped, not judged; the next one never ran
    assert [e.state for e in done.experiments] == [ExperimentState.STOPPED, ExperimentState.NOT_RUN]
    run = await parts.store.get_run(done.experiments[0].run_id or "")
    assert run is not None
    assert run.status is RunStatus.ABORTED  # queued when it was stopped: aborted at once, never run
    assert len((await parts.store.list_runs(_all())).runs) == 1


async def test_a_shutdown_or_a_lapsed_lease_is_recorded_interrupted_and_its_queued_run_aborted(parts: Parts) -> None:
    gameday, _ = await parts.gamedays.start(SUITE, trigger=Trigger.API, triggered_by="ci")
    await parts.first_queued(gameday.id)
    await parts.gamedays.shutdown()  # as a crash would leave it, but recorded interrupted on the way out
    stopped = await parts.gamedays.get(gameday.id)
    assert stopped.status is GamedayStatus.INTERRUPTED
    assert stopped.reason == "the service stopped before the game day could finish"
    orphan = await parts.store.get_run(stopped.experiments[0].run_id or "")
    assert orphan is not None
    assert orphan.status is RunStatus.ABORTED  # queued, it would have run after the restart with nothing watching
    # an instance that died mid-suite (its lease lapsed), its experiment's run still queued
    queued, _ = await parts.runs.submit(RunRequest(scenario="minimal", trigger=Trigger.API, triggered_by="ci"))
    dead = replace(stopped, id="dead", owner="gone", status=GamedayStatus.RUNNING, reason=None,
                   lease_until=datetime.now(UTC) - timedelta(seconds=1),
                   experiments=(replace(stopped.experiments[0], state=ExperimentState.RUNNING, run_id=queued.id),
                                stopped.experiments[1]))  # fmt: skip
    await parts.store.create_gameday(dead)
    assert [g.id for g in await parts.gamedays.recover(grace=timedelta(0))] == ["dead"]
    recorded = await parts.gamedays.get("dead")
    assert recorded.status is GamedayStatus.INTERRUPTED
    assert "stopped renewing its lease" in (recorded.reason or "")
    aborted = await parts.store.get_run(queued.id)
    assert aborted is not None
    assert aborted.status is RunStatus.ABORTED  # it would have started with nothing watching it


async def test_a_schedule_with_a_suite_starts_one_game_day_a_fire(parts: Parts) -> None:
    async def start(schedule: Schedule, fire_time: datetime) -> tuple[str, bool]:
        assert schedule.suite is not None
        started, created = await parts.gamedays.start(schedule.suite, trigger=Trigger.SCHEDULE,
                                                      triggered_by=schedule.id, schedule_id=schedule.id,
                                                      fire_time=fire_time)  # fmt: skip
        return started.id, created

    async def no_runs(schedule: Schedule, fire_time: datetime) -> Any:
        raise AssertionError("a suite's schedule queues no run of its own")

    schedules = ScheduleService(schedules=parts.store, runs=parts.store, scenarios=parts.store,
                                calendar=ApschedulerCron(), make_run=no_runs, now=lambda: datetime.now(UTC),
                                start_gameday=start)  # fmt: skip
    schedule = await schedules.create(ScheduleSpec(name="weekly", cron="0 9 * * 1", timezone="UTC",
                                                   scenario_name="weekly", suite=SUITE))  # fmt: skip
    fire = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
    outcome = await schedules.fire(schedule.id, fire)
    assert outcome.status is FireStatus.QUEUED
    assert outcome.gameday_id is not None
    assert (await schedules.fire(schedule.id, fire)).status is FireStatus.DUPLICATE
    gameday = await parts.gamedays.get(outcome.gameday_id)
    assert (gameday.trigger, gameday.schedule_id, gameday.fire_time) == (Trigger.SCHEDULE, schedule.id, fire)
    first = await parts.finish_next()
    run = await parts.store.get_run(first)
    assert run is not None
    assert (run.trigger, run.triggered_by, run.schedule_id) == (Trigger.SCHEDULE, schedule.id, None)
    later = await schedules.fire(schedule.id, datetime(2024, 6, 10, 9, 0, tzinfo=UTC))
    assert later.status is FireStatus.OVERLAP  # two suites at once on one target: nothing would bound them together
    assert f"game day {gameday.id} of this schedule is still running" in (later.reason or "")
    await parts.gamedays.shutdown()
    with pytest.raises(ServiceStopping):  # not a decision about the fire: the next start catches it up
        await schedules.fire(schedule.id, datetime(2024, 6, 17, 9, 0, tzinfo=UTC))
    assert len(await parts.gamedays.latest(10)) == 1
    with pytest.raises(ScheduleInvalid, match=r"suite\.experiments"):
        await schedules.create(ScheduleSpec(name="bad", cron="0 9 * * 1", timezone="UTC", scenario_name="x",
                                            suite={"name": "x", "experiments": []}))  # fmt: skip


def _all() -> Any:
    from cliffwatch.domain.service.runs import RunQuery

    return RunQuery(limit=100)


async def test_a_run_the_environment_interrupted_fails_the_suite_instead_of_breaking_a_hypothesis(
    parts: Parts,
) -> None:
    gameday, _ = await parts.gamedays.start(SUITE, trigger=Trigger.API, triggered_by="ci")
    run = await parts.store.claim_run(owner="w", now=datetime.now(UTC),
                                      lease_until=datetime.now(UTC) + timedelta(hours=1))  # fmt: skip
    while run is None:
        await asyncio.sleep(0.05)
        run = await parts.store.claim_run(owner="w", now=datetime.now(UTC),
                                          lease_until=datetime.now(UTC) + timedelta(hours=1))  # fmt: skip
    end = RunEnd(status=RunStatus.INTERRUPTED, finished_at=datetime.now(UTC), result=HEALTHY,
                 reason="its worker's instance shut down")  # fmt: skip
    await parts.store.finish_run(run.id, owner="w", end=end)
    done = await parts.ended(gameday.id)
    assert done.verdict == "failed"  # the environment's doing: no false "hypothesis broken"
    assert [e.state for e in done.experiments] == [ExperimentState.FAILED, ExperimentState.NOT_RUN]
    assert "says nothing of the target" in (done.experiments[0].error or "")


async def test_the_kept_suite_masks_credentials_and_cuts_webhooks_to_their_hosts(parts: Parts) -> None:
    inline = {
        **SCENARIO,
        "name": "keyed",
        "target": {"url": "builtin", "request": {"model": "sim-llm", "headers": {"Authorization": "Bearer sk-1"}}},
    }
    suite = {"name": "secretive", "experiments": [{"scenario": inline}],
             "notify": [{"webhook": "http://127.0.0.1:9/services/T0/B0/XYZ"}]}  # fmt: skip
    gameday, _ = await parts.gamedays.start(suite, trigger=Trigger.API, triggered_by="ci")
    kept = (await parts.gamedays.get(gameday.id)).suite
    assert "sk-1" not in str(kept)
    assert "XYZ" not in str(kept)
    assert kept["notify"][0]["webhook"] == "http://127.0.0.1:9/***"
    await parts.gamedays.shutdown()


async def test_a_target_url_with_a_password_is_refused_before_anything_runs(parts: Parts) -> None:
    suite = {"name": "leaky", "experiments": [{"scenario": "minimal", "target": {"url": "http://u:pw@127.0.0.1:9"}}]}
    with pytest.raises(SuiteInvalid) as caught:
        await parts.gamedays.start(suite, trigger=Trigger.API, triggered_by="ci")
    assert [p.path for p in caught.value.problems] == ["experiments[0].target.url"]
    assert await parts.gamedays.latest(10) == []


async def test_a_repeat_with_its_idempotency_key_gets_the_game_day_it_started(parts: Parts) -> None:
    first, created = await parts.gamedays.start(SUITE, trigger=Trigger.API, triggered_by="ci", idempotency_key="t:k1")
    again, created_again = await parts.gamedays.start(SUITE, trigger=Trigger.API, triggered_by="ci",
                                                      idempotency_key="t:k1")  # fmt: skip
    assert (created, created_again, again.id) == (True, False, first.id)
    assert len(await parts.gamedays.latest(10)) == 1  # a CI job retried after a timeout starts no second suite
    other = {**SUITE, "name": "another"}
    with pytest.raises(IdempotencyKeyReused, match=f"already started game day {first.id}"):
        await parts.gamedays.start(other, trigger=Trigger.API, triggered_by="ci", idempotency_key="t:k1")
    await parts.gamedays.shutdown()


async def test_a_caller_at_its_quota_is_refused_before_the_suite_starts(parts: Parts) -> None:
    parts.runs.quotas = Quotas(max_queued_runs=1)
    await parts.runs.submit(RunRequest(scenario="minimal", trigger=Trigger.API, triggered_by="ci"))
    with pytest.raises(QuotaExceeded, match="queued runs"):
        await parts.gamedays.start(SUITE, trigger=Trigger.API, triggered_by="ci")
    assert await parts.gamedays.latest(10) == []


async def test_webhooks_and_a_schedules_suite_are_judged_when_given_not_when_told(parts: Parts) -> None:
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    notifier = WebhookNotifier(allowlist, lambda ref: "key")
    parts.gamedays.notify = notifier
    parts.runs.webhooks = notifier
    outside = {**SUITE, "notify": [{"webhook": "http://203.0.113.9/hook"}]}
    with pytest.raises(SuiteInvalid) as caught:
        await parts.gamedays.start(outside, trigger=Trigger.API, triggered_by="ci")
    assert [p.path for p in caught.value.problems] == ["notify[0].webhook"]
    inline = {**SCENARIO, "name": "told", "notify": [{"webhook": "http://203.0.113.9/hook"}]}
    with pytest.raises(SuiteInvalid) as caught:
        await parts.gamedays.start({"name": "x", "experiments": [{"scenario": inline}]}, trigger=Trigger.API,
                                   triggered_by="ci")  # fmt: skip
    assert [p.path for p in caught.value.problems] == ["experiments[0].scenario.notify[0].webhook"]
    assert await parts.gamedays.latest(10) == []

    async def check(suite: Mapping[str, Any]) -> None:
        await parts.gamedays.check(suite, trigger=Trigger.SCHEDULE, triggered_by="schedule")

    async def no_runs(schedule: Schedule, fire_time: datetime) -> Any:
        raise AssertionError("nothing fires here")

    schedules = ScheduleService(schedules=parts.store, runs=parts.store, scenarios=parts.store,
                                calendar=ApschedulerCron(), make_run=no_runs, now=lambda: datetime.now(UTC),
                                check_suite=check)  # fmt: skip
    missing = {"name": "weekly", "experiments": [{"scenario": "no-such-scenario"}]}
    with pytest.raises(ScheduleInvalid) as refused:
        await schedules.create(ScheduleSpec(name="weekly", cron="0 9 * * 1", timezone="UTC", scenario_name="weekly",
                                            suite=missing))  # fmt: skip
    assert [p.path for p in refused.value.problems] == ["suite.experiments[0].scenario"]
