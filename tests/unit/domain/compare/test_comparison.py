"""Two run documents compared: figures per phase, what is refused and why, and what is said out loud."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from cliffwatch.domain.compare.comparison import Side, compare
from cliffwatch.domain.compare.family import Change
from cliffwatch.domain.errors import CompareRefused
from cliffwatch.domain.scenario.scenario import parse_scenario
from run_results_kit import result

DOCUMENT = {
    "name": "compared", "seed": 5, "slo": {"e2e_ms": 400, "timeout_ms": 3000},
    "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", "max_tokens": 10}},
    "phases": [
        {"name": "calm", "role": "baseline", "duration_s": 4, "arrival": {"process": "constant", "rate": 50}},
        {"name": "burst", "role": "stress", "duration_s": 4, "arrival": {"process": "constant", "rate": 100}},
    ],
}  # fmt: skip


def spread(request: int) -> float:
    """A deterministic spread of 150–250 ms (a golden-ratio sequence), so percentiles have something to test."""
    return 150 + 100 * ((request * 0.6180339887) % 1)


def run(*, slower_burst: float = 1.0, burst_failures: int = 0, document: dict[str, Any] | None = None,
        **overrides: Any) -> dict[str, Any]:  # fmt: skip
    scenario = parse_scenario(document or DOCUMENT)
    latency = lambda phase, request: spread(request) * (slower_burst if phase == 1 else 1.0)  # noqa: E731
    fails = lambda phase, request: phase == 1 and request % 100 < burst_failures  # noqa: E731
    return result(scenario=scenario, latency_ms=latency, fails=fails, **overrides).to_dict()


def side(label: str, document: dict[str, Any]) -> Side:
    return Side(label=label, document=document)


def figures(found: Any, scope: str) -> dict[str, Any]:
    return {f.name: f for f in found.figures if f.scope == scope}


def test_a_slower_failing_burst_regresses_there_and_nowhere_else() -> None:
    a, b = run(), run(slower_burst=1.3, burst_failures=10)
    found = compare(side("a", a), side("b", b), rng=random.Random(0))
    burst, calm = figures(found, "phase burst"), figures(found, "phase calm")
    assert found.verdict is Change.REGRESSED
    assert burst["on_time_share"].change is Change.REGRESSED  # 10 % failed, and some of the rest now late
    assert burst["goodput_rps"].change is Change.REGRESSED
    assert burst["e2e_p50_ms"].change is Change.REGRESSED
    assert burst["e2e_p50_ms"].difference == pytest.approx(0.3 * 200, rel=0.1)
    assert all(f.change in (Change.NO_DIFFERENCE, Change.NOT_TESTED) for f in calm.values())
    assert "ttft_p50_ms" not in burst  # no answer streamed: nothing to compare
    score = figures(found, "run")["score"]
    assert score.change is Change.NOT_TESTED
    assert score.a is not None
    assert score.b is not None
    assert score.b < score.a
    document = found.to_dict()
    assert document["verdict"] == "regressed"
    assert document["summary"].startswith("B against A: regressed")
    p99 = next(f for f in document["figures"] if f["scope"] == "phase calm" and f["figure"] == "e2e_p99_ms")
    assert p99["change"] == "not tested"  # 200 answers: a p99 needs 500
    assert "needs 500" in p99["note"]


def test_the_same_run_twice_differs_in_nothing_and_says_what_could_have_hidden() -> None:
    a = run()
    found = compare(side("a", a), side("b", run()), rng=random.Random(0))
    assert found.verdict is Change.NO_DIFFERENCE
    share = figures(found, "phase burst")["on_time_share"]
    assert share.p_adjusted == 1.0
    assert share.detectable is not None
    assert 0 < share.detectable < 0.05
    assert all(math.isfinite(f.detectable) for f in found.figures if f.detectable is not None)


def test_another_target_is_what_compare_is_for_but_another_workload_is_refused() -> None:
    other_target = {**DOCUMENT, "target": {**DOCUMENT["target"], "url": "http://127.0.0.1:9000"}}
    a = run()
    found = compare(side("a", a), side("b", run(document=other_target)), rng=random.Random(0))
    assert found.like.alike
    assert not found.like.same_scenario_hash
    longer = {**DOCUMENT, "phases": [DOCUMENT["phases"][0], {**DOCUMENT["phases"][1], "duration_s": 5}]}
    with pytest.raises(CompareRefused) as refused:
        compare(side("a", a), side("b", run(document=longer)), rng=random.Random(0))
    assert "scenario.phases[1].duration_s: 4.0 against 5.0" in refused.value.reasons
    assert "--allow-unlike" in refused.value.reasons[-1]
    anyway = compare(side("a", a), side("b", run(document=longer)), rng=random.Random(0), allow_unlike=True)
    assert any("compared although unlike" in note for note in anyway.notes)


def test_other_score_versions_a_sweep_beside_a_run_and_a_run_that_measured_nothing_are_refused() -> None:
    a = run()
    with pytest.raises(CompareRefused, match="score_version"):
        compare(side("a", a), side("b", {**a, "score_version": "0"}), rng=random.Random(0))
    with pytest.raises(CompareRefused, match="A is a run and B a sweep"):
        compare(side("a", a), side("b", {**a, "kind": "sweep"}), rng=random.Random(0))
    with pytest.raises(CompareRefused, match=r"B \(b\) measured nothing \(status failed\)"):
        compare(side("a", a), side("b", {**a, "phases": [], "status": "failed"}), rng=random.Random(0))
    broken = {**a, "phases": [{"name": "calm"}]}
    with pytest.raises(CompareRefused, match="lacks what compare reads"):
        compare(side("a", a), side("b", broken), rng=random.Random(0))


def test_what_neither_test_can_vouch_for_is_said() -> None:
    a = run()
    limited = {**a, "verdicts": [{"name": "generator_limited", "summary": "behind"}]}
    found = compare(side("a", a), side("b", limited), rng=random.Random(0))
    assert found.notes == ("B: its generator could not keep its schedule, so its figures describe the client",)


def test_an_older_document_without_distributions_shows_its_percentiles_untested() -> None:
    a, b = run(), run(slower_burst=1.3)
    for phase in b["phases"]:
        del phase["distributions"]
    found = compare(side("a", a), side("b", b), rng=random.Random(0))
    p50 = figures(found, "phase burst")["e2e_p50_ms"]
    assert p50.change is Change.NOT_TESTED
    assert p50.b is not None
    assert p50.a is not None
    assert p50.b > p50.a
    assert "only its percentiles" in (p50.note or "")


def test_each_traffic_class_is_compared_in_its_own_scopes() -> None:
    a, b = run(), run(slower_burst=1.3, burst_failures=10)
    for document in (a, b):  # a class holding every request: its figures are the phase's own
        document["classes"] = [{"name": "chat", "phases": document["phases"]}]
    b["classes"].append({"name": "batch", "phases": b["phases"]})  # only B has it: nothing to compare it with
    found = compare(side("a", a), side("b", b), rng=random.Random(0))
    scopes = list(dict.fromkeys(f.scope for f in found.figures))
    assert scopes == ["phase calm", "phase burst", "class chat · phase calm", "class chat · phase burst", "run"]
    assert figures(found, "class chat · phase burst")["on_time_share"].change is Change.REGRESSED
