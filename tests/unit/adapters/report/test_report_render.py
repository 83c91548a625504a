"""The HTML run report: self-contained, safe against hostile strings, and carrying every chart's data."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from cliffwatch.adapters.report.assets import UPLOT_VERSION, load_assets, read_asset
from cliffwatch.adapters.report.render import ReportInvalid, render_run_report, script_json
from report_kit import report_data

FIXTURE = Path(__file__).parents[3] / "fixtures" / "reports" / "slow-backend.json"
CHART_IDS = ("throughput", "latency-ttft", "latency-e2e", "outcomes", "concurrency")


@pytest.fixture
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return loaded


def test_the_page_references_nothing_outside_itself(document: dict[str, Any]) -> None:
    page = render_run_report(document)
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.IGNORECASE)
    assert not re.search(r"<link\b", page, re.IGNORECASE)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", page, re.IGNORECASE)
    assert not re.search(r"\b(src|href)\s*=\s*['\"]?(https?:)?//", page, re.IGNORECASE)
    assert not re.search(r"@font-face", page, re.IGNORECASE)
    assert load_assets().uplot_js in page
    assert load_assets().report_js in page


def test_hostile_strings_cannot_close_the_data_script_or_inject_markup(document: dict[str, Any]) -> None:
    hostile = '</script><script>alert("x")</script><!-- <img src=x onerror=alert(1)> & \u2028'
    document["scenario"]["description"] = hostile
    document["scenario"]["name"] = hostile
    document["verdicts"] = [{"name": hostile, "summary": hostile}]
    document["faults"][0]["fault"] = hostile
    page = render_run_report(document)
    # Exactly our three scripts (data, uPlot, report.js) and nothing the document brought.
    assert len(re.findall(r"<script\b", page, re.IGNORECASE)) == 3
    assert "<script>alert" not in page
    assert "<img" not in page
    assert "<!-- <img" not in page
    data = report_data(page)
    assert any(band["label"] == hostile for band in data["bands"])


def test_script_json_escapes_what_ends_a_script_and_round_trips() -> None:
    value = {"a": "</script>", "b": "<!--", "c": "&amp;", "d": "\u2028\u2029", "nan": float("nan")}
    text = script_json(value)
    assert "<" not in text
    assert ">" not in text
    assert "&" not in text
    assert json.loads(text) == {**value, "nan": None}


def test_every_chart_carries_its_data_and_units(document: dict[str, Any]) -> None:
    data = report_data(render_run_report(document))
    rows = document["timeseries"]
    assert data["x"] == [row["t"] + 0.5 for row in rows]
    charts = {chart["id"]: chart for chart in data["charts"]}
    assert tuple(charts) == CHART_IDS
    for chart in charts.values():
        assert chart["axes"]
        assert all(axis["label"] for axis in chart["axes"])
        for series in chart["series"]:
            assert series["label"]
            assert len(series["values"]) == len(rows)
    throughput = {s["label"]: s for s in charts["throughput"]["series"]}
    assert throughput["offered"]["values"] == [row["offered"] for row in rows]
    assert throughput["on-time completions"]["values"] == [row["on_time_completions"] for row in rows]
    assert throughput["output tokens"]["scale"] != throughput["offered"]["scale"]  # its own axis
    ttft = {s["label"]: s for s in charts["latency-ttft"]["series"]}
    slo = document["scenario"]["slo"]["ttft_ms"]
    assert ttft[f"SLO {slo:g} ms"]["values"] == [slo] * len(rows)
    assert ttft["TTFT p99"]["values"] == [row["ttft_p99_ms"] for row in rows]


def test_outcomes_stack_in_order_and_the_legend_shows_each_own_count(document: dict[str, Any]) -> None:
    data = report_data(render_run_report(document))
    outcomes = next(c for c in data["charts"] if c["id"] == "outcomes")
    labels = [s["label"] for s in outcomes["series"]]
    assert labels == [
        "on time", "late", "shed (429/503)", "timeout", "incomplete (hollow 2xx)", "error", "redirect (3xx)", "not sent"
    ]  # fmt: skip
    top = outcomes["series"][-1]["values"]
    assert top == [row["offered"] for row in document["timeseries"]]  # every offered request in one band
    assert outcomes["series"][3]["shown"] == [row["timeout"] for row in document["timeseries"]]


def test_phase_and_fault_bands_come_from_actual_times(document: dict[str, Any]) -> None:
    data = report_data(render_run_report(document))
    phases = [b for b in data["bands"] if b["kind"] == "phase"]
    assert [(b["label"], b["start"]) for b in phases] == [(p["name"], p["actual_start_s"]) for p in document["phases"]]
    on = next(e for e in document["faults"] if e["action"] == "on")
    off = next(e for e in document["faults"] if e["action"] == "off")
    [fault] = [b for b in data["bands"] if b["kind"] == "fault"]
    assert (fault["start"], fault["end"], fault["label"]) == (on["at_s"], off["at_s"], on["fault"])


def test_a_fault_never_removed_runs_to_the_end_of_the_run(document: dict[str, Any]) -> None:
    for event in document["faults"]:
        if event["action"] == "off":
            event["ok"] = False
    data = report_data(render_run_report(document))
    [fault] = [b for b in data["bands"] if b["kind"] == "fault"]
    assert fault["end"] == document["duration_s"]
    assert fault["detail"] == "not removed"


def test_the_text_shows_verdict_score_version_components_and_evidence(document: dict[str, Any]) -> None:
    page = render_run_report(document)
    score = document["score"]
    assert ("PASS" if document["passed"] else "FAIL") in page
    assert f"score formulas v{document['score_version']}" in page
    for component in score["components"]:
        assert f"<strong>{component['name']}</strong>" in page
        for key in component["evidence"]:
            assert f"<dt>{key}</dt>" in page
    for phase in document["scenario"]["phases"]:
        assert phase["arrival"] in page


def test_a_separate_time_series_replaces_the_documents_own(document: dict[str, Any]) -> None:
    rows = document.pop("timeseries")
    data = report_data(render_run_report(document, rows[:5]))
    assert len(data["x"]) == 5


def test_a_result_without_a_time_series_still_renders_and_says_so(document: dict[str, Any]) -> None:
    del document["timeseries"]
    page = render_run_report(document)
    assert "no per-second time series" in page
    assert report_data(page)["x"] == []


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ([], "expected a JSON object"),
        ({"run_id": "x"}, "missing scenario, score, phases"),
        ({"run_id": "x", "scenario": {}, "score": [], "phases": []}, "score has the wrong type"),
    ],
)
def test_a_document_that_is_not_a_run_result_is_refused(doc: Any, reason: str) -> None:
    with pytest.raises(ReportInvalid, match=reason):
        render_run_report(doc)


def test_rendering_leaves_the_document_unchanged(document: dict[str, Any]) -> None:
    before = copy.deepcopy(document)
    render_run_report(document)
    assert document == before


def test_the_vendored_files_are_the_ones_the_provenance_names() -> None:
    provenance = read_asset("vendor/PROVENANCE.md")
    assert f"uplot@{UPLOT_VERSION}" in provenance
    for name in ("uPlot.iife.min.js", "uPlot.min.css", "LICENSE"):
        digest = hashlib.sha256(read_asset(f"vendor/{name}").encode("utf-8")).hexdigest()
        assert f"| `{name}` |" in provenance
        assert digest in provenance, name
    assert f"(v{UPLOT_VERSION})" in read_asset("vendor/uPlot.iife.min.js")[:100]


def watched(document: dict[str, Any]) -> dict[str, Any]:
    """The fixture as a run with target.metrics would have left it: the server's series in every row, their
    summary per phase, and the view itself."""
    rows = document["timeseries"]
    for row in rows:
        row["server"] = {"waiting": float(row["t"]), "running": 4.0, "kv_cache_usage": 0.5,
                         "generation_tokens": 100.0, "queue_time": None, "my_depth": 2.0}  # fmt: skip
    for phase in document["phases"]:
        phase["server"] = {"waiting": {"first": 0.0, "last": 9.0, "min": 0.0, "max": 9.0, "mean": 4.5,
                                       "slope_per_s": 1.0, "points": 10}}  # fmt: skip
    names = [
        ("waiting", "waiting", "vllm:num_requests_waiting", "requests"),
        ("running", "running", "r", "requests"),
        ("kv_cache_usage", "kv_cache_usage", "max(kv)", "fraction"),
        ("generation_tokens", "generation_tokens", "rate(g)", "tokens/s"),
        ("my_depth", None, "depth", ""),
    ]
    document["server_metrics"] = {
        "url": "http://127.0.0.1:8000/metrics", "engine": "vllm", "interval_ms": 1000.0, "scrapes": len(rows) + 1,
        "failed": 1, "failures": {"HTTP 503": 1}, "notes": ["preemptions: never had a value </p>"],
        "times_s": [float(r["t"]) for r in rows],
        "series": [{"name": n, "signal": s, "expr": e, "unit": u, "values": []} for n, s, e, u in names],
    }  # fmt: skip
    return document


def test_the_servers_series_are_charted_on_the_runs_axis_beside_the_clients(document: dict[str, Any]) -> None:
    document = watched(document)
    rows = document["timeseries"]
    data = report_data(render_run_report(document))
    charts = {chart["id"]: chart for chart in data["charts"]}
    assert tuple(charts) == (*CHART_IDS, "server-queue", "server-work", "server-own")
    queue = {s["label"]: s["values"] for s in charts["server-queue"]["series"]}
    assert queue["waiting (server queue)"] == [float(r["t"]) for r in rows]
    assert queue["mean queue time"] == [None] * len(rows)  # no value: a gap, not a zero
    work = {s["label"]: s["values"] for s in charts["server-work"]["series"]}
    assert work["KV cache in use"] == [50.0] * len(rows)  # shown in percent
    assert work["output tokens (client)"] == [row["output_tokens"] for row in rows]
    assert [s["label"] for s in charts["server-own"]["series"]] == ["my_depth"]


def test_the_server_section_says_what_was_scraped_what_failed_and_each_phases_readings(
    document: dict[str, Any],
) -> None:
    page = render_run_report(watched(document))
    section = page[page.index('<section id="server">') :]
    section = section[: section.index("</section>")]
    assert "http://127.0.0.1:8000/metrics" in section
    assert "Failed scrapes: HTTP 503 (1)." in section
    assert "preemptions: never had a value &lt;/p&gt;" in section  # escaped like every value
    assert "<code>vllm:num_requests_waiting</code>" in section
    assert "4.5 / 9" in section


def test_a_run_that_scraped_nothing_has_no_server_section_or_charts(document: dict[str, Any]) -> None:
    page = render_run_report(document)
    assert '<section id="server">' not in page
    assert not any(c["id"].startswith("server") for c in report_data(page)["charts"])


def test_the_answers_server_state_headers_are_tabled_per_phase(document: dict[str, Any]) -> None:
    document["phases"][1]["state_headers"] = {
        "x-queue-time": {"unit": "ms", "responses": 40, "min": 0.0, "p50": 12.0, "p90": 80.0, "max": 410.0},
        "retry-after": {"unit": "s", "responses": 3, "min": 1.0, "p50": 1.0, "p90": 2.0, "max": 2.0},
    }
    page = render_run_report(document)
    section = page[page.index('<section id="state-headers">') :]
    section = section[: section.index("</section>")]
    assert "<code>x-queue-time</code>" in section
    assert "12 <span class='muted'>(0–410, 40 answers)</span>" in section
    assert section.count("<tr>") == 3  # the head and one row per header
    assert '<section id="state-headers">' not in render_run_report(json.loads(FIXTURE.read_text(encoding="utf-8")))


def with_classes(document: dict[str, Any]) -> dict[str, Any]:
    """The fixture as a run with two traffic classes would have left it: each row's share per class, each
    class's phases and score, and the isolation component."""
    for row in document["timeseries"]:
        row["classes"] = {
            "interactive": {"offered": 2, "on_time_completions": 1 if row["t"] % 2 else 2, "ttft_p99_ms": 90.0},
            "batch": {"offered": 0, "on_time_completions": 0, "ttft_p99_ms": None},
        }
    phase = document["phases"][0]
    document["classes"] = [
        {"name": "interactive", "phases": [{**phase, "on_time_ratio": 0.24, "offered_rps": 2.0}]},
        {"name": "batch", "phases": [{**phase, "on_time_ratio": 0.9, "offered_rps": 4.0}]},
    ]
    document["score"]["classes"] = [
        {"name": "interactive", "value": 25.0, "summary": "interactive <b>lost</b> its goodput", "components": []},
        {"name": "batch", "value": 80.0, "summary": "batch kept its goodput", "components": []},
    ]
    document["score"]["components"].append(
        {
            "name": "isolation",
            "value": 0.24,
            "weight": 0.25,
            "summary": "interactive kept 24% of its goodput",
            "evidence": {},
        }
    )
    return document


def test_each_class_is_charted_by_its_own_on_time_share_and_tail(document: dict[str, Any]) -> None:
    document = with_classes(document)
    rows = document["timeseries"]
    charts = {chart["id"]: chart for chart in report_data(render_run_report(document))["charts"]}
    assert tuple(charts) == (*CHART_IDS, "classes-on-time", "classes-ttft")
    on_time = {s["label"]: s["values"] for s in charts["classes-on-time"]["series"]}
    assert on_time["interactive on time"] == [50.0 if row["t"] % 2 else 100.0 for row in rows]
    assert on_time["batch on time"] == [None] * len(rows)  # offered nothing: a gap, not a 0 %
    assert on_time["batch offered"] == [0.0] * len(rows)
    ttft = {s["label"]: s["values"] for s in charts["classes-ttft"]["series"]}
    assert ttft["interactive p99 TTFT"] == [90.0] * len(rows)
    dashes = [tuple(s["dash"]) for s in charts["classes-on-time"]["series"]]
    assert len(set(dashes)) == len(dashes)  # every line its own dash: readable in grey print


def test_the_classes_section_tables_each_class_by_phase_with_its_score(document: dict[str, Any]) -> None:
    page = render_run_report(with_classes(document))
    section = page[page.index('<section id="classes">') :]
    section = section[: section.index("</section>")]
    assert "interactive kept 24% of its goodput" in section
    assert "<strong>interactive</strong> <span class='muted'>25/100</span>" in section
    assert "interactive &lt;b&gt;lost&lt;/b&gt; its goodput" in section  # escaped like every value
    assert "<td>24 %</td>" in section
    assert "<td>90 %</td>" in section
    assert section.count("<tr>") == 3  # the head and one row per class and phase


def test_a_run_without_classes_has_no_class_section_or_charts(document: dict[str, Any]) -> None:
    page = render_run_report(document)
    assert '<section id="classes">' not in page
    assert not any(c["id"].startswith("classes") for c in report_data(page)["charts"])


def test_the_conversations_section_tables_how_each_phases_conversations_ended(document: dict[str, Any]) -> None:
    assert '<section id="conversations">' not in render_run_report(document)
    counts = {"started": 40, "completed": 30, "completed_on_time": 9, "failed": 2, "cut": 8, "turns": 120,
              "turns_on_time": 100, "on_time_ratio": 0.28125, "turns_per_conversation": 3.0}  # fmt: skip
    document["conversations"] = {"phases": [{"name": "burst<b>", **counts}], "total": counts}
    page = render_run_report(document)
    section = page[page.index('<section id="conversations">') :]
    section = section[: section.index("</section>")]
    assert "burst&lt;b&gt;" in section
    assert section.count("<tr>") == 3  # the head, the phase and all
    assert "<td>28 %</td>" in section


def test_a_run_sent_from_worker_processes_tables_what_each_sent_and_how_it_ended(document: dict[str, Any]) -> None:
    doc = copy.deepcopy(document)
    doc["generator"]["workers"] = [
        {"index": 0, "pid": 4242, "planned": 500, "finished": 500, "lost": 0, "cpu_busy": 0.41,
         "max_event_loop_stall_ms": 3.2, "failure": None},
        {"index": 1, "pid": 4243, "planned": 500, "finished": 120, "lost": 380, "cpu_busy": 0.12,
         "max_event_loop_stall_ms": 2.0, "failure": "died (exit code -9)", "niceness": 15},
    ]  # fmt: skip
    page = render_run_report(doc)
    section = page[page.index('<section id="generator">') :]
    section = section[: section.index("</section>")]
    assert "Worker processes" in section
    assert re.search(r"<td>2</td><td>4243</td><td>500</td><td>120</td><td>380</td>", section), section
    assert "<th>nice</th>" in section
    assert re.search(r"<td>2</td><td>15</td><td>died \(exit code -9\)</td>", section), section  # its stall, nice
    assert "died (exit code -9)" in section
    assert "Worker processes" not in render_run_report(document)


def test_a_run_sent_from_a_clusters_nodes_names_each_workers_node_and_tables_the_nodes(
    document: dict[str, Any],
) -> None:
    doc = copy.deepcopy(document)
    doc["generator"]["workers"] = [
        {"index": 0, "pid": 31, "node": "10.0.0.7 (ab12cd34)", "planned": 500, "finished": 500, "lost": 0,
         "cpu_busy": 0.4, "max_event_loop_stall_ms": 3.0, "failure": None, "clock_skew_ms": 0.42},
        {"index": 1, "pid": 32, "node": "10.0.0.8 (ef56ab78)", "planned": 500, "finished": 500, "lost": 0,
         "cpu_busy": 0.5, "max_event_loop_stall_ms": 2.0, "failure": None, "clock_skew_ms": 0.61},
    ]  # fmt: skip
    doc["generator"]["nodes"] = [
        {"node": "10.0.0.7 (ab12cd34)", "processes": 1, "planned": 500, "dispatched": 500, "finished": 500,
         "lost": 0, "max_cpu_busy": 0.4, "max_event_loop_stall_ms": 3.0, "clock_skew_ms": 0.42, "failed": 0},
        {"node": "10.0.0.8 (ef56ab78)", "processes": 1, "planned": 500, "dispatched": 500, "finished": 500,
         "lost": 0, "max_cpu_busy": 0.5, "max_event_loop_stall_ms": 2.0, "clock_skew_ms": 0.61, "failed": 0},
    ]  # fmt: skip
    page = render_run_report(doc)
    section = page[page.index('<section id="generator">') :]
    section = section[: section.index("</section>")]
    assert re.search(r"<td>2</td><td>10\.0\.0\.8 \(ef56ab78\)</td><td>0\.61</td><td>32</td>", section), section
    assert "<h3>Nodes</h3>" in section
    assert re.search(r"<td>10\.0\.0\.7 \(ab12cd34\)</td><td>1</td><td>500</td>", section), section


def test_seconds_that_offered_requests_and_completed_none_are_marked_on_the_latency_charts(
    document: dict[str, Any],
) -> None:
    """A collapsed second (everything timed out) is marked "no completion"; a second that offered nothing is not."""
    rows = document["timeseries"]
    rows[3] = {
        **rows[3],
        "offered": 5,
        "on_time": 0,
        "late": 0,
        "timeout": 5,
        "ttft_p50_ms": None,
        "ttft_p90_ms": None,
        "ttft_p99_ms": None,
        "e2e_p50_ms": None,
        "e2e_p90_ms": None,
        "e2e_p99_ms": None,
    }
    rows[4] = {**rows[4], "offered": 0, "on_time": 0, "late": 0, "ttft_p50_ms": None, "e2e_p50_ms": None}
    charts = {c["id"]: c for c in report_data(render_run_report(document))["charts"]}
    expected = [i for i, r in enumerate(rows) if r["offered"] > 0 and r["on_time"] + r["late"] == 0]
    assert 3 in expected
    assert 4 not in expected
    assert charts["latency-ttft"]["no_completion"] == expected
    assert charts["latency-e2e"]["no_completion"] == expected
    assert "no completion" in charts["latency-ttft"]["caption"]
    assert "no_completion" not in charts["throughput"]


def test_the_header_shows_times_and_the_duration_as_people_read_them(document: dict[str, Any]) -> None:
    document["started_at"] = "2026-12-01T18:32:53.481516+00:00"
    document["duration_s"] = 48.46
    page = render_run_report(document)
    assert "<dd>2026-12-01 18:32:53 UTC</dd>" in page
    assert "<dd>48.5 s</dd>" in page
    assert "18:32:53.481516" not in page.split('<script type="application/json"')[0]  # the data keeps it


def test_a_target_without_streams_has_no_ttft_and_no_second_is_marked_for_it(document: dict[str, Any]) -> None:
    """No TTFT in any second (plain HTTP) is not a collapse: only seconds whose requests all failed are marked."""
    for row in document["timeseries"]:
        row.update({"ttft_p50_ms": None, "ttft_p90_ms": None, "ttft_p99_ms": None})
    charts = {c["id"]: c for c in report_data(render_run_report(document))["charts"]}
    rows = document["timeseries"]
    collapsed = [i for i, r in enumerate(rows) if r["offered"] > 0 and r["on_time"] + r["late"] == 0]
    assert charts["latency-ttft"].get("no_completion", []) == collapsed
    assert len(collapsed) < len(rows) / 2
