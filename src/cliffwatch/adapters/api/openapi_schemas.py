"""The OpenAPI document's component schemas (JSON Schema 2020-12, as OpenAPI 3.1 uses it).

Request schemas say exactly what the validators in ``requests.py`` and the handlers accept (unknown fields
are refused, so ``additionalProperties: false``); response schemas say what ``views.py`` builds. A test
validates real responses against them, and schemathesis checks both sides. The schemas are written with
``json_schema``'s building blocks; those of what a run measured are in ``result_schemas``.
"""

from __future__ import annotations

from cliffwatch.adapters.api.json_schema import ANY_OBJECT, DATE_TIME, NUMBER, Schema, nullable, obj, ref, text
from cliffwatch.adapters.api.result_schemas import OUTCOME, RESULT, SERVER_VIEW, SWEEP_RESULT
from cliffwatch.domain.capacity.sweep_spec import MAX_VARIANTS, SweepArrival, SweepMode, SweepSpec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import MAX_SEED
from cliffwatch.domain.service.runs import CatchUp, RunKind, ScenarioSource, TokenRole, Trigger
from cliffwatch.domain.service.trends import Bucket

PATH_PROBLEM = obj({"path": {"type": "string", "description": "dotted path; empty for the whole"},
                    "message": {"type": "string"}})  # fmt: skip

OVERRIDES = obj(
    {
        "target_url": text(2_000, description="an http(s) URL, or builtin for the simulated target"),
        "seed": {"type": "integer", "minimum": 0, "maximum": MAX_SEED},
        "threshold": {"type": "number", "minimum": 0, "maximum": 100},
    },
    required=(),
)
POSITIVE: Schema = {"type": "number", "exclusiveMinimum": 0}
# The sweep's parameters (docs/sweep.md). The schema holds each field's own bounds; the rules between fields
# (a range or auto, stop above start) are the service's, answered with 422 sweep-invalid.
SWEEP_SPEC = obj(
    {
        "mode": {"enum": [m.value for m in SweepMode], "default": SweepMode.RATE.value},
        "start": nullable({**POSITIVE, "description": "the first rate (req/s, or clients in concurrency mode)"}),
        "stop": nullable({**POSITIVE, "description": "the last rate of the coarse range; null with auto"}),
        "auto": {"type": "boolean", "default": False, "description": "double from start up to max_rate"},
        "target": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.99,
                   "description": "the SLO attainment a usable rate must meet"},
        "trials": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
        "step_s": {"type": "number", "minimum": 1, "maximum": 600, "default": SweepSpec().step_s},
        "warmup_s": {"type": "number", "minimum": 0, "maximum": 300, "default": SweepSpec().warmup_s},
        "cooldown_s": {"type": "number", "minimum": 0, "maximum": 300, "default": SweepSpec().cooldown_s},
        "arrival": {"enum": [a.value for a in SweepArrival], "default": SweepArrival.POISSON.value},
        "coarse_steps": {"type": "integer", "minimum": 2, "maximum": 50, "default": 6},
        "resolution": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5, "default": 0.05},
        "max_steps": {"type": "integer", "minimum": 2, "maximum": 200, "default": 30},
        "max_rate": {**POSITIVE, "default": 1000},
        "variants": {"type": "array", "minItems": 1, "maxItems": MAX_VARIANTS, "uniqueItems": True,
                     "items": {"type": "string",
                               "pattern": "^(none|as-written|(immediate|exponential|budget):([1-9]|10))$"},
                     "description": "client retry policies to repeat the sweep under", "default": ["as-written"]},
        "confidence": {"type": "number", "minimum": 0.5, "maximum": 0.999, "default": 0.95},
        "extend_s": nullable({"type": "number", "exclusiveMinimum": 0, "maximum": 1800,
                              "description": "the measured window of a step re-measured because its queue grew "
                                             "inside it; > step_s; null: 3 × step_s (docs/sweep.md)"}),
        "growth_check": {"type": "boolean", "default": True,
                         "description": "false: judge a rate by its SLO attainment alone, not also by whether its "
                                        "queue grew within the step"},
        "luck_correction": {"type": "boolean", "default": True,
                            "description": "false: judge Poisson steps on their counted attainment, not corrected "
                                           "for the luck of their draws by a reference queue (docs/sweep.md)"},
        "recheck": nullable({"type": "boolean",
                             "description": "end by measuring the first rate again (one more step), to see whether "
                                            "the target's speed drifted; null: on for auto, off for a range"}),
        "drain_timeout_s": {"type": "number", "minimum": 1, "maximum": 600, "default": SweepSpec().drain_timeout_s,
                            "description": "after each step, the most seconds to wait for the target itself to be "
                                           "idle (its waiting and running requests at 0 by target.metrics, else a "
                                           "probe as fast as on the idle target; docs/sweep.md)"},
    },
    required=(),
)  # fmt: skip
SWEEP_SPEC["examples"] = [{"auto": True, "step_s": 10, "warmup_s": 2, "variants": ["as-written", "none"]},
                          {"start": 2, "stop": 20, "arrival": "constant", "target": 0.95}]  # fmt: skip
_SCENARIO_CHOICE = {
    "scenario": text(100, description="a bundled or registered scenario's name"),
    "document": {**ANY_OBJECT, "description": "a whole scenario document, run as it is"},
    "overrides": ref("Overrides"),
}
RUN_CREATE: Schema = {
    **obj(
        {**_SCENARIO_CHOICE,
         "kind": {"enum": [k.value for k in RunKind], "default": RunKind.RUN.value,
                  "description": "sweep: a capacity sweep over the scenario's target (give sweep too)"},
         "sweep": ref("SweepSpec")},
        required=(),
    ),
    "oneOf": [{"required": ["scenario"]}, {"required": ["document"]}],
    "examples": [{"scenario": "burst-storm", "overrides": {"target_url": "http://127.0.0.1:8000", "seed": 7}}],
}  # fmt: skip
SWEEP_CREATE: Schema = {
    **obj({**_SCENARIO_CHOICE, "sweep": ref("SweepSpec")}, required=("sweep",)),
    "oneOf": [{"required": ["scenario"]}, {"required": ["document"]}],
    "examples": [{"scenario": "burst-storm", "sweep": {"auto": True, "step_s": 10, "warmup_s": 2}}],
}  # fmt: skip
RUN_LINKS = obj({"self": {"type": "string"}, "timeseries": {"type": "string"}, "outcomes": {"type": "string"},
                 "server_metrics": {"type": "string"}})  # fmt: skip
RUN_PROPERTIES: dict[str, Schema] = {
    "id": {"type": "string"},
    "scenario": {"type": "string"},
    "scenario_hash": {"type": "string"},
    "status": {"enum": [s.value for s in RunStatus]},
    "trigger": {"enum": [t.value for t in Trigger]},
    "triggered_by": {"type": "string", "description": "the token's name, or the schedule's id"},
    "created_at": DATE_TIME,
    "started_at": nullable(DATE_TIME),
    "finished_at": nullable(DATE_TIME),
    "target_url": {"type": "string"},
    "seed": {"type": "integer"},
    "threshold": NUMBER,
    "overrides": ref("Overrides"),
    "schedule_id": nullable({"type": "string"}),
    "fire_time": nullable(DATE_TIME),
    "abort_requested": nullable({"type": "string"}),
    "reason": nullable({"type": "string"}),
    "score": nullable(NUMBER),
    "score_version": nullable({"type": "string"}),
    "passed": nullable({"type": "boolean"}),
    "verdicts": {"type": "array", "items": {"type": "string"}},
    "kind": {"enum": [k.value for k in RunKind]},
    "sweep": nullable(ref("SweepSpec")),
    "usable_rps": nullable({**NUMBER, "description": "a finished sweep's usable capacity (its first variant)"}),
    "links": RUN_LINKS,
}
SCENARIO_PROPERTIES: dict[str, Schema] = {
    "name": {"type": "string"},
    "content_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    "source": {"enum": [s.value for s in ScenarioSource]},
    "created_at": DATE_TIME,
    "description": {"type": "string"},
}
SCHEDULE_WRITE = obj(
    {
        "name": text(200),
        "cron": text(100, description="five crontab fields, minute first; 0 and 7 are Sunday"),
        "timezone": text(64, description="an IANA zone, e.g. Europe/Berlin"),
        "scenario": text(100),
        "overrides": ref("Overrides"),
        "enabled": {"type": "boolean", "default": True},
        "catch_up": {"enum": [c.value for c in CatchUp], "default": CatchUp.SKIP.value},
        "kind": {"enum": [k.value for k in RunKind], "default": RunKind.RUN.value,
                 "description": "what each fire queues; sweep needs sweep"},
        "sweep": ref("SweepSpec"),
        "suite": {**ANY_OBJECT, "description": "a game-day suite (as POST /api/v1/gamedays takes): each fire starts "
                  "it instead of a run; then scenario is not given"},
    },
    required=("name", "cron", "timezone"),
)  # fmt: skip
SCHEDULE_WRITE["examples"] = [{"name": "weekday game day", "cron": "0 9 * * 1-5", "timezone": "Europe/Berlin",
                               "scenario": "burst-storm", "catch_up": "skip"}]  # fmt: skip
SCHEDULE = obj(
    {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "cron": {"type": "string"},
        "timezone": {"type": "string"},
        "scenario": {"type": "string"},
        "overrides": ref("Overrides"),
        "enabled": {"type": "boolean"},
        "catch_up": {"enum": [c.value for c in CatchUp]},
        "created_at": DATE_TIME,
        "created_by": {"type": "string"},
        "last_fire_time": nullable(DATE_TIME),
        "kind": {"enum": [k.value for k in RunKind]},
        "sweep": nullable(ref("SweepSpec")),
        "suite": nullable({**ANY_OBJECT, "description": "the suite each fire starts (scenario is then its name)"}),
    }
)
TREND_POINT = obj(
    {
        "start": DATE_TIME,
        "runs": {"type": "array", "items": {"type": "string"}},
        "score": NUMBER,
        "components": {"type": "object", "additionalProperties": nullable(NUMBER)},
        "classes": {
            "type": "object",
            "additionalProperties": nullable(NUMBER),
            "description": "each traffic class's own mean score (empty without classes)",
        },
        "passed": {"type": "integer"},
    }
)
TREND_SERIES = obj(
    {
        "scenario": {"type": "string"},
        "target_url": {"type": "string"},
        "score_version": {"type": "string"},
        "points": {"type": "array", "items": TREND_POINT},
        "trailing_median": nullable(NUMBER),
        "regression": {
            "type": "boolean",
            "description": "the score, or a traffic class's own score, fell below "
            "its trailing median by more than the margin",
        },
        "regressed_classes": {"type": "array", "items": {"type": "string"}},
        "summary": {"type": "string"},
    }
)
CAPACITY_POINT = obj(
    {
        "at": DATE_TIME,
        "run": {"type": "string"},
        "usable": nullable({**NUMBER, "description": "null: no rate tried met the target"}),
        "first_bad": nullable({**NUMBER, "description": "null: no cliff found up to the highest rate"}),
        "on_point_estimate": {"type": "boolean"},
    }
)
CAPACITY_SERIES = obj(
    {
        "scenario": {"type": "string"},
        "target_url": {"type": "string"},
        "variant": {"type": "string"},
        "mode": {"enum": [m.value for m in SweepMode]},
        "unit": {"type": "string"},
        "target": NUMBER,
        "points": {"type": "array", "items": CAPACITY_POINT},
        "trailing_median": nullable(NUMBER),
        "regression": {"type": "boolean"},
        "summary": {"type": "string"},
    }
)
RUN_DETAIL_PROPERTIES: dict[str, Schema] = {
    **RUN_PROPERTIES,
    "result": {
        "anyOf": [RESULT, SWEEP_RESULT, {"type": "null"}],
        "description": "a run's result, or a sweep's document (while it runs: the steps so far, provisional)",
    },
}
SWEEP_WARNINGS: Schema = {
    "type": "array",
    "items": {"type": "string"},
    "description": "what the sweep as asked should be warned about, e.g. steps (warm-up + step) shorter than 10 × "
    'its tightest latency bound, which can pass a rate somewhat above saturation (docs/sweep.md, "Step length"); '
    "empty when nothing",
}
TOKEN_PROPERTIES: dict[str, Schema] = {
    "id": {"type": "string"},
    "name": {"type": "string"},
    "role": {"enum": [r.value for r in TokenRole]},
    "created_at": DATE_TIME,
    "revoked_at": nullable(DATE_TIME),
}
STOP_STATE = obj({"active": {"type": "boolean"}, "reason": nullable({"type": "string"})})
REASON_BODY = obj({"reason": text(500)}, required=())

SCHEMAS: dict[str, Schema] = {
    "Problem": obj(
        {
            "type": {"type": "string", "format": "uri"},
            "title": {"type": "string"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": {"type": "string"},
            "instance": {"type": "string"},
            "request_id": {"type": "string"},
            "problems": {"type": "array", "items": PATH_PROBLEM},
        },
        required=("type", "title", "status", "detail"),
        closed=False,  # extensions: target, reason and field (target-not-allowed), reason (emergency-stop)
    ),
    "Overrides": OVERRIDES,
    "RunCreate": RUN_CREATE,
    "Run": obj(RUN_PROPERTIES),
    "RunDetail": obj(RUN_DETAIL_PROPERTIES),
    "SweepQueued": obj({**RUN_DETAIL_PROPERTIES, "warnings": SWEEP_WARNINGS}),
    "SweepSpec": SWEEP_SPEC,
    "SweepCreate": SWEEP_CREATE,
    "CapacityTrends": obj({"series": {"type": "array", "items": CAPACITY_SERIES}}),
    "RunPage": obj({"runs": {"type": "array", "items": ref("Run")}, "next_cursor": nullable({"type": "string"})}),
    "ReasonBody": REASON_BODY,
    "Timeseries": obj({"run_id": {"type": "string"}, "rows": {"type": "array", "items": ANY_OBJECT}}),
    "ServerMetrics": obj({"run_id": {"type": "string"}, "server_metrics": nullable(SERVER_VIEW)}),
    "OutcomePage": obj(
        {
            "run_id": {"type": "string"},
            "outcomes": {"type": "array", "items": OUTCOME},
            "next_after": nullable({"type": "integer"}),
        }
    ),
    "ScenarioSummary": obj(SCENARIO_PROPERTIES),
    "ScenarioDetail": obj({**SCENARIO_PROPERTIES, "document": ANY_OBJECT}),
    "ScenarioList": obj({"scenarios": {"type": "array", "items": ref("ScenarioSummary")}}),
    "ScenarioDocument": {**ANY_OBJECT, "description": "a scenario document (docs/scenarios.md)"},
    "Validation": obj({"valid": {"type": "boolean"}, "problems": {"type": "array", "items": PATH_PROBLEM}}),
    "ScheduleWrite": SCHEDULE_WRITE,
    "Schedule": SCHEDULE,
    "ScheduleList": obj({"schedules": {"type": "array", "items": ref("Schedule")}}),
    "FireTimes": obj({"schedule_id": {"type": "string"}, "fire_times": {"type": "array", "items": DATE_TIME}}),
    "Trends": obj({"bucket": {"enum": [b.value for b in Bucket]}, "series": {"type": "array", "items": TREND_SERIES}}),
    "TokenCreate": {
        **obj({"name": text(100), "role": {"enum": [r.value for r in TokenRole]}}),
        "examples": [{"name": "ci pipeline", "role": "operator"}],
    },
    "Token": obj(TOKEN_PROPERTIES),
    "TokenCreated": obj({**TOKEN_PROPERTIES, "token": {"type": "string", "description": "shown only here"}}),
    "TokenList": obj({"tokens": {"type": "array", "items": ref("Token")}}),
    "StopState": STOP_STATE,
    "StopAll": obj(
        {
            "active": {"const": True},
            "reason": {"type": "string"},
            "aborted": {"type": "array", "items": {"type": "string"}},
        }
    ),
    "Health": obj({"status": {"const": "ok"}}),
    "Ready": obj({"status": {"const": "ready"}}),
}
