"""The component schemas of what a run measured, as the API answers it: a run's result with its score, one
request's outcome, the target's own metrics the run scraped, and a sweep's result document.
"""

from __future__ import annotations

from cliffwatch.adapters.api.json_schema import ANY_OBJECT, DATE_TIME, NUMBER, nullable, obj
from cliffwatch.domain.outcomes import Outcome

COMPONENT = obj(
    {"name": {"type": "string"}, "value": nullable(NUMBER), "weight": NUMBER, "summary": {"type": "string"},
     "evidence": ANY_OBJECT},
)  # fmt: skip
SCORE = obj(
    {
        "version": {"type": "string"},
        "value": nullable(NUMBER),
        "threshold": NUMBER,
        "passed": {"type": "boolean"},
        "summary": {"type": "string"},
        "components": {"type": "array", "items": COMPONENT},
        "flags": {"type": "array", "items": ANY_OBJECT},
        "classes": {
            "type": "array",
            "items": ANY_OBJECT,
            "description": "each traffic class's own score on its "
            "own requests against its own SLO (name, value, components, summary); empty without classes",
        },
    },
    closed=False,
)
RESULT = obj(
    {
        "started_at": nullable(DATE_TIME),
        "finished_at": nullable(DATE_TIME),
        "duration_s": nullable(NUMBER),
        "abort_reason": nullable({"type": "string"}),
        "score": nullable(SCORE),
        "verdicts": nullable({"type": "array", "items": obj({"name": {"type": "string"},
                                                             "summary": {"type": "string"}})}),
        "phases": nullable({"type": "array", "items": {**ANY_OBJECT, "description": "one phase's metrics"}}),
        "generator": nullable({**ANY_OBJECT, "description": "the generator's own verdict, and attempt_cap: what "
                               "the run's attempt cap (rate, burst) held back"}),
        "faults": nullable({"type": "array", "items": ANY_OBJECT}),
        "capped": {"type": "boolean", "description": "the attempt cap held back attempts: what was sent is not "
                   "the load as written (verdict capped; the run cannot pass)"},
        "workload_mismatch": {"type": "boolean", "description": "the prompts sent were not the sizes the scenario "
                              "asks for by the server's own count (over 10 % off, mean absolute), or could not be "
                              "sized at all (a failed calibration): the run cannot pass (verdict workload_mismatch)"},
        "workload_mismatch_reason": nullable({"type": "string", "description": "why workload_mismatch"}),
        "cost": nullable({**ANY_OBJECT, "description": "with target.cost: per_hour, currency, and what the run's "
                          "on-time work cost (run, and each of phases: cost, on_time, per_1000_on_time, "
                          "per_million_on_time_output_tokens; sentence); null without"}),
        "notes": {"type": "array", "items": {"type": "string"},
                  "description": "where the run as prepared differed from its scenario, e.g. a connection pool "
                                 "capped to the file descriptor budget"},
        "server_metrics": nullable({**ANY_OBJECT, "description": "what the run scraped of the target's own "
                                    "metrics (target.metrics): url, engine, interval_ms, scrapes, failed, failures "
                                    "by reason, notes, and each series' name, signal, expr and unit; the values are "
                                    "at links.server_metrics; null when nothing was scraped"}),
        "prompt_tokens": nullable({**ANY_OBJECT, "description": "how prompt_tokens became prompts (source: "
                                   "tokenizer, server, calibrated or words; the fit, the probes) and the server's "
                                   "usage.prompt_tokens against the intended counts (error); null for results "
                                   "stored before it"}),
        "classes": {"type": "array", "items": {**ANY_OBJECT, "description": "one traffic class: name, its "
                    "request, SLO, retry and priority as run, and phases (each phase's metrics counting only "
                    "this class's requests, as in phases)"},
                    "description": "each traffic class's own figures; empty for a scenario without classes"},
        "conversations": nullable({**ANY_OBJECT, "description": "with sessions: per phase (by the phase they "
                                   "started in) and in total, the conversations started, completed, completed with "
                                   "every turn on time, failed, cut by the run's end, and turns; null without"}),
    }
)  # fmt: skip
SERVER_SERIES = obj(
    {
        "name": {"type": "string", "description": "the signal's or the scenario's name; a by-group adds its labels"},
        "signal": nullable({"type": "string", "description": "waiting, running, kv_cache_usage, preemptions, "
                            "generation_tokens, prompt_tokens or queue_time; null for the scenario's own"}),
        "expr": {"type": "string"},
        "unit": {"type": "string"},
        "values": {"type": "array", "items": nullable(NUMBER), "description": "one per entry of times_s"},
    }
)  # fmt: skip
SERVER_VIEW = obj(
    {
        "url": {"type": "string"},
        "engine": {"type": "string"},
        "interval_ms": NUMBER,
        "scrapes": {"type": "integer"},
        "failed": {"type": "integer"},
        "failures": {"type": "object", "additionalProperties": {"type": "integer"}},
        "notes": {"type": "array", "items": {"type": "string"}},
        "times_s": {"type": "array", "items": NUMBER, "description": "seconds from the run's start"},
        "series": {"type": "array", "items": SERVER_SERIES},
    }
)
OUTCOME = obj(
    {
        "request_id": {"type": "integer"},
        "phase": {"type": "integer"},
        "scheduled_ms": NUMBER,
        "outcome": {"enum": [o.value for o in Outcome]},
        "attempts": {"type": "integer"},
        "status": nullable({"type": "integer"}),
        "error": nullable({"type": "string"}),
        "e2e_ms": nullable(NUMBER),
        "ttft_ms": nullable(NUMBER),
        "tpot_ms": nullable(NUMBER),
        "output_tokens": {"type": "integer"},
        "token_source": {"type": "string"},
        "schedule_lag_ms": nullable(NUMBER),
        "attempt_log": {"type": "array", "items": ANY_OBJECT},
        "traffic_class": {
            "type": "integer",
            "description": "its class: an index into result.classes (0 for a scenario without classes)",
        },
        "conversation": nullable(
            {
                "type": "integer",
                "description": "the request_id of its conversation's first "
                "turn; null for a request that was not a conversation's turn",
            }
        ),
        "turn": nullable({"type": "integer", "description": "its turn in that conversation, from 1"}),
    }
)
# A sweep's result document as it is stored (docs/sweep.md); open, so new fields of the format pass. While the
# sweep runs it is the document of the steps so far, marked provisional (finished_at null until it ends).
SWEEP_RESULT = obj(
    {"format": {"type": "integer"}, "kind": {"const": "sweep"}, "status": {"type": "string"},
     "finished_at": nullable(DATE_TIME),
     "variants": {"type": "array", "items": ANY_OBJECT},
     "warnings": {"type": "array", "items": {"type": "string"},
                  "description": "what the sweep as asked was warned about (steps too short for the SLO, say); "
                                 "absent from documents older than the field"},
     "provisional": {"type": "boolean",
                     "description": "true while the sweep runs (or when it ended before its final document): "
                                    "the steps measured so far, summarised; absent from a final document"},
     "updated_at": {**DATE_TIME, "description": "when a provisional document was made"},
     "steps_so_far": {"type": "integer", "minimum": 0, "description": "the steps a provisional document holds"}},
    required=("format", "kind", "status", "variants"),
    closed=False,
)  # fmt: skip
