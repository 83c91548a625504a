"""SweepProgress: the provisional document of a running sweep is the final document's shape, made of the steps
so far by the same summary, marked provisional; it follows a real SweepService step by step."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cliffwatch.domain.capacity.capacity import StepStats, StepVerdict, summarize
from cliffwatch.domain.capacity.sweep_plan import sweep_warnings
from cliffwatch.domain.capacity.sweep_spec import parse_sweep_spec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.services.memory import CollectingObserver
from cliffwatch.services.memory_sweep import ModelStepRunner, model_runners
from cliffwatch.services.sweep import SweepOutcome, SweepService
from cliffwatch.services.sweep_progress import SweepProgress

SCENARIO = parse_scenario(
    {
        "name": "sweepme",
        "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 8}},
        "slo": {"e2e_ms": 4000, "timeout_ms": 8000},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 5, "arrival": {"process": "poisson", "rate": 1}}],
    }
)
SPEC = parse_sweep_spec({"start": 1, "stop": 16, "coarse_steps": 4, "variants": ["as-written", "none"]})
T0 = datetime(2026, 12, 10, 9, 0, tzinfo=UTC)


def progress() -> SweepProgress:
    return SweepProgress(sweep_id="s1", scenario=SCENARIO, spec=SPEC, target_url="http://127.0.0.1:9", started_at=T0)


def test_the_document_has_the_final_shape_with_the_steps_so_far_summarised_and_is_marked_provisional() -> None:
    made = progress()
    model = ModelStepRunner(capacity=6.0)
    steps = [model.step(rate, 1) for rate in (1.0, 4.0, 8.0)]
    assert not made.changed.is_set()
    for step in steps:
        made.step_finished("as-written", step, StepVerdict.UNSURE)
    assert made.changed.is_set()
    document = made.document(T0 + timedelta(seconds=42))
    final = SweepOutcome(sweep_id="s1", scenario=SCENARIO, spec=SPEC, status=RunStatus.SUCCEEDED, reason=None,
                         reports=(), started_at=T0, finished_at=T0, target_url="x").to_dict()  # fmt: skip
    assert set(final) < set(document)
    assert set(document) - set(final) == {"provisional", "updated_at", "steps_so_far"}
    assert (document["status"], document["provisional"], document["finished_at"]) == ("running", True, None)
    assert (document["duration_s"], document["steps_so_far"]) == (42.0, 3)
    assert document["updated_at"] == (T0 + timedelta(seconds=42)).isoformat()
    [variant] = document["variants"]  # "none" has no step yet
    assert variant["variant"] == "as-written"
    expected = summarize(steps, target=SPEC.target, e2e_slo_ms=4000, finished_because="x", max_trials=SPEC.trials)
    result = variant["result"]
    assert {k: v for k, v in result.items() if k != "finished_because"} == {
        k: v for k, v in expected.to_dict().items() if k != "finished_because"
    }
    assert result["finished_because"] == "provisional: 3 step(s) so far, the sweep is still running"
    assert (result["usable_rps"], result["first_bad_rps"]) == (4.0, 8.0)
    assert document["usable_rps"] == 4.0


async def test_it_follows_a_sweep_step_by_step_and_ends_with_what_the_final_document_holds() -> None:
    runner_for, _ = model_runners({"as-written": 6.0, "none": 9.0})
    documents = []

    class Recording(SweepProgress):
        def step_finished(self, variant: str, step: StepStats, verdict: StepVerdict) -> None:
            super().step_finished(variant, step, verdict)
            documents.append(self.document(T0))

    made = Recording(sweep_id="s1", scenario=SCENARIO, spec=SPEC, target_url="u", started_at=T0)
    service = SweepService(scenario=SCENARIO, spec=SPEC, runner_for=runner_for, observer=CollectingObserver(),
                           sweep_observer=made)  # fmt: skip
    reports = await service.run()
    assert [d["steps_so_far"] for d in documents] == list(range(1, len(documents) + 1))
    last = documents[-1]
    assert [v["variant"] for v in last["variants"]] == ["as-written", "none"]
    for shown, report in zip(last["variants"], reports, strict=True):
        final = report.result.to_dict()
        assert shown["result"]["steps"] == final["steps"]
        assert (shown["result"]["usable_rps"], shown["result"]["verdict"]) == (final["usable_rps"], final["verdict"])


def test_the_documents_carry_the_sweeps_warnings() -> None:
    short = parse_sweep_spec({"start": 1, "stop": 16, "step_s": 2, "warmup_s": 1})
    made = SweepProgress(sweep_id="s1", scenario=SCENARIO, spec=short, target_url="x", started_at=T0)
    final = SweepOutcome(sweep_id="s1", scenario=SCENARIO, spec=short, status=RunStatus.SUCCEEDED, reason=None,
                         reports=(), started_at=T0, finished_at=T0, target_url="x").to_dict()  # fmt: skip
    expected = list(sweep_warnings(SCENARIO, short))
    assert len(expected) == 1
    assert "shorter than 10 × the 4000 ms e2e SLO (40 s)" in expected[0]
    assert final["warnings"] == made.document(T0)["warnings"] == expected
    long_enough = parse_sweep_spec({"start": 1, "stop": 16, "step_s": 36, "warmup_s": 4})  # 10 × the 4-s SLO
    assert SweepProgress(sweep_id="s1", scenario=SCENARIO, spec=long_enough, target_url="x",
                         started_at=T0).document(T0)["warnings"] == []  # fmt: skip
