"""``GET /api/v1/runs/{run_id}/report``: the HTML report of a run or a sweep, a status page before there is a
result, a 404 problem for an unknown id, viewers allowed, and headers that keep the page from reaching out."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from api_harness import Api

from cliffwatch.adapters.report.assets import script_hashes
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import RunEnd, TokenRole
from report_kit import report_data

SWEEP_FIXTURE = Path(__file__).parents[3] / "fixtures" / "reports" / "sweep-retries.json"
SWEEP = {"start": 4, "stop": 24, "step_s": 3, "warmup_s": 2, "cooldown_s": 0.5, "trials": 2,
         "arrival": "constant", "variants": ["none", "immediate:3"]}  # fmt: skip


def assert_locked_down(headers: Any) -> None:
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["X-Content-Type-Options"] == "nosniff"
    policy = {d.split()[0]: d.split()[1:] for d in headers["Content-Security-Policy"].split("; ")}
    assert policy["default-src"] == ["'none'"]
    assert policy["script-src"] == list(script_hashes())  # the page's own two scripts, nothing else
    assert len(script_hashes()) == 2
    assert policy["style-src"] == ["'unsafe-inline'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert not any("http" in source or source == "*" for sources in policy.values() for source in sources)


async def test_a_finished_runs_report_has_its_charts_over_time(api: Api) -> None:
    run = await api.queue()
    await api.finish(run["id"])
    reply = await api.call("GET", f"/api/v1/runs/{run['id']}/report", role=TokenRole.VIEWER)
    assert reply.status == 200
    assert_locked_down(reply.headers)
    data = report_data(reply.body)
    assert data["kind"] == "run"
    assert data["run_id"] == run["id"]
    rows = await api.store.timeseries(run["id"])
    assert len(data["x"]) == len(rows) > 0
    assert [c["id"] for c in data["charts"]] == ["throughput", "latency-ttft", "latency-e2e", "outcomes", "concurrency"]
    assert 'id="verdict"' in reply.body


async def test_a_finished_sweeps_report_has_its_charts_against_the_rate(api: Api) -> None:
    document = json.loads(SWEEP_FIXTURE.read_text(encoding="utf-8"))
    reply = await api.call("POST", "/api/v1/sweeps", role=TokenRole.OPERATOR,
                           json={"scenario": "burst-storm", "sweep": SWEEP})  # fmt: skip
    sweep_id = reply.body["id"]
    claimed = await api.store.claim_run(owner="t", now=api.clock(), lease_until=api.clock() + timedelta(minutes=5))
    assert claimed is not None
    end = RunEnd(status=RunStatus.SUCCEEDED, finished_at=api.clock(), result=document,
                 usable_rps=document["usable_rps"])  # fmt: skip
    assert await api.store.finish_run(sweep_id, owner="t", end=end)
    reply = await api.call("GET", f"/api/v1/runs/{sweep_id}/report", role=TokenRole.VIEWER)
    assert reply.status == 200
    assert_locked_down(reply.headers)
    data = report_data(reply.body)
    assert data["kind"] == "sweep"
    assert [f["id"] for f in data["frames"]] == ["v0", "v1", "cmp"]
    usable = {m["at"] for m in data["frames"][0]["markers"] if m["kind"] == "usable"}
    assert usable == {document["variants"][0]["result"]["usable_rps"]}


async def test_a_run_without_a_result_yet_gets_a_page_saying_where_it_stands(api: Api) -> None:
    queued = await api.queue()
    reply = await api.call("GET", f"/api/v1/runs/{queued['id']}/report", role=TokenRole.VIEWER)
    assert reply.status == 200
    assert_locked_down(reply.headers)
    assert "This run is queued" in reply.body
    assert report_data(reply.body)["charts"] == []
    await api.store.claim_run(owner="t", now=api.clock(), lease_until=api.clock() + timedelta(minutes=5))
    running = await api.call("GET", f"/api/v1/runs/{queued['id']}/report", role=TokenRole.VIEWER)
    assert "This run is running" in running.body


async def test_an_unknown_run_is_a_404_problem_and_no_token_a_401(api: Api) -> None:
    missing = await api.call("GET", "/api/v1/runs/no-such-run/report", role=TokenRole.VIEWER)
    assert missing.status == 404
    assert missing.headers["Content-Type"].startswith("application/problem+json")
    assert "no-such-run" in missing.body["detail"]
    queued = await api.queue()
    anonymous = await api.call("GET", f"/api/v1/runs/{queued['id']}/report", role=None)
    assert anonymous.status == 401


async def test_a_query_parameter_is_refused(api: Api) -> None:
    queued = await api.queue()
    reply = await api.call("GET", f"/api/v1/runs/{queued['id']}/report?format=pdf", role=TokenRole.VIEWER)
    assert reply.status == 400
