"""What the run page charts: the report's chart specs (``report.charts.run_charts``), from the stored time
series of a finished run, or, while a run is in progress, from the outcomes recorded so far.

A running run has no time series yet (the worker stores it when the run ends), but its finished requests
reach the store every second. Each is counted in the second it was scheduled, as the report's rows count
them, so the live charts are the final ones with the seconds still in flight missing; what cannot be known
from outcomes alone (attempts in flight) is left empty. The page says the charts are provisional.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from cliffwatch.adapters.report.charts import run_charts
from cliffwatch.domain.outcomes import OUTCOMES
from cliffwatch.domain.ports import RunStore
from cliffwatch.domain.service.runs import Run, StoredOutcome

MAX_LIVE_OUTCOMES = 20_000  # beyond this a live chart is cut short (the final one has everything)
_PAGE = 5_000  # pages of the store read (the store reads 5,000 in ~0.1 s on SQLite)
_PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]  # nearest rank


def rows_from_outcomes(outcomes: Sequence[StoredOutcome]) -> list[dict[str, Any]]:
    """Per-second rows (the report's keys) from outcomes, by the second each request was scheduled in."""
    seconds: dict[int, list[StoredOutcome]] = {}
    for outcome in outcomes:
        seconds.setdefault(int(outcome.scheduled_ms // 1_000), []).append(outcome)
    rows = []
    for t in range(max(seconds) + 1 if seconds else 0):
        members = seconds.get(t, [])
        row: dict[str, Any] = {"t": t, "offered": len(members), "in_flight": None}
        for kind in OUTCOMES:
            row[kind.value] = sum(1 for o in members if o.outcome == kind.value)
        row["on_time_completions"] = row["on_time"]
        row["output_tokens"] = sum(o.output_tokens for o in members)
        row["attempts"] = sum(o.attempts for o in members)
        row["retries"] = sum(max(0, o.attempts - 1) for o in members)
        for key in ("ttft", "e2e"):
            values = [v for o in members if (v := getattr(o, f"{key}_ms")) is not None]
            for name, q in _PERCENTILES:
                row[f"{key}_{name}_ms"] = _percentile(values, q)
        rows.append(row)
    return rows


async def recorded_outcomes(store: RunStore, run_id: str) -> tuple[list[StoredOutcome], bool]:
    """The run's outcomes so far (at most ``MAX_LIVE_OUTCOMES``), and whether there were more."""
    found: list[StoredOutcome] = []
    after: int | None = None
    while len(found) < MAX_LIVE_OUTCOMES:
        page = await store.list_outcomes(run_id, after=after, limit=_PAGE)
        found.extend(page)
        if len(page) < _PAGE:
            return found, False
        after = page[-1].request_id
    return found, True


def planned_phases(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The phases of a scenario document with their planned windows, for the bands of a live chart."""
    phases, at = [], 0.0
    for phase in document.get("phases") or []:
        if not isinstance(phase, Mapping):
            continue
        length = phase.get("duration_s")
        length = float(length) if isinstance(length, int | float) and not isinstance(length, bool) else 0.0
        phases.append({"name": str(phase.get("name", "")), "role": str(phase.get("role", "")),
                       "planned_start_s": at, "planned_end_s": at + length})  # fmt: skip
        at += length
    return phases


async def chart_data(store: RunStore, run: Run, scenario_document: Mapping[str, Any]) -> dict[str, Any] | None:
    """The chart specs of ``run`` (``CliffwatchCharts.render``'s data) with ``provisional`` and ``truncated``
    flags; None for a sweep (its charts are the sweep report's) or a run with nothing recorded yet."""
    if run.kind.value != "run":
        return None
    result = run.result or {}
    slo = scenario_document.get("slo")
    slo = slo if isinstance(slo, Mapping) else {}
    rows: Sequence[Mapping[str, Any]] = list(await store.timeseries(run.id)) if run.result is not None else []
    truncated, provisional = False, not rows
    if provisional:
        outcomes, truncated = await recorded_outcomes(store, run.id)
        rows = rows_from_outcomes(outcomes)
    if not rows:
        return None
    stored_phases = result.get("phases")
    phases: Sequence[Mapping[str, Any]] = (
        stored_phases if isinstance(stored_phases, list) else planned_phases(scenario_document)
    )
    duration = result.get("duration_s")
    chart_set = run_charts(rows, slo=slo, phases=phases, faults=list(result.get("faults") or []),
                           duration_s=float(duration) if isinstance(duration, int | float) else None)  # fmt: skip
    return {"kind": "run", "run_id": run.id, "provisional": provisional, "truncated": truncated,
            **chart_set.to_dict()}  # fmt: skip
