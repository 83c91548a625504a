"""Telling a service run's or sweep's webhooks (its scenario's ``notify:``) how it ended, and recording each
delivery in the store (``DeliveryStore``).

The worker hands a run over once its end is stored; the telling then runs in a task of its own, so a slow or
dead webhook (three tries, ten seconds each) never delays the run's recording, its lease or the next claim. A
crash between the end being stored and the webhooks being told loses that notification: the run's record is
what must survive, and a notification is not retried after a restart. Nothing here raises: a delivery that
fails, or a store that cannot record it, is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import structlog

from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.gameday_ports import DeliveryStore
from cliffwatch.domain.results.notices import run_events, run_notice, stored_summary, sweep_events, sweep_notice
from cliffwatch.domain.scenario.notify_spec import RUN_DEFAULTS, SWEEP_DEFAULTS, Delivery
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.service.runs import Run, RunEnd, RunKind
from cliffwatch.services.ports import Notifier

log = structlog.get_logger(__name__)


class RunNotices:
    def __init__(self, *, notify: Notifier, deliveries: DeliveryStore) -> None:
        self.notify = notify
        self.deliveries = deliveries
        self._telling: set[asyncio.Task[None]] = set()

    def ended(self, run: Run, scenario: Scenario, end: RunEnd) -> None:
        """Starts telling the scenario's webhooks of ``end`` (already stored), in a task of its own."""
        if not scenario.notify:
            return
        if run.kind is RunKind.SWEEP:
            events: Sequence[str] = sweep_events(end.status)
            defaults: Sequence[str] = SWEEP_DEFAULTS
            notice = sweep_notice(sweep_id=run.id, scenario=run.scenario_name, status=end.status, reason=end.reason,
                                  document=end.result)  # fmt: skip
        else:
            events, defaults = run_events(end.status, end.passed), RUN_DEFAULTS
            notice = run_notice(run_id=run.id, scenario=run.scenario_name, status=end.status, passed=end.passed,
                                score=end.score, threshold=run.threshold, verdicts=end.verdicts,
                                summary=stored_summary(end.status, end.result, end.reason),
                                target_url=run.target_url)  # fmt: skip
        if not events:
            return
        task = asyncio.create_task(self._tell(run.id, scenario, events, notice, defaults), name=f"notify-{run.id}")
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)

    async def drain(self, timeout_s: float) -> None:
        """Waits up to ``timeout_s`` for the deliveries under way (a shutdown), then gives up on the rest."""
        tasks = list(self._telling)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*pending, return_exceptions=True)

    async def _tell(self, run_id: str, scenario: Scenario, events: Sequence[str], notice: dict[str, Any],
                    defaults: Sequence[str]) -> None:  # fmt: skip
        found: list[Delivery] = []
        try:
            for event in events:
                found += await self.notify(scenario.notify, event, notice, defaults=defaults)
        except Exception:  # a bug of ours: the run is stored and stays as it is
            log.exception("could not tell a run's webhooks", run_id=run_id)
        try:
            await self.deliveries.add_deliveries(found, run_id=run_id)
        except CliffwatchError as exc:
            log.warning("could not record a run's webhook deliveries", run_id=run_id, error=str(exc),
                        deliveries=[d.to_dict() for d in found])  # fmt: skip
