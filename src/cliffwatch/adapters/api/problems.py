"""RFC 9457 problem details: the API's own errors, the table mapping cliffwatch's errors to HTTP, and the
response every error becomes (``application/problem+json``).

Each problem has a ``type`` (a tag URI: an identifier, not a page to fetch), a ``title`` fixed per type, the
``status``, a ``detail`` built from the facts of this occurrence, the ``instance`` (the request path) and
the ``request_id`` to quote in a report. Validation problems add ``problems``: every ``{path, message}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from cliffwatch.config import SettingsInvalid
from cliffwatch.domain.errors import (
    BuiltinTargetFailed,
    CliffwatchError,
    CompareRefused,
    EmergencyStopActive,
    EmergencyStopNotRecorded,
    FaultInjectionFailed,
    GamedayNotFound,
    GamedayOverlap,
    IdempotencyKeyReused,
    Problem,
    QuotaExceeded,
    RunNotFound,
    RunRefused,
    ScenarioInvalid,
    ScenarioNotFound,
    ScheduleInvalid,
    ScheduleNotFound,
    ServiceStopping,
    StoreUnavailable,
    SuiteInvalid,
    SweepInvalid,
    TargetConfigInvalid,
    TargetNotAllowed,
    TargetUnreachable,
    WorkersFailed,
)
from cliffwatch.domain.traffic.rate_limit import retry_after_s

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "tag:cliffwatch.dev,2026:problem:"
STORE_RETRY_AFTER_S = 5
EMERGENCY_RETRY_AFTER_S = 60  # nobody knows when an admin releases the stop; a minute keeps pollers polite
# ``with_overrides`` names the command line's flags; through the API the same values are body fields.
_OVERRIDE_PATHS = {"--target": "overrides.target_url", "--seed": "overrides.seed", "--threshold": "overrides.threshold"}


class ApiError(Exception):
    """An error the API answers with a problem: its status, type slug, title, detail and extensions."""

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        extensions: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.title = title
        self.detail = detail
        self.headers = dict(headers or {})
        self.extensions = dict(extensions or {})


def invalid(status: int, slug: str, title: str, problems: Sequence[Problem], what: str) -> ApiError:
    """A validation failure listing every problem; ``what`` names the thing that was invalid."""
    listed = "; ".join(str(p) for p in problems[:5]) + ("; …" if len(problems) > 5 else "")
    return ApiError(
        status,
        slug,
        title,
        f"{what} has {len(problems)} problem(s): {listed}",
        extensions={"problems": [{"path": p.path, "message": p.message} for p in problems]},
    )


def query_invalid(problems: Sequence[Problem]) -> ApiError:
    return invalid(400, "query-invalid", "Invalid query parameters", problems, "the query")


def body_invalid(problems: Sequence[Problem]) -> ApiError:
    return invalid(422, "body-invalid", "Invalid request body", problems, "the request body")


def not_found(detail: str) -> ApiError:
    return ApiError(404, "not-found", "Not found", detail)


@dataclass(frozen=True, kw_only=True)
class _Mapping:
    status: int
    slug: str
    title: str
    extend: Callable[[Any], ApiError] | None = None  # builds the problem when the message alone is not enough


def _scenario_invalid(exc: ScenarioInvalid) -> ApiError:
    problems = [Problem(path=_OVERRIDE_PATHS.get(p.path, p.path), message=p.message) for p in exc.problems]
    return invalid(422, "scenario-invalid", "Invalid scenario", problems, "the scenario")


def _sweep_invalid(exc: SweepInvalid) -> ApiError:
    return invalid(422, "sweep-invalid", "Invalid sweep", exc.problems, "the sweep")


def _suite_invalid(exc: SuiteInvalid) -> ApiError:
    return invalid(422, "suite-invalid", "Invalid suite", exc.problems, "the suite")


def _target_config_invalid(exc: TargetConfigInvalid) -> ApiError:
    return invalid(422, "target-config-invalid", "Invalid built-in target", exc.problems, "the built-in target")


def _target_not_allowed(exc: TargetNotAllowed) -> ApiError:
    extensions = {"target": exc.url, "reason": exc.reason} | ({} if exc.field is None else {"field": exc.field})
    return ApiError(422, "target-not-allowed", "Target not allowed", str(exc), extensions=extensions)


def _schedule_invalid(exc: ScheduleInvalid) -> ApiError:
    # The service names the scenario field as the Schedule value does; the API's body calls it "scenario".
    problems = [Problem(path="scenario" if p.path == "scenario_name" else p.path, message=p.message)
                for p in exc.problems]  # fmt: skip
    return invalid(422, "schedule-invalid", "Invalid schedule", problems, "the schedule")


def _compare_refused(exc: CompareRefused) -> ApiError:
    return ApiError(422, "compare-refused", "Cannot compare", str(exc), extensions={"reasons": list(exc.reasons)})


def _run_refused(exc: RunRefused) -> ApiError:
    return invalid(422, "run-refused", "Run refused", exc.problems, "the run")


def _quota_exceeded(exc: QuotaExceeded) -> ApiError:
    return ApiError(
        429,
        "quota-exceeded",
        "Quota reached",
        str(exc),
        headers={"Retry-After": str(retry_after_s(exc.retry_after_s))},
        extensions={"quota": exc.what, "limit": exc.limit},
    )


def _emergency_stop(exc: EmergencyStopActive) -> ApiError:
    return ApiError(
        503,
        "emergency-stop",
        "Emergency stop active",
        str(exc),
        headers={"Retry-After": str(EMERGENCY_RETRY_AFTER_S)},
        extensions={"reason": exc.reason},
    )


def _store_unavailable(exc: StoreUnavailable) -> ApiError:
    # The database's address and the driver's words are for the log (the middleware logs every 5xx), not
    # for API clients.
    return ApiError(
        503,
        "store-unavailable",
        "Database unavailable",
        "the database is not answering; retry shortly",
        headers={"Retry-After": str(STORE_RETRY_AFTER_S)},
    )


def _stop_not_recorded(exc: EmergencyStopNotRecorded) -> ApiError:
    return ApiError(
        503,
        "emergency-stop-not-recorded",
        "Emergency stop not recorded",
        str(exc),
        headers={"Retry-After": str(STORE_RETRY_AFTER_S)},
        extensions={"stopped_here": list(exc.stopped_here)},
    )


# Every error in domain/errors.py (and the settings'), with its status; a test holds the table complete.
ERRORS: dict[type[CliffwatchError], _Mapping] = {
    ScenarioInvalid: _Mapping(status=422, slug="scenario-invalid", title="Invalid scenario", extend=_scenario_invalid),
    SweepInvalid: _Mapping(status=422, slug="sweep-invalid", title="Invalid sweep", extend=_sweep_invalid),
    SuiteInvalid: _Mapping(status=422, slug="suite-invalid", title="Invalid suite", extend=_suite_invalid),
    TargetConfigInvalid: _Mapping(
        status=422, slug="target-config-invalid", title="Invalid built-in target", extend=_target_config_invalid
    ),
    TargetNotAllowed: _Mapping(
        status=422, slug="target-not-allowed", title="Target not allowed", extend=_target_not_allowed
    ),
    RunRefused: _Mapping(status=422, slug="run-refused", title="Run refused", extend=_run_refused),
    CompareRefused: _Mapping(status=422, slug="compare-refused", title="Cannot compare", extend=_compare_refused),
    IdempotencyKeyReused: _Mapping(status=422, slug="idempotency-key-reused", title="Idempotency key reused"),
    QuotaExceeded: _Mapping(status=429, slug="quota-exceeded", title="Quota reached", extend=_quota_exceeded),
    EmergencyStopActive: _Mapping(
        status=503, slug="emergency-stop", title="Emergency stop active", extend=_emergency_stop
    ),
    ScheduleInvalid: _Mapping(status=422, slug="schedule-invalid", title="Invalid schedule", extend=_schedule_invalid),
    ScheduleNotFound: _Mapping(status=404, slug="schedule-not-found", title="Schedule not found"),
    RunNotFound: _Mapping(status=404, slug="run-not-found", title="Run not found"),
    GamedayNotFound: _Mapping(status=404, slug="gameday-not-found", title="Game day not found"),
    GamedayOverlap: _Mapping(status=422, slug="gameday-overlap", title="Game day still running"),  # schedules only
    ServiceStopping: _Mapping(status=503, slug="service-stopping", title="Service shutting down"),
    ScenarioNotFound: _Mapping(status=404, slug="scenario-not-found", title="Scenario not found"),
    StoreUnavailable: _Mapping(
        status=503, slug="store-unavailable", title="Database unavailable", extend=_store_unavailable
    ),
    EmergencyStopNotRecorded: _Mapping(
        status=503, slug="emergency-stop-not-recorded", title="Emergency stop not recorded", extend=_stop_not_recorded
    ),
    # The API never runs anything itself, but the worker's errors may surface through a service some day:
    # they are failures of something upstream (502) or of this instance (500), never of the caller.
    TargetUnreachable: _Mapping(status=502, slug="target-unreachable", title="Target unreachable"),
    FaultInjectionFailed: _Mapping(status=502, slug="fault-injection-failed", title="Fault injection failed"),
    BuiltinTargetFailed: _Mapping(status=500, slug="builtin-target-failed", title="Built-in target failed"),
    WorkersFailed: _Mapping(status=500, slug="workers-failed", title="Generator worker processes failed"),
    SettingsInvalid: _Mapping(status=500, slug="settings-invalid", title="Invalid settings"),
}


def from_error(exc: CliffwatchError) -> ApiError | None:
    """The problem ``exc`` becomes, or None when no mapping covers it (then it is an internal error)."""
    for cls in type(exc).__mro__:
        mapping = ERRORS.get(cls)
        if mapping is not None:
            if mapping.extend is not None:
                return mapping.extend(exc)
            return ApiError(mapping.status, mapping.slug, mapping.title, str(exc))
    return None


def problem_response(error: ApiError, *, instance: str, request_id: str | None) -> web.Response:
    """The ``application/problem+json`` response for ``error``."""
    body: dict[str, Any] = {
        "type": TYPE_PREFIX + error.slug,
        "title": error.title,
        "status": error.status,
        "detail": error.detail,
        "instance": instance,
    }
    if request_id is not None:
        body["request_id"] = request_id
    body.update(error.extensions)
    return web.Response(
        status=error.status,
        text=json.dumps(body),
        content_type=PROBLEM_JSON,
        headers=error.headers,
    )
