"""The OpenAPI document's compare part: ``GET /api/v1/compare``, its operation id and the ``Comparison`` schema
(what ``domain.compare.comparison.Comparison.to_dict`` builds)."""

from __future__ import annotations

from typing import Any

from cliffwatch.adapters.api.json_schema import ANY_OBJECT, NUMBER, Schema, nullable, obj, ref
from cliffwatch.adapters.api.openapi_operations import _json, _op, _param
from cliffwatch.domain.compare.family import Better, Change

_NUMBER_OR_NULL = nullable(NUMBER)
_INTERVAL = nullable(obj({"low": NUMBER, "high": NUMBER}))
_SIDE = obj(
    {
        "label": {"type": "string", "description": "what was asked for: a run id, or a file"},
        "id": nullable({"type": "string"}),
        "status": nullable({"type": "string"}),
        "started_at": nullable({"type": "string"}),
        "scenario": nullable({"type": "string"}),
        "scenario_hash": nullable({"type": "string"}),
        "seed": nullable({"type": "integer"}),
        "target": nullable({"type": "string"}),
        "score_version": nullable({"type": "string"}),
    }
)
_FIGURE = obj(
    {
        "scope": {"type": "string", "description": "a phase, a class's phase, or a sweep variant's rate"},
        "figure": {"type": "string", "description": "on_time_share, goodput_rps, e2e_p99_ms, usable_capacity, ..."},
        "unit": {"type": "string"},
        "better": {"enum": [b.value for b in Better]},
        "a": _NUMBER_OR_NULL,
        "b": _NUMBER_OR_NULL,
        "difference": _NUMBER_OR_NULL,
        "a_interval": _INTERVAL,
        "b_interval": _INTERVAL,
        "difference_interval": _INTERVAL,
        "p_value": _NUMBER_OR_NULL,
        "p_adjusted": {**_NUMBER_OR_NULL, "description": "corrected over the comparison's figures (Holm)"},
        "detectable": {**_NUMBER_OR_NULL, "description": "the smallest difference these samples could detect"},
        "margin": _NUMBER_OR_NULL,
        "change": {"enum": [c.value for c in Change]},
        "note": nullable({"type": "string"}),
    }
)
SCHEMAS: dict[str, Schema] = {
    "Comparison": obj(
        {
            "format": {"const": 1},
            "kind": {"const": "comparison"},
            "of": {"enum": ["run", "sweep"]},
            "a": _SIDE,
            "b": _SIDE,
            "like": obj(
                {
                    "alike": {"type": "boolean"},
                    "differences": {"type": "array", "items": {"type": "string"}},
                    "same_scenario_hash": {"type": "boolean"},
                }
            ),
            "verdict": {"enum": [Change.REGRESSED.value, Change.IMPROVED.value, Change.NO_DIFFERENCE.value]},
            "summary": {"type": "string"},
            "alpha": NUMBER,
            "margins": obj({"share": NUMBER, "latency": NUMBER}),
            "method": {"type": "string"},
            "notes": {"type": "array", "items": {"type": "string"}},
            "cost": ANY_OBJECT,
            "figures": {"type": "array", "items": _FIGURE},
        }
    ),
}
OPERATION_IDS = {"GET /api/v1/compare": "compareRuns"}


def compare_paths(expensive: str) -> dict[str, Any]:
    ids = r"^[A-Za-z0-9._:-]{1,128}$"
    return {
        "/api/v1/compare": {
            "get": _op(
                "Two runs or sweeps compared, figure by figure", tag="runs", role="viewer", errors=(404, 422, 429),
                params=({**_param("a", "query", {"type": "string", "pattern": ids}, "the reference run's id"),
                         "required": True},
                        {**_param("b", "query", {"type": "string", "pattern": ids}, "the run judged against it"),
                         "required": True},
                        _param("allow_unlike", "query", {"enum": ["true", "false"], "default": "false"},
                               "compare runs of another workload or score version anyway")),
                ok={"200": _json(ref("Comparison"), "Per figure: B regressed, improved, within the margin, or no "
                                 "detectable difference, with its corrected p-value and detectable difference.")},
                description="Refused with 422 compare-refused (every reason listed) for unlike runs, a run beside a "
                "sweep, or a run without a result. Experiments of a game day are runs: compare them by their run ids. "
                + expensive,
            ),
        },
    }  # fmt: skip
