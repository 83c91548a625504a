"""The OpenAPI document's game-day part: its paths, their operation ids and links, and their schemas.

Kept apart from ``openapi.py`` (which merges these in) so each stays one concept; the schemas say what
``views.gameday_view`` and ``GamedaysService.combined`` build.
"""

from __future__ import annotations

from typing import Any

from cliffwatch.adapters.api.json_schema import ANY_OBJECT, DATE_TIME, Schema, nullable, obj, ref
from cliffwatch.adapters.api.openapi_operations import _json, _op, _param
from cliffwatch.domain.service.gamedays import ExperimentState, GamedayStatus
from cliffwatch.domain.service.runs import Trigger
from cliffwatch.services.gameday import SuiteVerdict

IDEMPOTENCY = _param(
    "Idempotency-Key",
    "header",
    {"type": "string", "pattern": "^[\\x21-\\x7e]{1,200}$"},
    "repeat a request safely: the same key (per token) returns the game day the first request started",
)
GAMEDAY_ID = _param("gameday_id", "path", {"type": "string"}, "the game day's id")
LOCATION = {"Location": {"description": "the game day's URL", "schema": {"type": "string"}, "required": True}}
VERDICT: Schema = nullable({"enum": [v.value for v in SuiteVerdict],
                            "description": "held, broken, failed or stopped; null until it ends"})  # fmt: skip
STATE: Schema = {"enum": [s.value for s in ExperimentState]}
NOTIFICATION = obj(
    {
        "url": {"type": "string", "description": "the webhook's scheme and host only: its path may be its secret"},
        "event": {"type": "string"},
        "ok": {"type": "boolean"},
        "attempts": {"type": "integer", "minimum": 0},
        "status": nullable({"type": "integer"}),
        "error": nullable({"type": "string"}),
        "format": {"enum": ["generic", "slack"]},
        "at": {**DATE_TIME, "description": "when its last attempt ended"},
    },
    required=("url", "event", "ok", "attempts", "status", "error"),  # a game day stored before 0010 has no others
    closed=False,
)
EXPERIMENT = obj(
    {
        "name": {"type": "string"},
        "scenario": {"type": "string", "description": "its scenario's name, or (inline)"},
        "hypothesis": {"type": "string"},
        "state": STATE,
        "run_id": nullable({"type": "string", "description": "its run (GET /api/v1/runs/{run_id})"}),
        "broken_because": {"type": "array", "items": {"type": "string"}},
        "error": nullable({"type": "string", "description": "why it could not run"}),
    }
)
COMBINED = obj(
    {
        "kind": {"const": "gameday"},
        "name": {"type": "string"},
        "verdict": VERDICT,
        "summary": nullable({"type": "string"}),
        "experiments": {
            "type": "array",
            "items": obj(
                {
                    **EXPERIMENT["properties"],
                    "result": nullable({**ANY_OBJECT, "description": "its run's result document, as cliffwatch run "
                                        "--json writes it without the per-second rows"}),
                }
            ),
        },
        "notifications": {"type": "array", "items": ref("Notification")},
    }
)  # fmt: skip
GAMEDAY_PROPERTIES: dict[str, Schema] = {
    "id": {"type": "string"},
    "name": {"type": "string"},
    "status": {"enum": [s.value for s in GamedayStatus]},
    "verdict": VERDICT,
    "summary": nullable({"type": "string"}),
    "trigger": {"enum": [t.value for t in Trigger]},
    "triggered_by": {"type": "string", "description": "the token's name, or the schedule's id"},
    "schedule_id": nullable({"type": "string"}),
    "fire_time": nullable(DATE_TIME),
    "created_at": DATE_TIME,
    "finished_at": nullable(DATE_TIME),
    "abort_requested": nullable({"type": "string"}),
    "reason": nullable({"type": "string"}),
    "experiments": {"type": "array", "items": ref("GamedayExperiment")},
    "notifications": {"type": "array", "items": ref("Notification")},
    "suite": {
        **ANY_OBJECT,
        "description": "the suite as it was sent (credentials masked, webhooks cut to their hosts); not in lists",
    },
    "links": obj({"self": {"type": "string"}, "report": {"type": "string"}}),
}
SUITE_EXAMPLE = {
    "name": "weekly-llm-gameday",
    "experiments": [
        {"scenario": "burst-storm", "expect": {"score_at_least": 60}},
        {"scenario": "retry-storm", "expect": {"no_hidden_overload": True}, "pause_before_s": 30},
    ],
    "stop_when": {"hypothesis_broken": False},
}
SCHEMAS: dict[str, Schema] = {
    "SuiteDocument": {
        **ANY_OBJECT,
        "description": "a game-day suite (docs/gamedays.md), as JSON",
        "examples": [SUITE_EXAMPLE],
    },
    "Notification": NOTIFICATION,
    "RunNotifications": obj(
        {"run_id": {"type": "string"}, "notifications": {"type": "array", "items": ref("Notification")}}
    ),
    "GamedayNotifications": obj(
        {"gameday_id": {"type": "string"}, "notifications": {"type": "array", "items": ref("Notification")}}
    ),
    "GamedayExperiment": EXPERIMENT,
    "Gameday": obj(GAMEDAY_PROPERTIES, required=tuple(k for k in GAMEDAY_PROPERTIES if k != "suite")),
    "GamedayDetail": obj({**GAMEDAY_PROPERTIES, "result": COMBINED}),
    "GamedayList": obj({"gamedays": {"type": "array", "items": ref("Gameday")}}),
}


def gameday_paths(report_headers: dict[str, Any], expensive: str) -> dict[str, Any]:
    one = (GAMEDAY_ID,)
    return {
        "/api/v1/gamedays": {
            "post": _op(
                "Start a game day", tag="gamedays", role="operator", body=ref("SuiteDocument"), errors=(503,),
                params=(IDEMPOTENCY,),
                ok={"202": _json(ref("Gameday"), "Started: this instance drives it, one experiment at a time.",
                                 LOCATION),
                    "200": _json(ref("Gameday"), "A repeat with the first request's Idempotency-Key: the game day "
                                 "it started.", LOCATION)},
                description="The body is the suite itself (the YAML of cliffwatch gameday, as JSON). Every "
                "experiment is checked as the run it will be before anything is stored: 422 suite-invalid names "
                "each bad field in the suite (experiments[1].scenario.target.url, experiments[0].expect.…), its "
                "scenario invalid, its target outside the allowlist or its run over the caps alike. The service "
                "runs bundled and registered scenarios by name, and inline ones; it reads no file. Each "
                "experiment then runs as an ordinary run queued by the caller (its quotas, the emergency stop, "
                "leases and fencing as for any run); the emergency stop ends the whole suite (verdict stopped); "
                "503 while it is on. An API caller at its quota of queued runs or new documents is refused "
                "(429) before the suite starts; a repeat with the same Idempotency-Key (per token) answers 200 "
                "with the game day the first request started, and a key another suite used is 422 "
                "idempotency-key-reused.",
            ),
            "get": _op("The latest game days, newest first", tag="gamedays", role="viewer",
                       params=(_param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 200,
                                                         "default": 50}, "how many"),),
                       ok={"200": _json(ref("GamedayList"), "Newest first.")}),
        },
        "/api/v1/gamedays/{gameday_id}": {
            "get": _op("A game day: each experiment's run and hypothesis, the verdict, the combined result",
                       tag="gamedays", role="viewer", params=one, errors=(404,),
                       ok={"200": _json(ref("GamedayDetail"), "result is the document cliffwatch gameday --json "
                                        "writes (each experiment's run result once it has one).")}),
        },
        "/api/v1/gamedays/{gameday_id}/report": {
            "get": _op(
                "A game day's HTML report", tag="gamedays", role="viewer", params=one, errors=(404, 429),
                ok={"200": {"description": "The page cliffwatch gameday --report writes: the summary table, then "
                            "each experiment's own report.", "headers": report_headers,
                            "content": {"text/html": {"schema": {"type": "string"}}}}},
                description="Served with the run report's Content-Security-Policy. " + expensive,
            ),
        },
        "/api/v1/gamedays/{gameday_id}/notifications": {
            "get": _op("A game day's webhook deliveries", tag="gamedays", role="viewer", params=one, errors=(404,),
                       ok={"200": _json(ref("GamedayNotifications"), "In the order made; empty until the game day "
                                        "ends, and for a suite without notify.")},
                       description="Each delivery of the suite's end to its webhooks, delivered or not "
                                   "(docs/gamedays.md, Notifications), as the game day's own view lists them."),
        },
        "/api/v1/gamedays/{gameday_id}/abort": {
            "post": _op("Stop a game day", tag="gamedays", role="operator", params=one, body=ref("ReasonBody"),
                        body_optional=True, errors=(404, 503),
                        description="No experiment starts after this; the one running is aborted. The game day "
                                    "ends with the verdict stopped. A finished one is returned as it is.",
                        ok={"200": _json(ref("Gameday"), "The stop is asked (abort_requested).")}),
        },
    }  # fmt: skip


OPERATION_IDS = {
    "POST /api/v1/gamedays": "startGameday",
    "GET /api/v1/gamedays": "listGamedays",
    "GET /api/v1/gamedays/{gameday_id}": "getGameday",
    "GET /api/v1/gamedays/{gameday_id}/report": "getGamedayReport",
    "POST /api/v1/gamedays/{gameday_id}/abort": "abortGameday",
    "GET /api/v1/gamedays/{gameday_id}/notifications": "getGamedayNotifications",
}
LINKS: dict[tuple[str, tuple[str, ...]], tuple[str, tuple[str, ...]]] = {
    ("POST /api/v1/gamedays", ("202", "200")): (
        "gameday_id",
        ("getGameday", "getGamedayReport", "getGamedayNotifications", "abortGameday"),
    ),
}
