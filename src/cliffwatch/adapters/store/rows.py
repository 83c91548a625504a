"""Values to table rows and back: runs, outcomes, scenario versions, schedules, tokens, and the phase and
per-second rows taken out of a run's result.

The result document is produced by cliffwatch itself but read back across versions, so the phase and
second rows are taken from it defensively: a missing or mistyped number is stored as NULL (or 0 for a
count), never a reason to lose a run's end.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sqlalchemy import RowMapping

from cliffwatch.domain.capacity.sweep_spec import SweepSpec, parse_sweep_spec
from cliffwatch.domain.outcomes import OUTCOMES
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import (
    ApiToken,
    CatchUp,
    Overrides,
    Run,
    RunEnd,
    RunKind,
    ScenarioSource,
    ScenarioVersion,
    Schedule,
    StoredOutcome,
    TokenRole,
    Trigger,
)
from cliffwatch.services.store_values import plain_json, result_document


def run_row(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "scenario_name": run.scenario_name,
        "scenario_hash": run.scenario_hash,
        "status": run.status.value,
        "trigger": run.trigger.value,
        "triggered_by": run.triggered_by,
        "created_at": run.created_at,
        "target_url": run.target_url,
        "seed": run.seed,
        "threshold": run.threshold,
        "overrides": run.overrides.to_dict(),
        "schedule_id": run.schedule_id,
        "fire_time": run.fire_time,
        "idempotency_key": run.idempotency_key,
        "owner": run.owner,
        "lease_until": run.lease_until,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "abort_requested": run.abort_requested,
        "reason": run.reason,
        "score": run.score,
        "score_version": run.score_version,
        "passed": run.passed,
        "verdicts": list(run.verdicts),
        "result": result_document(run.result),
        "kind": run.kind.value,
        "sweep": sweep_value(run.sweep),
        "usable_rps": run.usable_rps,
        "provisional_result": result_document(run.provisional_result),
    }


def sweep_value(spec: SweepSpec | None) -> dict[str, Any] | None:
    return None if spec is None else spec.to_dict()


def sweep_of(value: Mapping[str, Any] | None) -> SweepSpec | None:
    """The stored parameters back as a ``SweepSpec`` (they were valid when stored: they parse again)."""
    return None if value is None else parse_sweep_spec(value)


def end_values(end: RunEnd) -> dict[str, Any]:
    """The columns of ``runs`` that ``finish_run`` sets."""
    return {
        "status": end.status.value,
        "finished_at": end.finished_at,
        "reason": end.reason,
        "score": end.score,
        "score_version": end.score_version,
        "passed": end.passed,
        "verdicts": list(end.verdicts),
        "result": result_document(end.result),
        "usable_rps": end.usable_rps,
        # a final result replaces the provisional one; an end without one keeps what was measured
        **({"provisional_result": None} if end.result is not None else {}),
    }


def run_of(row: RowMapping) -> Run:
    return Run(
        id=row["id"],
        scenario_name=row["scenario_name"],
        scenario_hash=row["scenario_hash"],
        status=RunStatus(row["status"]),
        trigger=Trigger(row["trigger"]),
        triggered_by=row["triggered_by"],
        created_at=row["created_at"],
        target_url=row["target_url"],
        seed=row["seed"],
        threshold=row["threshold"],
        overrides=Overrides.from_dict(row["overrides"]),
        schedule_id=row["schedule_id"],
        fire_time=row["fire_time"],
        idempotency_key=row["idempotency_key"],
        owner=row["owner"],
        lease_until=row["lease_until"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        abort_requested=row["abort_requested"],
        reason=row["reason"],
        score=row["score"],
        score_version=row["score_version"],
        passed=row["passed"],
        verdicts=tuple(row["verdicts"]),
        result=row["result"],
        kind=RunKind(row["kind"]),
        sweep=sweep_of(row["sweep"]),
        usable_rps=row["usable_rps"],
        provisional_result=row["provisional_result"],
    )


def phase_rows(run_id: str, result: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One row per phase of the result document (``RunResult.to_dict()["phases"]``)."""
    phases = (result or {}).get("phases")
    if not isinstance(phases, list):
        return []
    rows = []
    for index, phase in enumerate(p for p in phases if isinstance(p, Mapping)):
        outcomes = _mapping(phase.get("outcomes"))
        latency = _mapping(phase.get("latency_ms"))
        e2e, ttft = _mapping(latency.get("e2e")), _mapping(latency.get("ttft"))
        rows.append(
            {
                "run_id": run_id,
                "phase": index,
                "name": str(phase.get("name", "")),
                "role": str(phase.get("role", "")),
                "offered": _count(phase.get("offered")),
                "sent": _count(phase.get("sent")),
                **{o.value: _count(outcomes.get(o.value)) for o in OUTCOMES},
                "on_time_ratio": _number(phase.get("on_time_ratio")),
                "offered_rps": _number(phase.get("offered_rps")),
                "goodput_rps": _number(phase.get("goodput_rps")),
                "tokens_per_s": _number(phase.get("output_tokens_per_s")),
                "amplification": _number(phase.get("amplification")),
                "e2e_p50_ms": _number(e2e.get("p50")),
                "e2e_p99_ms": _number(e2e.get("p99")),
                "ttft_p50_ms": _number(ttft.get("p50")),
                "ttft_p99_ms": _number(ttft.get("p99")),
            }
        )
    return rows


def second_rows(run_id: str, timeseries: tuple[Mapping[str, Any], ...]) -> list[dict[str, Any]]:
    """One row per second of the time series (``RunResult.to_dict()["timeseries"]``), the whole row kept."""
    return [
        {
            "run_id": run_id,
            "t": _count(row.get("t")),
            "offered": _count(row.get("offered")),
            "attempts": _count(row.get("attempts")),
            "completions": _count(row.get("completions")),
            "on_time_completions": _count(row.get("on_time_completions")),
            "in_flight": _number(row.get("in_flight")) or 0.0,
            "output_tokens": _number(row.get("output_tokens")) or 0.0,
            **{o.value: _count(row.get(o.value)) for o in OUTCOMES},
            "e2e_p99_ms": _number(row.get("e2e_p99_ms")),
            "ttft_p99_ms": _number(row.get("ttft_p99_ms")),
            "row": dict(row),
        }
        for row in timeseries
    ]


def outcome_of(row: RowMapping) -> StoredOutcome:
    return StoredOutcome(
        run_id=row["run_id"],
        request_id=row["request_id"],
        phase=row["phase"],
        scheduled_ms=row["scheduled_ms"],
        outcome=row["outcome"],
        attempts=row["attempts"],
        status=row["status"],
        error=row["error"],
        e2e_ms=row["e2e_ms"],
        ttft_ms=row["ttft_ms"],
        tpot_ms=row["tpot_ms"],
        output_tokens=row["output_tokens"],
        token_source=row["token_source"],
        schedule_lag_ms=row["schedule_lag_ms"],
        attempt_log=tuple(row["attempt_log"]),
        traffic_class=row["traffic_class"],
        conversation=row["conversation"],
        turn=row["turn"],
    )


def scenario_of(row: RowMapping) -> ScenarioVersion:
    return ScenarioVersion(
        name=row["name"],
        content_hash=row["content_hash"],
        document=row["document"],
        source=ScenarioSource(row["source"]),
        created_at=row["created_at"],
    )


def schedule_row(schedule: Schedule) -> dict[str, Any]:
    return {
        "id": schedule.id,
        "name": schedule.name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "scenario_name": schedule.scenario_name,
        "overrides": schedule.overrides.to_dict(),
        "enabled": schedule.enabled,
        "catch_up": schedule.catch_up.value,
        "created_at": schedule.created_at,
        "created_by": schedule.created_by,
        "last_fire_time": schedule.last_fire_time,
        "kind": schedule.kind.value,
        "sweep": sweep_value(schedule.sweep),
        "suite": None if schedule.suite is None else plain_json(schedule.suite),
    }


def schedule_of(row: RowMapping) -> Schedule:
    return Schedule(
        id=row["id"],
        name=row["name"],
        cron=row["cron"],
        timezone=row["timezone"],
        scenario_name=row["scenario_name"],
        overrides=Overrides.from_dict(row["overrides"]),
        enabled=row["enabled"],
        catch_up=CatchUp(row["catch_up"]),
        created_at=row["created_at"],
        created_by=row["created_by"],
        last_fire_time=row["last_fire_time"],
        kind=RunKind(row["kind"]),
        sweep=sweep_of(row["sweep"]),
        suite=row["suite"],
    )


def token_row(token: ApiToken) -> dict[str, Any]:
    return {
        "id": token.id,
        "name": token.name,
        "role": token.role.value,
        "token_hash": token.token_hash,
        "created_at": token.created_at,
        "revoked_at": token.revoked_at,
    }


def token_of(row: RowMapping) -> ApiToken:
    return ApiToken(
        id=row["id"],
        name=row["name"],
        role=TokenRole(row["role"]),
        token_hash=row["token_hash"],
        created_at=row["created_at"],
        revoked_at=row["revoked_at"],
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    """A finite number, or None (booleans are not numbers here, whatever Python says)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _count(value: Any) -> int:
    number = _number(value)
    return 0 if number is None else int(number)
