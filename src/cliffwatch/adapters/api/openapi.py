"""The OpenAPI 3.1 document of the API, written by hand: every path, parameter, body, response and problem.

Each operation names the role it needs in ``x-required-role`` (absent: public); a test holds the route
table, the roles and this document together, validates real responses against it, and schemathesis
fuzzes the served app with it.
"""

from __future__ import annotations

import copy
from typing import Any

from cliffwatch import __version__
from cliffwatch.adapters.api import openapi_compare, openapi_gamedays
from cliffwatch.adapters.api.json_schema import DATE_TIME, Schema, ref, text
from cliffwatch.adapters.api.openapi_operations import RESPONSES, _json, _op, _param
from cliffwatch.adapters.api.openapi_schemas import SCHEMAS
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import RunKind
from cliffwatch.domain.service.trends import Bucket

RUN_ID = _param("run_id", "path", {"type": "string"}, "the run's id")
SCHEDULE_ID = _param("schedule_id", "path", {"type": "string"}, "the schedule's id")
# POST /runs queues a run, or with kind sweep a sweep (answered with its warnings, as POST /sweeps is).
QUEUED: Schema = {"oneOf": [ref("RunDetail"), ref("SweepQueued")]}
LOCATION = {"Location": {"description": "the run's URL", "schema": {"type": "string"}, "required": True}}
LINK = {"Link": {"description": 'the next page: <url>; rel="next" (absent on the last)', "schema": {"type": "string"}}}
REPORT_HEADERS = {
    "Content-Security-Policy": {"description": "inline scripts and styles only; nothing from the network",
                                "schema": {"type": "string"}, "required": True},
    "X-Content-Type-Options": {"description": "nosniff", "schema": {"const": "nosniff"}, "required": True},
}  # fmt: skip
EXPENSIVE = "Expensive: at most CLIFFWATCH_API_MAX_EXPENSIVE at once across these endpoints; beyond, 429."


def _runs_paths() -> dict[str, Any]:
    list_params = (
        _param("scenario", "query", text(100), "only runs of this scenario"),
        _param("status", "query", {"enum": [s.value for s in RunStatus]}, "only runs in this status"),
        _param("kind", "query", {"enum": [k.value for k in RunKind]}, "only runs, or only sweeps"),
        _param("schedule", "query", text(100), "only runs this schedule queued"),
        _param("since", "query", DATE_TIME, "created at or after (RFC 3339, with an offset)"),
        _param("until", "query", DATE_TIME, "created before"),
        _param("cursor", "query", text(500), "from the previous page's next_cursor"),
        _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}, "page size"),
    )
    idempotency = _param(
        "Idempotency-Key", "header", {"type": "string", "pattern": "^[\\x21-\\x7e]{1,200}$"},
        "repeat a request safely: the same key (per token) returns the run the first request queued",
    )  # fmt: skip
    return {
        "/api/v1/runs": {
            "post": _op(
                "Queue a run", tag="runs", role="operator", params=(idempotency,), body=ref("RunCreate"),
                ok={"202": _json(QUEUED, "Queued.", LOCATION),
                    "200": _json(QUEUED, "An idempotent repeat: the run the key queued.", LOCATION)},
                errors=(404, 503),
                description="A scenario by name or a whole document, with optional overrides. Refused with 422 "
                "when the document is invalid, the target is outside the allowlist (target-not-allowed) or the "
                "run's worst case is over the caps (run-refused: each problem's path is the field to change, its "
                "message the worst case and the cap); 429 quota-exceeded when the token already has its most "
                "queued runs or new scenario documents; 503 while the emergency stop is on. A refused request "
                "stores nothing. With kind sweep and sweep, queues a capacity sweep as POST /api/v1/sweeps does "
                "(answered with its warnings).",
            ),
            "get": _op("List runs, newest first", tag="runs", role="viewer", params=list_params,
                       ok={"200": _json(ref("RunPage"), "One page.", LINK)}),
        },
        "/api/v1/sweeps": {
            "post": _op(
                "Queue a capacity sweep", tag="runs", role="operator", params=(idempotency,), body=ref("SweepCreate"),
                ok={"202": _json(ref("SweepQueued"), "Queued: a run of kind sweep, with its warnings.", LOCATION),
                    "200": _json(ref("SweepQueued"), "An idempotent repeat: the sweep the key queued.", LOCATION)},
                errors=(404, 503),
                description="Finds the scenario target's usable capacity (docs/sweep.md). Refused with 422 "
                "sweep-invalid naming each sweep.… field, target-not-allowed as for runs, or run-refused when "
                "the sweep's highest step (stop, or max_rate with auto) is over the service's maximum offered "
                "rate (or, in concurrency mode, its maximum concurrency), a retry variant's attempts at that rate "
                "over the attempt cap, or its longest length (variants × (max_steps × (warmup_s + step_s + "
                "cooldown_s) + max_steps / 2 × (extend_s − step_s)) with the growth check, since at most every "
                "other step is an extended one, and one step more with the recheck) over its maximum duration; 429 "
                "as for runs. The sweep is then read at "
                "/api/v1/runs/{run_id}. warnings: what the sweep "
                "as asked should be warned about (steps too short for the SLO, say), as the CLI warns; the "
                "sweep document carries them too.",
            ),
        },
        "/api/v1/runs/{run_id}": {
            "get": _op("A run: status, phases, score with components, verdicts", tag="runs", role="viewer",
                       params=(RUN_ID,), ok={"200": _json(ref("RunDetail"), "The run.")}, errors=(404,)),
        },
        "/api/v1/runs/{run_id}/timeseries": {
            "get": _op("A run's per-second rows", tag="runs", role="viewer", params=(RUN_ID,),
                       ok={"200": _json(ref("Timeseries"), "Empty until the run ends.")}, errors=(404, 429),
                       description=EXPENSIVE),
        },
        "/api/v1/runs/{run_id}/notifications": {
            "get": _op("A run's webhook deliveries", tag="runs", role="viewer", params=(RUN_ID,),
                       ok={"200": _json(ref("RunNotifications"), "In the order made; empty until the run ends, and "
                                        "for a run whose scenario has no notify.")}, errors=(404,),
                       description="Each delivery of the run's (or sweep's) end to its scenario's webhooks, "
                       "delivered or not (docs/gamedays.md, Notifications): the webhook's scheme and host only, the "
                       "event, the format, ok, the HTTP status, the attempts, the error and when the last attempt "
                       "ended."),
        },
        "/api/v1/runs/{run_id}/server-metrics": {
            "get": _op("The target's own metrics a run scraped", tag="runs", role="viewer", params=(RUN_ID,),
                       ok={"200": _json(ref("ServerMetrics"), "null until the run ends, and for a run that "
                                        "scraped none (target.metrics).")}, errors=(404, 429),
                       description="Every series of the target's Prometheus page the run kept (an engine "
                       "profile's signals: waiting, running, kv_cache_usage, preemptions, generation_tokens, "
                       "prompt_tokens, queue_time; and the scenario's own), with when each scrape was taken in "
                       "seconds from the run's start, and the scrapes that failed by reason (docs/server-metrics.md). "
                       "The per-second rows of /timeseries carry the same series, averaged per second. " + EXPENSIVE),
        },
        "/api/v1/runs/{run_id}/outcomes": {
            "get": _op(
                "A run's requests, by request id", tag="runs", role="viewer", errors=(404, 429),
                params=(RUN_ID,
                        _param("after", "query", {"type": "integer", "minimum": 0, "maximum": 2**53},
                               "the page after this request id"),
                        _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                               "page size")),
                ok={"200": _json(ref("OutcomePage"), "One page; next_after is null on the last.", LINK)},
                description=EXPENSIVE,
            ),
        },
        "/api/v1/runs/{run_id}/report": {
            "get": _op(
                "A run's or sweep's HTML report", tag="runs", role="viewer", params=(RUN_ID,), errors=(404, 429),
                ok={"200": {"description": "One self-contained HTML page (scripts, styles and data inline; it "
                            "requests nothing): a run's verdict, score and charts over time, or a sweep's usable "
                            "capacity and charts against the offered rate. A run with no result yet gets a page "
                            "saying where it stands.",
                            "headers": REPORT_HEADERS,
                            "content": {"text/html": {"schema": {"type": "string"}}}}},
                description="Served with a Content-Security-Policy that allows inline scripts and styles only "
                "(no network, frames or forms) and X-Content-Type-Options: nosniff. " + EXPENSIVE,
            ),
        },
        "/api/v1/runs/{run_id}/abort": {
            "post": _op("Abort a run", tag="runs", role="operator", params=(RUN_ID,), body=ref("ReasonBody"),
                        body_optional=True, errors=(404, 503),
                        description="A run executing on the instance that answers stops at once, even while that "
                                    "instance's database is down (then the answer is the run as the instance holds "
                                    "it). 503 when the database is down and the run is not this instance's.",
                        ok={"200": _json(ref("RunDetail"), "A queued run is aborted at once; a running one is "
                                         "flagged and stops within seconds; a finished one is returned as it is.")}),
        },
        "/api/v1/trends": {
            "get": _op(
                "Score trends with regression flags", tag="runs", role="viewer", errors=(429,),
                params=(_param("scenario", "query", text(100), "one scenario"),
                        _param("target", "query", text(2000), "one target URL"),
                        _param("since", "query", DATE_TIME, "runs that ended at or after"),
                        _param("bucket", "query", {"enum": [b.value for b in Bucket], "default": "run"},
                               "one point per run, UTC day or ISO week")),
                ok={"200": _json(ref("Trends"), "One series per scenario, target and score version.")},
                description=EXPENSIVE,
            ),
        },
        "/api/v1/trends/capacity": {
            "get": _op(
                "Capacity trends from sweeps, with regression flags", tag="runs", role="viewer", errors=(429,),
                params=(_param("scenario", "query", text(100), "one scenario"),
                        _param("target", "query", text(2000), "one target URL"),
                        _param("since", "query", DATE_TIME, "sweeps that ended at or after")),
                ok={"200": _json(ref("CapacityTrends"), "One series per scenario, target, retry variant, mode "
                                 "and attainment target; a point per succeeded sweep.")},
                description=EXPENSIVE,
            ),
        },
    }  # fmt: skip


def _scenario_and_schedule_paths() -> dict[str, Any]:
    name = {
        **_param("name", "path", {"type": "string", "not": {"const": "validate"}},
                 "the scenario's name (validate is reserved for the validation endpoint)"),
        "example": "burst-storm",
    }  # fmt: skip
    schedule = (SCHEDULE_ID,)
    return {
        "/api/v1/scenarios": {
            "get": _op("Bundled and registered scenarios, latest versions", tag="scenarios", role="viewer",
                       ok={"200": _json(ref("ScenarioList"), "By name.")}),
        },
        "/api/v1/scenarios/validate": {
            "post": _op("Validate a scenario document", tag="scenarios", role="viewer",
                        body={"description": "any JSON value: what is not a scenario document is judged invalid"},
                        ok={"200": _json(ref("Validation"), "valid, and every problem when it is not.")}),
        },
        "/api/v1/scenarios/{name}": {
            "get": _op("A scenario's latest version, or one by hash", tag="scenarios", role="viewer", errors=(404,),
                       params=(name, _param("hash", "query", {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                                            "a version's content hash")),
                       ok={"200": _json(ref("ScenarioDetail"), "The version, with its document.")}),
            "put": _op("Register a scenario version", tag="scenarios", role="admin", params=(name,),
                       body=ref("ScenarioDocument"),
                       ok={"200": _json(ref("ScenarioDetail"), "Stored (an unchanged document keeps its version).")},
                       description="The document's name must be the path's; 422 scenario-invalid lists every "
                       "problem."),
        },
        "/api/v1/schedules": {
            "post": _op("Create a schedule", tag="schedules", role="admin", body=ref("ScheduleWrite"),
                        ok={"201": _json(ref("Schedule"), "Created.")}),
            "get": _op("Every schedule", tag="schedules", role="viewer",
                       ok={"200": _json(ref("ScheduleList"), "By name.")}),
        },
        "/api/v1/schedules/{schedule_id}": {
            "get": _op("A schedule", tag="schedules", role="viewer", params=schedule, errors=(404,),
                       ok={"200": _json(ref("Schedule"), "The schedule.")}),
            "put": _op("Replace a schedule", tag="schedules", role="admin", params=schedule, errors=(404,),
                       body=ref("ScheduleWrite"), ok={"200": _json(ref("Schedule"), "Replaced.")}),
            "delete": _op("Delete a schedule", tag="schedules", role="admin", params=schedule, errors=(404,),
                          ok={"204": {"description": "Deleted."}}),
        },
        "/api/v1/schedules/{schedule_id}/pause": {
            "post": _op("Pause a schedule", tag="schedules", role="admin", params=schedule, errors=(404,),
                        ok={"200": _json(ref("Schedule"), "Paused (enabled: false).")}),
        },
        "/api/v1/schedules/{schedule_id}/resume": {
            "post": _op("Resume a schedule", tag="schedules", role="admin", params=schedule, errors=(404,),
                        ok={"200": _json(ref("Schedule"), "Resumed (enabled: true).")}),
        },
        "/api/v1/schedules/{schedule_id}/next": {
            "get": _op("A schedule's next fire times", tag="schedules", role="viewer", errors=(404, 422),
                       params=(SCHEDULE_ID, _param("count", "query",
                                                   {"type": "integer", "minimum": 1, "maximum": 100, "default": 5},
                                                   "how many")),
                       ok={"200": _json(ref("FireTimes"), "In order, UTC.")}),
        },
    }  # fmt: skip


def _admin_and_ops_paths() -> dict[str, Any]:
    token_id = _param("token_id", "path", {"type": "string"}, "the token's id")
    return {
        "/api/v1/tokens": {
            "post": _op("Create a token (shown once)", tag="admin", role="admin", body=ref("TokenCreate"),
                        ok={"201": _json(ref("TokenCreated"), "The token is in this response only.")}),
            "get": _op("Every token's record (no secrets)", tag="admin", role="admin",
                       ok={"200": _json(ref("TokenList"), "Oldest first.")}),
        },
        "/api/v1/tokens/{token_id}": {
            "delete": _op("Revoke a token", tag="admin", role="admin", params=(token_id,), errors=(404,),
                          ok={"204": {"description": "Revoked."}}),
        },
        "/api/v1/stop-all": {
            "get": _op("The emergency stop's state", tag="admin", role="viewer",
                       ok={"200": _json(ref("StopState"), "active, and why.")}),
            "post": _op("Emergency stop: abort every run, refuse new ones", tag="admin", role="admin",
                        body=ref("ReasonBody"), body_optional=True, errors=(503,),
                        description="The runs of the instance that answers stop at once, database or not. When the "
                                    "database cannot record the stop for the other instances, 503 with the problem "
                                    "type emergency-stop-not-recorded and the runs stopped here (stopped_here); this "
                                    "instance then claims no run until the stop is recorded (retry) or released "
                                    "here.",
                        ok={"200": _json(ref("StopAll"), "On; the runs it aborted.")}),
            "delete": _op("Release the emergency stop", tag="admin", role="admin",
                          ok={"200": _json(ref("StopState"), "Off.")}),
        },
        "/api/v1/openapi.json": {
            "get": _op("This document", tag="ops", role="viewer",
                       ok={"200": _json({"type": "object"}, "OpenAPI 3.1.")}),
        },
        "/healthz": {
            "get": _op("Liveness: 200 while the process serves", tag="ops", role=None,
                       ok={"200": _json(ref("Health"), "Alive.")}),
        },
        "/readyz": {
            "get": _op("Readiness: the database reachable and migrations current", tag="ops", role=None,
                       errors=(503,), ok={"200": _json(ref("Ready"), "Ready.")}),
        },
        "/metrics": {
            "get": _op("Prometheus metrics", tag="ops", role="viewer",
                       ok={"200": {"description": "The text exposition format 0.0.4.",
                                   "content": {"text/plain": {"schema": {"type": "string"}}}}}),
        },
    }  # fmt: skip


OPERATION_IDS = {
    "POST /api/v1/runs": "createRun", "GET /api/v1/runs": "listRuns", "GET /api/v1/runs/{run_id}": "getRun",
    "GET /api/v1/runs/{run_id}/notifications": "getRunNotifications",
    "GET /api/v1/runs/{run_id}/timeseries": "getRunTimeseries", "GET /api/v1/runs/{run_id}/outcomes": "listRunOutcomes",
    "GET /api/v1/runs/{run_id}/report": "getRunReport",
    "GET /api/v1/runs/{run_id}/server-metrics": "getRunServerMetrics",
    "POST /api/v1/runs/{run_id}/abort": "abortRun", "GET /api/v1/trends": "getTrends",
    "POST /api/v1/sweeps": "createSweep", "GET /api/v1/trends/capacity": "getCapacityTrends",
    "GET /api/v1/scenarios": "listScenarios", "POST /api/v1/scenarios/validate": "validateScenario",
    "GET /api/v1/scenarios/{name}": "getScenario", "PUT /api/v1/scenarios/{name}": "registerScenario",
    "POST /api/v1/schedules": "createSchedule", "GET /api/v1/schedules": "listSchedules",
    "GET /api/v1/schedules/{schedule_id}": "getSchedule", "PUT /api/v1/schedules/{schedule_id}": "replaceSchedule",
    "DELETE /api/v1/schedules/{schedule_id}": "deleteSchedule",
    "POST /api/v1/schedules/{schedule_id}/pause": "pauseSchedule",
    "POST /api/v1/schedules/{schedule_id}/resume": "resumeSchedule",
    "GET /api/v1/schedules/{schedule_id}/next": "getNextFireTimes", "POST /api/v1/tokens": "createToken",
    "GET /api/v1/tokens": "listTokens", "DELETE /api/v1/tokens/{token_id}": "revokeToken",
    "GET /api/v1/stop-all": "getEmergencyStop", "POST /api/v1/stop-all": "stopAll",
    "DELETE /api/v1/stop-all": "releaseEmergencyStop", "GET /api/v1/openapi.json": "getOpenApi",
    "GET /healthz": "liveness", "GET /readyz": "readiness", "GET /metrics": "metrics",
    **openapi_gamedays.OPERATION_IDS,
    **openapi_compare.OPERATION_IDS,
}  # fmt: skip
# What a created resource's id leads to (OpenAPI links: clients and schemathesis follow them).
LINKS: dict[tuple[str, tuple[str, ...]], tuple[str, tuple[str, ...]]] = {
    ("POST /api/v1/runs", ("202", "200")): (
        "run_id",
        (
            "getRun",
            "getRunTimeseries",
            "listRunOutcomes",
            "getRunServerMetrics",
            "getRunReport",
            "getRunNotifications",
            "abortRun",
        ),
    ),
    ("POST /api/v1/sweeps", ("202", "200")): ("run_id", ("getRun", "getRunReport", "getRunNotifications", "abortRun")),
    ("POST /api/v1/schedules", ("201",)): (
        "schedule_id",
        ("getSchedule", "replaceSchedule", "pauseSchedule", "resumeSchedule", "getNextFireTimes", "deleteSchedule"),
    ),
    ("POST /api/v1/tokens", ("201",)): ("token_id", ("revokeToken",)),
    **openapi_gamedays.LINKS,
}


def _identify(paths: dict[str, Any]) -> dict[str, Any]:
    """Gives every operation its id and the created resources their links."""
    for path, item in paths.items():
        for method, operation in item.items():
            operation["operationId"] = OPERATION_IDS[f"{method.upper()} {path}"]
    for (operation_name, statuses), (parameter, targets) in LINKS.items():
        method, path = operation_name.split(" ", 1)
        for status in statuses:
            paths[path][method.lower()]["responses"][status]["links"] = {
                target[0].upper() + target[1:]: {"operationId": target, "parameters": {parameter: "$response.body#/id"}}
                for target in targets
            }
    return paths


def openapi_document() -> dict[str, Any]:
    """The whole document, a fresh copy each call."""
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "info": {
            "title": "cliffwatch",
            "version": __version__,
            "description": "Runs chaos and burst scenarios against LLM APIs and measures goodput. Errors are "
            "RFC 9457 problem details; see docs/api.md.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "tags": [{"name": n} for n in ("runs", "gamedays", "scenarios", "schedules", "admin", "ops")],
        "paths": _identify(
            {
                **_runs_paths(),
                **openapi_compare.compare_paths(EXPENSIVE),
                **openapi_gamedays.gameday_paths(REPORT_HEADERS, EXPENSIVE),
                **_scenario_and_schedule_paths(),
                **_admin_and_ops_paths(),
            }
        ),
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "an API token"}},
            "schemas": copy.deepcopy({**SCHEMAS, **openapi_gamedays.SCHEMAS, **openapi_compare.SCHEMAS}),
            "responses": copy.deepcopy(RESPONSES),
        },
    }
