"""Game days through the service: a suite checked whole, stored, driven on this instance, read back and stopped.

A suite sent to the API (or fired by a schedule) is parsed, and every experiment is checked as the run it will
be (``RunsService.check``: the emergency stop, its scenario, the allowlist, the caps) before anything is stored,
so a suite with a bad experiment is refused whole, each problem naming its field in the suite
(``experiments[1].scenario.target.url``), as ``cliffwatch gameday`` refuses one before any load. The service
runs bundled and registered scenarios by name and inline ones; it reads no file a suite names.

The instance that accepts a suite drives it (``GamedayExecution``), each experiment an ordinary run any worker
may claim. ``recover`` (at start-up and periodically) records as interrupted the game days whose driver stopped
renewing their lease, and aborts the run each left in progress.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import structlog

from cliffwatch.domain.errors import (
    CliffwatchError,
    GamedayNotFound,
    GamedayOverlap,
    IdempotencyKeyReused,
    Problem,
    RunRefused,
    ScenarioInvalid,
    ScenarioNotFound,
    ServiceStopping,
    SuiteInvalid,
    TargetNotAllowed,
)
from cliffwatch.domain.gameday.shown_suite import shown_suite
from cliffwatch.domain.gameday.suite_spec import ExperimentSpec, SuiteSpec, parse_suite, target_overrides, with_target
from cliffwatch.domain.gameday_ports import DeliveryStore, GamedayStore
from cliffwatch.domain.ports import ControlStore, RunStore, ScenarioStore
from cliffwatch.domain.security.redaction import restore
from cliffwatch.domain.service.gamedays import ExperimentRecord, ExperimentState, Gameday, GamedayStatus
from cliffwatch.domain.service.runs import Overrides, Trigger
from cliffwatch.services.gameday_execution import GamedayExecution
from cliffwatch.services.ports import Notifier
from cliffwatch.services.runs import RunRequest, RunsService

log = structlog.get_logger(__name__)
_FILE_SUFFIXES = (".yaml", ".yml", ".json")
NO_FILES = "the service reads no files: name a bundled or registered scenario, or give the scenario itself"


class GamedaysService:
    def __init__(self, *, store: GamedayStore, runs: RunsService, run_store: RunStore, scenarios: ScenarioStore,
                 control: ControlStore, owner: str, lease_s: float, now: Callable[[], datetime],
                 notify: Notifier | None = None, deliveries: DeliveryStore | None = None) -> None:  # fmt: skip
        self.store = store
        self.runs = runs
        self.run_store = run_store
        self.scenarios = scenarios
        self.control = control
        self.owner = owner
        self.lease_s = lease_s
        self.now = now
        self.notify = notify
        self.deliveries = deliveries
        self._driving: dict[str, tuple[GamedayExecution, asyncio.Task[None]]] = {}
        self._closing = False

    async def start(
        self,
        document: object,
        *,
        trigger: Trigger,
        triggered_by: str,
        schedule_id: str | None = None,
        fire_time: datetime | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[Gameday, bool]:
        """Checks the suite whole, stores it and starts it here (True); for a schedule's fire handled already, or a
        request repeating an earlier one's idempotency key, the game day it started (False). Raises ``SuiteInvalid``
        naming each bad field, ``IdempotencyKeyReused`` for a key an other suite used, ``QuotaExceeded`` (an API
        caller at its queued runs or documents), ``EmergencyStopActive``, ``StoreUnavailable``."""
        try:
            suite = parse_suite(document)
        except ScenarioInvalid as exc:
            raise SuiteInvalid(exc.problems) from exc
        assert isinstance(document, Mapping)  # parse_suite refused anything else
        if self._closing:
            raise ServiceStopping("this instance is shutting down: it starts no game day")
        if idempotency_key is not None:  # a repeat is answered before anything is checked again, as a run's is
            earlier = await self.store.gameday_with_key(idempotency_key)
            if earlier is not None:
                if earlier.suite != shown_suite(document):
                    raise IdempotencyKeyReused(earlier.id, what="game day")
                return earlier, False
        if schedule_id is not None:
            running = await self.store.list_gamedays(limit=1, schedule_id=schedule_id, status=GamedayStatus.RUNNING)
            if running and running[0].fire_time != fire_time:
                raise GamedayOverlap(schedule_id, running[0].id)
        requests = await self._prepared(suite, trigger=trigger, triggered_by=triggered_by)
        now = self.now()
        gameday = Gameday(id=uuid.uuid4().hex[:12], name=suite.name, suite=shown_suite(document),
                          status=GamedayStatus.RUNNING, trigger=trigger, triggered_by=triggered_by, created_at=now,
                          experiments=tuple(_record(e) for e in suite.experiments), schedule_id=schedule_id,
                          fire_time=fire_time, owner=self.owner, idempotency_key=idempotency_key,
                          lease_until=now + timedelta(seconds=self.lease_s))  # fmt: skip
        stored, created = await self.store.create_gameday(gameday)
        if created:
            self._drive(stored, suite, requests)
            log.info("game day started", gameday_id=stored.id, suite=suite.name, trigger=trigger.value)
        return stored, created

    async def check(self, document: Mapping[str, Any], *, trigger: Trigger, triggered_by: str) -> None:
        """Raises ``SuiteInvalid`` naming each bad field of ``document`` as ``start`` would, storing and starting
        nothing (a schedule's suite is judged so when the schedule is stored, not first at its fire)."""
        try:
            suite = parse_suite(document)
        except ScenarioInvalid as exc:
            raise SuiteInvalid(exc.problems) from exc
        await self._prepared(suite, trigger=trigger, triggered_by=triggered_by)

    async def _prepared(self, suite: SuiteSpec, *, trigger: Trigger, triggered_by: str) -> dict[str, RunRequest]:
        """Each experiment's run request, every one checked as the run it will be, and the suite's webhooks judged
        (found now, not when the suite ends hours later); ``SuiteInvalid`` naming each bad field otherwise."""
        if self.notify is not None and suite.notify and (problems := await self.notify.problems(suite.notify)):
            raise SuiteInvalid(problems)
        requests = {}
        for index, experiment in enumerate(suite.experiments):
            request = await self._request(suite, index, experiment, trigger=trigger, triggered_by=triggered_by)
            await self._check(index, request, _url_field(suite, index, experiment), quotas=trigger is Trigger.API)
            requests[experiment.name] = request
        return requests

    async def get(self, gameday_id: str) -> Gameday:
        gameday = await self.store.get_gameday(gameday_id)
        if gameday is None:
            raise GamedayNotFound(gameday_id)
        if self.deliveries is None:
            return gameday
        told = await self.deliveries.list_deliveries(gameday_id=gameday_id)  # after its end (older ones: on its row)
        return replace(gameday, notifications=(*gameday.notifications, *(d.to_dict() for d in told)))

    async def latest(self, limit: int) -> list[Gameday]:
        return await self.store.list_gamedays(limit=limit)

    async def abort(self, gameday_id: str, reason: str) -> Gameday:
        """Stops a running game day: no experiment starts after this, the one running is aborted (at once when
        this instance drives it, else within a second or two). A finished one is returned as it is."""
        here = self._driving.get(gameday_id)
        if here is not None:
            here[0].stop(reason)
        gameday = await self.store.request_gameday_abort(gameday_id, reason)
        if gameday is None:
            raise GamedayNotFound(gameday_id)
        return gameday

    async def combined(self, gameday: Gameday, *, timeseries: bool = False) -> dict[str, Any]:
        """The combined document ``cliffwatch gameday --json`` writes, each experiment's result read from its
        run (null for one without; with its per-second rows when ``timeseries``, as a report draws them);
        ``verdict`` and ``summary`` null while the game day runs."""
        experiments = []
        for record in gameday.experiments:
            run = None if record.run_id is None else await self.run_store.get_run(record.run_id)
            result = None if run is None or run.result is None else dict(run.result)
            if result is not None and timeseries and run is not None:
                result["timeseries"] = [dict(row) for row in await self.run_store.timeseries(run.id)]
            shown = {k: v for k, v in record.to_dict().items() if k != "run_id"}
            experiments.append({**shown, "run_id": record.run_id, "result": result})
        return {"kind": "gameday", "name": gameday.name, "verdict": gameday.verdict, "summary": gameday.summary,
                "experiments": experiments, "notifications": [dict(n) for n in gameday.notifications]}  # fmt: skip

    async def recover(self, *, grace: timedelta) -> list[Gameday]:
        """Records as interrupted the game days whose driver stopped renewing its lease, and aborts the run each
        left in progress (queued, it would start with nothing watching it)."""
        expired = await self.store.expire_gameday_leases(self.now(), grace=grace)
        for gameday in expired:
            log.warning("game day interrupted: its instance stopped renewing the lease", gameday_id=gameday.id,
                        owner=gameday.owner)  # fmt: skip
            for record in gameday.experiments:
                if record.state is ExperimentState.RUNNING and record.run_id is not None:
                    try:  # each run on its own: one the store cannot reach now must not leave the rest running
                        await self.run_store.request_abort(record.run_id, f"its game day {gameday.id} was interrupted")
                    except CliffwatchError as exc:
                        log.error("could not abort an interrupted game day's run", gameday_id=gameday.id,
                                  run_id=record.run_id, error=str(exc))  # fmt: skip
        return expired

    async def shutdown(self) -> None:
        """Stops driving every game day here; each is recorded as interrupted (its running run is the worker's
        to interrupt)."""
        self._closing = True  # a schedule firing during the shutdown starts nothing it would leave behind
        tasks = [task for _, task in self._driving.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _drive(self, gameday: Gameday, suite: SuiteSpec, requests: Mapping[str, RunRequest]) -> None:
        execution = GamedayExecution(gameday=gameday, suite=suite, requests=requests, store=self.store,
                                     runs=self.runs, run_store=self.run_store, control=self.control, owner=self.owner,
                                     lease_s=self.lease_s, now=self.now, notify=self.notify,
                                     deliveries=self.deliveries)  # fmt: skip
        task = asyncio.create_task(self._run(gameday.id, execution), name=f"gameday-{gameday.id}")
        self._driving[gameday.id] = (execution, task)
        task.add_done_callback(lambda _: self._driving.pop(gameday.id, None))

    async def _run(self, gameday_id: str, execution: GamedayExecution) -> None:
        structlog.contextvars.bind_contextvars(gameday_id=gameday_id)
        try:
            await execution.run()
        except CliffwatchError as exc:  # the store, at its end: the lease lapses and recovery records it
            log.error("game day failed", gameday_id=gameday_id, error=str(exc))
        except Exception:  # a bug of ours: logged; the lease lapses and recovery records it as interrupted
            log.exception("game day crashed", gameday_id=gameday_id)

    async def _request(self, suite: SuiteSpec, index: int, experiment: ExperimentSpec, *, trigger: Trigger,
                       triggered_by: str) -> RunRequest:  # fmt: skip
        """The run request of one experiment: the suite's and its own target laid over its scenario's."""
        if experiment.inline is not None:
            document = with_target(experiment.inline, suite, experiment)
            return RunRequest(document=document, trigger=trigger, triggered_by=triggered_by)
        name = experiment.scenario or ""
        if "/" in name or name.endswith(_FILE_SUFFIXES):
            raise SuiteInvalid([Problem(path=f"experiments[{index}].scenario", message=NO_FILES)])
        overrides = target_overrides(suite, experiment)
        if set(overrides) <= {"url"}:
            asked = Overrides(target_url=overrides.get("url"))
            return RunRequest(scenario=name, overrides=asked, trigger=trigger, triggered_by=triggered_by)
        # More than the URL changes: the scenario's document, its credentials put back, with the targets laid over
        # (the catalog masks them again when it keeps it).
        version = await self.scenarios.latest_scenario(name)
        if version is None:
            raise SuiteInvalid([Problem(path=f"experiments[{index}].scenario", message=str(ScenarioNotFound(name)))])
        credentials = await self.scenarios.scenario_credentials(version.name, version.content_hash)
        document = restore(version.document, credentials)
        return RunRequest(document=with_target(document, suite, experiment), trigger=trigger, triggered_by=triggered_by)

    async def _check(self, index: int, request: RunRequest, url_field: str | None, *, quotas: bool) -> None:
        """Raises ``SuiteInvalid`` naming the experiment's field when its run would be refused (``url_field``: where
        the suite sets the target's URL, when it does); with ``quotas``, ``QuotaExceeded`` when the caller could
        not queue it now (one experiment is queued at a time, so each is judged alone)."""
        at = f"experiments[{index}]"
        try:
            await self.runs.check(request, quotas=quotas)
        except ScenarioNotFound as exc:
            raise SuiteInvalid([Problem(path=f"{at}.scenario", message=str(exc))]) from exc
        except TargetNotAllowed as exc:
            field = exc.field or "target.url"
            path = url_field if field == "target.url" and url_field is not None else f"{at}.scenario.{field}"
            raise SuiteInvalid([Problem(path=path, message=f"{exc.url} is not allowed: {exc.reason}")]) from exc
        except (ScenarioInvalid, RunRefused) as exc:
            problems = [Problem(path=_field(at, p.path), message=p.message) for p in exc.problems]
            raise SuiteInvalid(problems) from exc


def _record(experiment: ExperimentSpec) -> ExperimentRecord:
    return ExperimentRecord(name=experiment.name, scenario=experiment.scenario or "(inline)",
                            hypothesis=experiment.expect.describe())  # fmt: skip


def _field(experiment: str, path: str) -> str:
    """Where in the suite a problem of an experiment's run is: its target's URL (the suite's or its own, sent as
    the run's override), or a field of its scenario."""
    if path == "--target":
        return f"{experiment}.target.url"
    return f"{experiment}.scenario.{path}" if path else f"{experiment}.scenario"


def _url_field(suite: SuiteSpec, index: int, experiment: ExperimentSpec) -> str | None:
    """Where the suite sets an experiment's target URL: the experiment's own target, the suite's, or neither."""
    if experiment.target and "url" in experiment.target:
        return f"experiments[{index}].target.url"
    return "target.url" if suite.target and "url" in suite.target else None
