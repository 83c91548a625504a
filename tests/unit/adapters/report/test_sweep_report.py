"""The HTML sweep report: charts against the offered rate for every retry variant with usable capacity and
the cliff marked, every trial in the steps table with its flags, a comparison of variants, and the same
self-containment and escaping as run reports."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from cliffwatch.adapters.report.markup import num
from cliffwatch.adapters.report.render import (
    ReportInvalid,
    check_report_document,
    render_report,
    render_sweep_report,
)
from cliffwatch.adapters.report.sweep_charts import rate_points
from cliffwatch.domain.capacity.capacity import Interval
from cliffwatch.domain.capacity.drift import Disagreement, DriftReading, TargetDrift
from cliffwatch.domain.capacity.speed_drift import LatencyReading, SpeedShift
from report_kit import report_data

FIXTURE = Path(__file__).parents[3] / "fixtures" / "reports" / "sweep-retries.json"
VARIANT_CHARTS = ("throughput", "attainment", "latency-ttft", "latency-e2e")


@pytest.fixture
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return loaded


def frames(page: str) -> dict[str, dict[str, Any]]:
    return {frame["id"]: frame for frame in report_data(page)["frames"]}


def chart(frame: dict[str, Any], suffix: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in frame["charts"] if c["id"] == f"{frame['id']}-{suffix}")
    return found


def series(spec: dict[str, Any], label: str) -> list[float | None]:
    values: list[float | None] = next(s["values"] for s in spec["series"] if s["label"] == label)
    return values


def test_the_fixture_is_a_real_sweep_with_two_variants_and_a_cliff(document: dict[str, Any]) -> None:
    assert document["kind"] == "sweep"
    assert [v["variant"] for v in document["variants"]] == ["none", "immediate:3"]
    for variant in document["variants"]:
        assert variant["result"]["usable_rps"] is not None
        assert variant["result"]["first_bad_rps"] is not None


def test_every_variant_has_its_charts_over_the_measured_rates(document: dict[str, Any]) -> None:
    page = render_sweep_report(document)
    found = frames(page)
    assert list(found) == ["v0", "v1", "cmp"]
    for index, variant in enumerate(document["variants"]):
        result, frame = variant["result"], found[f"v{index}"]
        rates = sorted({step["rate"] for step in result["steps"]})
        assert frame["x"] == rates
        assert frame["x_label"] == "offered rate (req/s)"
        assert [c["id"] for c in frame["charts"]] == [f"v{index}-{name}" for name in VARIANT_CHARTS]
        for spec in frame["charts"]:
            assert f'data-chart="{spec["id"]}"' in page
            assert all(len(s["values"]) == len(rates) for s in spec["series"])
        # Goodput is the trials' mean, tokens/s and attainment the pooled figures the search judged.
        throughput = chart(frame, "throughput")
        by_rate = {r["rate"]: r["pooled"] for r in result["rates"]}
        for rate, goodput, tokens in zip(
            rates, series(throughput, "goodput (on time)"), series(throughput, "output tokens"), strict=True
        ):
            trials = [s["goodput_rps"] for s in result["steps"] if s["rate"] == rate]
            assert goodput == pytest.approx(sum(trials) / len(trials))
            assert tokens == pytest.approx(by_rate[rate]["tokens_per_s"])
        assert {a["scale"]: a["side"] for a in throughput["axes"]} == {"rps": "left", "tps": "right"}
        attainment = chart(frame, "attainment")
        assert series(attainment, "attainment") == [pytest.approx(by_rate[r]["attainment"] * 100) for r in rates]
        assert series(attainment, "CI low") == [pytest.approx(by_rate[r]["interval"]["low"] * 100) for r in rates]
        assert attainment["fill_between"] == [[1, 2]]
        assert series(attainment, f"target {result['target'] * 100:g} %") == [result["target"] * 100] * len(rates)
        e2e = chart(frame, "latency-e2e")
        slo = document["scenario"]["slo"]["e2e_ms"]
        assert series(e2e, f"SLO {slo:g} ms") == [slo] * len(rates)
        worst = [max(s["e2e_ms"]["p99"] for s in result["steps"] if s["rate"] == r) for r in rates]
        assert series(e2e, "E2E p99") == pytest.approx(worst)


def test_usable_capacity_and_the_cliff_are_marked_on_each_variant(document: dict[str, Any]) -> None:
    found = frames(render_sweep_report(document))
    for index, variant in enumerate(document["variants"]):
        result = variant["result"]
        markers = {m["kind"]: m for m in found[f"v{index}"]["markers"]}
        assert markers["usable"]["at"] == result["usable_rps"]
        assert markers["usable"]["label"] == f"usable {result['usable_rps']:g} req/s"
        assert markers["cliff"]["at"] == result["first_bad_rps"]
        assert "invalid" not in markers


def test_the_page_says_the_verdict_usable_capacity_peaks_and_why_the_search_ended(document: dict[str, Any]) -> None:
    page = render_sweep_report(document)
    first = document["variants"][0]["result"]
    verdict = page[page.index('id="verdict"') : page.index("</section>", page.index('id="verdict"'))]
    assert f"usable {first['usable_rps']:g} req/s" in verdict
    assert first["verdict"].replace("&", "&amp;") in verdict
    section = page[page.index('id="variant-0"') :]
    for text in ("usable capacity", "cliff (first bad rate)", "peak output tokens/s", "peak completions/s",
                 "cliff ratio", "decision rule", first["finished_because"]):  # fmt: skip
        assert text in section, text


def test_the_sweeps_warnings_are_under_the_headline_and_a_document_without_them_has_none(
    document: dict[str, Any],
) -> None:
    assert "sweep-warning" not in render_sweep_report(document)  # older documents have no "warnings"
    document["warnings"] = ["steps of 3 s (warm-up + window) are shorter than 10 × the 1000 ms TTFT SLO (10 s): …"]
    page = render_sweep_report(document)
    verdict = page[page.index('id="verdict"') : page.index("</section>", page.index('id="verdict"'))]
    assert (
        '<p class="warn sweep-warning">Warning: steps of 3 s (warm-up + window) are shorter than 10 × the 1000 ms '
        "TTFT SLO (10 s): …</p>"
    ) in verdict


def test_the_steps_table_has_every_trial_with_its_flags(document: dict[str, Any]) -> None:
    document = copy.deepcopy(document)
    result = document["variants"][0]["result"]
    top = max(result["steps"], key=lambda s: s["rate"])
    top["generator_limited"] = True
    top["generator_reasons"] = ["schedule lag p99 120 ms over 50 ms"]
    next(r for r in result["rates"] if r["rate"] == top["rate"])["verdict"] = "invalid"
    page = render_sweep_report(document)
    section = page[page.index('id="variant-0"') : page.index('id="variant-1"')]
    steps = section[section.index('table class="numbers steps"') :]
    assert steps.count("<tr>") == len(result["steps"]) + 1  # the head's row and one per trial
    assert "invalid (generator)</span> schedule lag p99 120 ms over 50 ms" in steps
    flagged = sum(1 for r in result["rates"] if r["on_point_estimate"])
    assert section.count("on point estimate</span>") >= flagged > 0
    markers = {m["kind"]: m for m in frames(page)["v0"]["markers"]}
    assert markers["invalid"]["at"] == top["rate"]


def test_several_variants_are_compared_and_one_is_not(document: dict[str, Any]) -> None:
    page = render_sweep_report(document)
    assert 'id="comparison"' in page
    comparison = frames(page)["cmp"]
    assert [c["id"] for c in comparison["charts"]] == ["cmp-goodput", "cmp-amplification"]
    assert [s["label"] for s in comparison["charts"][0]["series"]] == ["none", "immediate:3"]
    assert [m["at"] for m in comparison["markers"]] == [v["result"]["usable_rps"] for v in document["variants"]]
    document["variants"] = document["variants"][:1]
    single = render_sweep_report(document)
    assert 'id="comparison"' not in single
    assert list(frames(single)) == ["v0"]


def test_hostile_strings_cannot_close_the_data_script_or_inject_markup(document: dict[str, Any]) -> None:
    hostile = '</script><script>alert("x")</script><!-- <img src=x onerror=alert(1)> & \u2028'
    document["scenario"]["name"] = hostile
    document["scenario"]["description"] = hostile
    document["reason"] = hostile
    document["status"] = "failed"
    variant = document["variants"][0]
    variant["variant"] = hostile
    variant["retry"] = hostile
    variant["result"]["verdict"] = hostile
    variant["result"]["finished_because"] = hostile
    variant["result"]["evidence"][hostile] = hostile
    variant["result"]["unit"] = hostile
    variant["result"]["steps"][0]["generator_limited"] = True
    variant["result"]["steps"][0]["generator_reasons"] = [hostile]
    document["warnings"] = [hostile]
    page = render_sweep_report(document)
    assert len(re.findall(r"<script\b", page, re.IGNORECASE)) == 3
    assert "<script>alert" not in page
    assert "<img" not in page
    data = report_data(page)
    assert any(s["label"] == hostile for c in data["frames"][-1]["charts"] for s in c["series"])


def test_the_page_references_nothing_outside_itself(document: dict[str, Any]) -> None:
    page = render_sweep_report(document)
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.IGNORECASE)
    assert not re.search(r"<link\b", page, re.IGNORECASE)
    assert not re.search(r"\b(src|href)\s*=\s*['\"]?(https?:)?//", page, re.IGNORECASE)


def test_a_failed_sweep_without_variants_still_has_a_report(document: dict[str, Any]) -> None:
    document.update(status="failed", reason="the built-in target stopped", variants=[])
    page = render_sweep_report(document)
    assert "no retry variant finished its search" in page
    assert "The sweep failed: the built-in target stopped" in page
    assert report_data(page)["frames"] == []


def test_concurrency_sweeps_are_plotted_against_clients(document: dict[str, Any]) -> None:
    document["spec"]["mode"] = "concurrency"
    for variant in document["variants"]:
        variant["result"]["unit"] = "clients"
    frame = frames(render_sweep_report(document))["v0"]
    assert frame["x_label"] == "concurrency (closed-loop clients)"
    assert frame["x_unit"] == "clients"


def test_the_document_kind_chooses_the_report(document: dict[str, Any]) -> None:
    assert report_data(render_report(document))["kind"] == "sweep"
    check_report_document(document)
    del document["variants"]
    with pytest.raises(ReportInvalid, match="not a cliffwatch sweep result: missing variants"):
        check_report_document(document)
    with pytest.raises(ReportInvalid, match="not a cliffwatch run result: missing"):
        check_report_document({"kind": "run"})


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d.update(variants={}), "variants has the wrong type"),
        (lambda d: d["variants"].append({"variant": "x"}), r"variants\[2\] has no result object"),
        (lambda d: d.update(spec=[]), "spec has the wrong type"),
    ],
)
def test_a_malformed_sweep_document_is_refused(document: dict[str, Any], change: Any, reason: str) -> None:
    change(document)
    with pytest.raises(ReportInvalid, match=reason):
        render_sweep_report(document)


def test_rate_points_pool_trials_and_take_the_worst_latency() -> None:
    step = {"rate": 10.0, "offered": 10, "on_time": 10, "goodput_rps": 10.0, "sent_rate": 10.0,
            "ttft_ms": {"p50": 10, "p90": 20, "p99": 30}, "e2e_ms": {"p50": 100, "p90": 200, "p99": 300},
            "amplification": 1.0}  # fmt: skip
    second = {**step, "trial": 2, "goodput_rps": 8.0, "on_time": 8, "e2e_ms": {"p50": 90, "p90": 250, "p99": 900}}
    pooled = {"attainment": 0.9, "interval": {"low": 0.7, "high": 0.97}, "tokens_per_s": 150.0,
              "completions_per_s": 9.5}  # fmt: skip
    result = {"steps": [step, second], "rates": [{"rate": 10.0, "verdict": "bad", "on_point_estimate": True,
                                                   "pooled": pooled}]}  # fmt: skip
    (point,) = rate_points(result)
    assert (point.trials, point.verdict, point.on_point_estimate) == (2, "bad", True)
    assert point.goodput_rps == 9.0
    assert (point.attainment, point.low, point.high, point.tokens_per_s) == (0.9, 0.7, 0.97, 150.0)
    assert (point.latency_ms["e2e_p50"], point.latency_ms["e2e_p99"], point.latency_ms["ttft_p99"]) == (100, 900, 30)


def test_each_traffic_classs_attainment_is_charted_and_tabled_per_rate(document: dict[str, Any]) -> None:
    """Two trials at one rate pool each class's counts: chat 9 of 10 and 8 of 10 on time is 85 %."""
    result = document["variants"][0]["result"]
    result["steps"].insert(1, {**result["steps"][0], "trial": 2})
    for step in result["steps"]:
        offered = step["offered"]
        step["classes"] = {"chat": {"offered": 10, "on_time": 9 if step["trial"] == 1 else 8, "attainment": 0.9},
                           "batch": {"offered": offered - 10, "on_time": 0, "attainment": 0.0}}  # fmt: skip
    page = render_sweep_report(document)
    spec = chart(frames(page)["v0"], "attainment")
    points = rate_points(result)
    pooled = {p.rate: p.classes["chat"] for p in points}
    assert series(spec, "chat on time") == [round(pooled[p.rate] * 100, 4) for p in points]
    two_trials = [p for p in points if p.trials == 2]
    assert two_trials
    assert two_trials[0].classes["chat"] == pytest.approx(0.85)
    assert series(spec, "batch on time") == [0.0] * len(points)
    assert "on time by class" in page
    assert "chat 90.0 % · batch 0.0 %" in page


def test_a_luck_corrected_rate_shows_its_corrected_attainment_and_the_correction_is_explained(
    document: dict[str, Any],
) -> None:
    assert "luck-corrected" not in render_sweep_report(document)  # nothing corrected: no column, no note
    document = copy.deepcopy(document)
    result = document["variants"][0]["result"]
    pooled = result["rates"][0]["pooled"]
    pooled["corrected_on_time"], pooled["corrected_attainment"] = pooled["offered"] * 0.987, 0.987
    reason = "a 320-ms single-slot reference fits the steps (correlation 0.98, …)"
    result["luck_correction"] = {"applied": True, "slope": 1.0, "correlation": 0.98, "events": 31, "steps": 9,
                                 "reason": reason}  # fmt: skip
    page = render_sweep_report(document)
    section = page[page.index('id="variant-0"') : page.index('id="variant-1"')]
    rates = section[section.index('table class="numbers rates"') :]
    assert "<th>luck-corrected</th>" in rates
    assert "98.7 %" in rates
    assert "<em>luck-corrected</em>: the attainment corrected for the luck" in section
    assert "<dt>arrival luck</dt><dd>corrected: a 320-ms single-slot reference fits the steps" in section


def test_a_drifting_target_is_named_in_the_facts_and_its_recheck_and_slower_trial_are_flagged(
    document: dict[str, Any],
) -> None:
    assert "<dt>target drift</dt>" not in render_sweep_report(document)  # nothing drifted: no fact
    document = copy.deepcopy(document)
    result = document["variants"][0]["result"]
    first = result["steps"][0]
    recheck = {**first, "trial": first["trial"] + 1, "recheck": True, "started_s": 301.0}
    result["steps"].append(recheck)

    def reading(step: dict[str, Any], index: int, on_time: int) -> DriftReading:
        return DriftReading(rate=step["rate"], trial=step["trial"], step_index=index, started_s=step.get("started_s"),
                            offered=step["offered"], on_time=on_time, interval=Interval(low=0.0, high=1.0),
                            median_e2e_ms=100.0, recheck=bool(step.get("recheck")))  # fmt: skip

    pair = Disagreement(earlier=reading({**first, "started_s": 2.0}, 0, first["offered"]),
                        later=reading(recheck, len(result["steps"]) - 1, first["offered"] // 2))  # fmt: skip
    result["target_drift"] = TargetDrift(confidence=0.999, disagreements=(pair,)).to_dict()
    rate = next(r for r in result["rates"] if r["rate"] == first["rate"])
    rate["slowest"] = {**rate["pooled"], "trials": 1, "trial": recheck["trial"]}
    page = render_sweep_report(document)
    section = page[page.index('id="variant-0"') : page.index('id="variant-1"')]

    assert (f"<dt>target drift</dt><dd><span class=\"flag\">{num(first['rate'])} req/s: trial 1 (step 1, at 2 s) "
            f"100.0 % on time, the recheck (step {len(result['steps'])}, at 301 s) 50.0 % on time: -50.0 points, "
            "median e2e +0 ms</span>") in section  # fmt: skip
    assert f'{recheck["trial"]} <span class="flag">recheck</span>' in section
    assert f"target drifted: judged on trial {recheck['trial']}</span>" in section


def test_a_recheck_whose_median_latency_moved_is_named_in_the_facts(document: dict[str, Any]) -> None:
    document = copy.deepcopy(document)
    result = document["variants"][0]["result"]
    first = result["steps"][0]
    recheck = {**first, "trial": first["trial"] + 1, "recheck": True, "started_s": 301.0}
    result["steps"].append(recheck)
    earlier = LatencyReading(trial=1, step_index=0, started_s=2.0, requests=5, median_ms=107.0)
    later = LatencyReading(trial=recheck["trial"], step_index=len(result["steps"]) - 1, started_s=301.0, requests=5,
                           median_ms=173.0, recheck=True)  # fmt: skip
    shift = SpeedShift(rate=first["rate"], signal="e2e", earlier=earlier, later=later, spread=0.05, df=8.0, t=9.0)
    result["target_drift"] = TargetDrift(confidence=0.999, latency=(shift,)).to_dict()
    page = render_sweep_report(document)
    section = page[page.index('id="variant-0"') : page.index('id="variant-1"')]

    assert (f"<dt>target drift</dt><dd><span class=\"flag\">{num(first['rate'])} req/s: median e2e 107 ms in "
            f"trial 1 (step 1, at 2 s), 173 ms in the recheck (step {len(result['steps'])}, at 301 s): +62 %"
            "</span>") in section  # fmt: skip
