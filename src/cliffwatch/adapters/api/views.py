"""The JSON the API answers with: stored values → plain dicts, shaped as the OpenAPI document describes.

Nothing secret leaves here: token records lose their hash, and a token itself is only ever in the one
response that created it. Scenario documents are stored with their credentials masked (``domain.security.redaction``)
and shown as stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from cliffwatch.domain.gameday.shown_suite import shown_suite
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.security.masking import mask_url
from cliffwatch.domain.server.server_view import ServerView
from cliffwatch.domain.service.gamedays import Gameday
from cliffwatch.domain.service.runs import ApiToken, Overrides, Run, RunKind, ScenarioVersion, Schedule, StoredOutcome

API_PREFIX = "/api/v1"


def timestamp(at: datetime | None) -> str | None:
    """RFC 3339 with an offset; a naive value (as some databases hand back) is taken to be UTC."""
    if at is None:
        return None
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).isoformat()


def run_location(run_id: str) -> str:
    return f"{API_PREFIX}/runs/{run_id}"


def overrides_view(overrides: Overrides) -> dict[str, Any]:
    view = overrides.to_dict()
    if "target_url" in view:  # none is accepted with a password now; one stored before is still not shown
        view["target_url"] = mask_url(view["target_url"])
    return view


def run_view(run: Run) -> dict[str, Any]:
    """A run as lists show it: what was asked, where it stands, and its score once it has one."""
    return {
        "id": run.id,
        "scenario": run.scenario_name,
        "scenario_hash": run.scenario_hash,
        "status": run.status.value,
        "trigger": run.trigger.value,
        "triggered_by": run.triggered_by,
        "created_at": timestamp(run.created_at),
        "started_at": timestamp(run.started_at),
        "finished_at": timestamp(run.finished_at),
        "target_url": run.target_url,
        "seed": run.seed,
        "threshold": run.threshold,
        "overrides": overrides_view(run.overrides),
        "schedule_id": run.schedule_id,
        "fire_time": timestamp(run.fire_time),
        "abort_requested": run.abort_requested,
        "reason": run.reason,
        "score": run.score,
        "score_version": run.score_version,
        "passed": run.passed,
        "verdicts": list(run.verdicts),
        "kind": run.kind.value,
        "sweep": None if run.sweep is None else run.sweep.to_dict(),
        "usable_rps": run.usable_rps,
        "links": {
            "self": run_location(run.id),
            "timeseries": f"{run_location(run.id)}/timeseries",
            "outcomes": f"{run_location(run.id)}/outcomes",
            "server_metrics": f"{run_location(run.id)}/server-metrics",
        },
    }


def run_detail(run: Run) -> dict[str, Any]:
    """A run with what its result says: the phases, the score with its components, the verdicts explained.

    ``result`` is null until the run ends with one; the time series has its own endpoint. A sweep's result is
    its whole sweep document (docs/sweep.md): every step, every settled rate, the verdict per variant; while
    the sweep runs, the document of the steps so far, marked ``"provisional": true`` (``shown_result``).
    """
    view = run_view(run)
    if run.kind is RunKind.SWEEP:
        shown = shown_result(run)
        view["result"] = None if shown is None else dict(shown)
    else:
        view["result"] = None if run.result is None else _result_view(run.result)
    return view


def shown_result(run: Run) -> Mapping[str, Any] | None:
    """The document to show of a run: its result once it ended with one; for a sweep without one (running,
    or ended before its final document was written: its lease expired, say), the provisional document of the
    steps measured, with the run's own status and reason once it is no longer running."""
    if run.result is not None or run.kind is not RunKind.SWEEP or run.provisional_result is None:
        return run.result
    document = dict(run.provisional_result)
    if run.status is not RunStatus.RUNNING:
        document["status"], document["reason"] = run.status.value, run.reason
    return document


def _result_view(result: Mapping[str, Any]) -> dict[str, Any]:
    # The stored document is RunResult.to_dict() without its time series; only the parts the API promises
    # are passed on, so a new field in the result format does not silently become API.
    keys = ("started_at", "finished_at", "duration_s", "abort_reason", "score", "verdicts", "phases",
            "generator", "faults")  # fmt: skip
    view = {key: result.get(key) for key in keys}
    view["capped"] = bool(result.get("capped", False))  # documents from before the attempt cap were not
    # Results stored before prompt sizes were judged made no such claim: they read as no mismatch found.
    view["workload_mismatch"] = bool(result.get("workload_mismatch", False))
    view["workload_mismatch_reason"] = result.get("workload_mismatch_reason")
    view["cost"] = result.get("cost")  # None without target.cost (and for results stored before it)
    view["notes"] = list(result.get("notes") or ())
    view["prompt_tokens"] = result.get("prompt_tokens")  # results stored before it have none
    view["server_metrics"] = server_summary(result)
    view["classes"] = list(result.get("classes") or ())  # results stored before traffic classes have none
    view["conversations"] = result.get("conversations")  # None without sessions (or before them)
    return view


def server_summary(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the run scraped of the target's own metrics, without the values (its endpoint has those); None
    when the run scraped none (or its result is older than the field)."""
    document = result.get("server_metrics")
    if not isinstance(document, Mapping):
        return None
    return ServerView.from_dict(document).summary_dict()


def scenario_summary(version: ScenarioVersion) -> dict[str, Any]:
    description = version.document.get("description")
    return {
        "name": version.name,
        "content_hash": version.content_hash,
        "source": version.source.value,
        "created_at": timestamp(version.created_at),
        "description": description if isinstance(description, str) else "",
    }


def scenario_detail(version: ScenarioVersion) -> dict[str, Any]:
    return {**scenario_summary(version), "document": dict(version.document)}


def schedule_view(schedule: Schedule) -> dict[str, Any]:
    return {
        "id": schedule.id,
        "name": schedule.name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "scenario": schedule.scenario_name,
        "overrides": overrides_view(schedule.overrides),
        "enabled": schedule.enabled,
        "catch_up": schedule.catch_up.value,
        "created_at": timestamp(schedule.created_at),
        "created_by": schedule.created_by,
        "last_fire_time": timestamp(schedule.last_fire_time),
        "kind": schedule.kind.value,
        "sweep": None if schedule.sweep is None else schedule.sweep.to_dict(),
        "suite": None if schedule.suite is None else shown_suite(schedule.suite),
    }


def gameday_view(gameday: Gameday, *, with_suite: bool = True) -> dict[str, Any]:
    """A game day: where it stands, each experiment's run and hypothesis, its verdict once it has one; with
    ``with_suite`` (not in lists, where a page of whole suites could weigh hundreds of megabytes) the suite as it
    was sent, its credentials masked and its webhooks cut to their hosts."""
    here = f"{API_PREFIX}/gamedays/{gameday.id}"
    shown = {
        "id": gameday.id,
        "name": gameday.name,
        "status": gameday.status.value,
        "verdict": gameday.verdict,
        "summary": gameday.summary,
        "trigger": gameday.trigger.value,
        "triggered_by": gameday.triggered_by,
        "schedule_id": gameday.schedule_id,
        "fire_time": timestamp(gameday.fire_time),
        "created_at": timestamp(gameday.created_at),
        "finished_at": timestamp(gameday.finished_at),
        "abort_requested": gameday.abort_requested,
        "reason": gameday.reason,
        "experiments": [e.to_dict() for e in gameday.experiments],
        "notifications": [dict(n) for n in gameday.notifications],
        "links": {"self": here, "report": f"{here}/report"},
    }
    return {**shown, "suite": shown_suite(gameday.suite)} if with_suite else shown


def token_view(token: ApiToken) -> dict[str, Any]:
    """A token's record without its hash: enough to recognise and revoke it, nothing to use it."""
    return {
        "id": token.id,
        "name": token.name,
        "role": token.role.value,
        "created_at": timestamp(token.created_at),
        "revoked_at": timestamp(token.revoked_at),
    }


def outcome_view(outcome: StoredOutcome) -> dict[str, Any]:
    view = outcome.to_dict()
    del view["run_id"]  # the URL says which run
    return view
