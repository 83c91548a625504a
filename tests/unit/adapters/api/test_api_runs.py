"""Runs through the API: queueing (by name, inline, idempotent), the allowlist and the caps, listing with
filters and cursors, reading a finished run, its time series and outcomes, and aborting."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from api_harness import Api, build_parts, make_settings, serve, small_scenario

from cliffwatch.domain.scenario.metrics_spec import EngineKind, Signal
from cliffwatch.domain.security.allowlist import parse_denied
from cliffwatch.domain.server.server_view import ServerSeries, ServerView
from cliffwatch.domain.service.runs import TokenRole


async def test_a_run_by_name_is_queued_with_202_and_its_location(api: Api) -> None:
    """The answer is the queued run, pointing at its own URL, triggered by the token's name."""
    reply = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR, json={"scenario": "burst-storm"})
    assert reply.status == 202
    run = reply.body
    assert reply.headers["Location"] == f"/api/v1/runs/{run['id']}"
    assert run["status"] == "queued"
    assert run["scenario"] == "burst-storm"
    assert run["trigger"] == "api"
    assert run["triggered_by"] == "operator-token"
    assert run["result"] is None
    stored = await api.store.get_run(run["id"])
    assert stored is not None
    assert stored.scenario_name == "burst-storm"


async def test_an_inline_document_runs_with_its_overrides(api: Api) -> None:
    """An inline scenario is kept by hash; the overrides are applied and echoed."""
    body = {"document": small_scenario("inline-one"), "overrides": {"seed": 42, "threshold": 55.5}}
    run = await api.queue(body)
    assert run["scenario"] == "inline-one"
    assert (run["seed"], run["threshold"]) == (42, 55.5)
    assert run["overrides"] == {"seed": 42, "threshold": 55.5}
    # inline documents never become a name's latest version
    missing = await api.call("GET", "/api/v1/scenarios/inline-one")
    assert missing.status == 404


async def test_the_same_idempotency_key_returns_the_first_run_with_200(api: Api) -> None:
    """A repeat answers 200 with the run the first request queued; nothing new is stored."""
    headers = {"Idempotency-Key": "deploy-1234"}
    first = await api.call(
        "POST", "/api/v1/runs", role=TokenRole.OPERATOR, headers=headers, json={"scenario": "burst-storm"}
    )
    again = await api.call(
        "POST", "/api/v1/runs", role=TokenRole.OPERATOR, headers=headers, json={"scenario": "burst-storm"}
    )
    assert (first.status, again.status) == (202, 200)
    assert again.body["id"] == first.body["id"]
    assert again.headers["Location"] == first.headers["Location"]
    assert len((await api.call("GET", "/api/v1/runs")).body["runs"]) == 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/sweeps", {"scenario": "burst-storm", "sweep": {"auto": True}}),
        ("/api/v1/runs", {"scenario": "retry-storm"}),
        ("/api/v1/runs", {"scenario": "burst-storm", "overrides": {"seed": 9}}),
    ],
    ids=["a sweep", "another scenario", "other overrides"],
)
async def test_a_key_reused_for_a_different_request_is_refused_naming_the_first_run(
    api: Api, path: str, body: dict[str, object]
) -> None:
    """A key that queued a run cannot stand for another request (schemathesis found a sweep answered with the
    run a key had queued, shaped as neither): 422 idempotency-key-reused naming the run, nothing queued."""
    headers = {"Idempotency-Key": "deploy-1"}
    first = await api.call(
        "POST", "/api/v1/runs", role=TokenRole.OPERATOR, headers=headers, json={"scenario": "burst-storm"}
    )
    reused = await api.call("POST", path, role=TokenRole.OPERATOR, headers=headers, json=body)
    assert reused.status == 422
    assert reused.body["type"].endswith(":idempotency-key-reused")
    assert first.body["id"] in reused.body["detail"]
    assert len((await api.call("GET", "/api/v1/runs")).body["runs"]) == 1


async def test_idempotency_keys_are_scoped_to_the_token(api: Api) -> None:
    """Two clients that happen to pick the same key get a run each."""
    headers = {"Idempotency-Key": "same"}
    one = await api.call(
        "POST", "/api/v1/runs", role=TokenRole.OPERATOR, headers=headers, json={"scenario": "burst-storm"}
    )
    two = await api.call(
        "POST", "/api/v1/runs", role=TokenRole.ADMIN, headers=headers, json={"scenario": "burst-storm"}
    )
    assert (one.status, two.status) == (202, 202)
    assert one.body["id"] != two.body["id"]


async def test_an_unusable_idempotency_key_is_a_400(api: Api) -> None:
    headers = {"Idempotency-Key": "x" * 201}
    reply = await api.call("POST", "/api/v1/runs", headers=headers, json={"scenario": "burst-storm"})
    assert reply.status == 400
    assert "Idempotency-Key" in reply.body["detail"]


async def test_a_target_outside_the_allowlist_is_refused_with_the_reason(api: Api) -> None:
    """10.0.0.1 is not loopback: 422 target-not-allowed naming the target and the allowlist; nothing stored."""
    body = {"scenario": "burst-storm", "overrides": {"target_url": "http://10.0.0.1:8000"}}
    reply = await api.call("POST", "/api/v1/runs", json=body)
    assert reply.status == 422
    assert reply.body["type"].endswith(":target-not-allowed")
    assert reply.body["target"] == "http://10.0.0.1:8000"
    assert "allowlist" in reply.body["reason"]
    assert await api.store.active_runs() == []


@pytest.mark.parametrize(
    ("metrics", "field"),
    [({"url": "http://10.0.0.1:9090/metrics"}, "target.metrics.url"), ({}, "target.url")],
)
async def test_a_metrics_page_outside_the_allowlist_is_refused_at_submit_naming_its_field(
    api: Api, metrics: dict[str, str], field: str
) -> None:
    """The metrics page is scraped all run long, so it is judged like the target when the run is asked for (it
    used to be answered 202 and the run to fail at its start); nothing is queued."""
    document = small_scenario("scraped", target="http://127.0.0.1:8000" if metrics else "http://10.0.0.1:8000")
    document["target"]["metrics"] = metrics
    reply = await api.call("POST", "/api/v1/runs", json={"document": document})
    assert reply.status == 422
    assert reply.body["type"].endswith(":target-not-allowed")
    assert reply.body["field"] == field
    assert reply.body["detail"].startswith(f"{field}: http://10.0.0.1:")
    assert "10.0.0.1" in reply.body["reason"]
    assert await api.store.active_runs() == []


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://127.0.0.1:18474", "cliffwatch's Toxiproxy API (CLIFFWATCH_TOXIPROXY_URL)"),
        ("http://127.0.0.9:18474", "cliffwatch's Toxiproxy API (CLIFFWATCH_TOXIPROXY_URL)"),
        ("http://127.0.0.1:25432", "cliffwatch's database (CLIFFWATCH_DATABASE_URL)"),
        ("http://127.0.0.1:8265", "the Ray cluster's dashboard (CLIFFWATCH_RAY_ADDRESS, at its default port)"),
        ("http://127.0.0.1:7000", "denied by CLIFFWATCH_DENIED_TARGETS (127.0.0.1:7000)"),
    ],
)
async def test_a_target_on_the_deny_list_is_refused_naming_the_rule_though_loopback_is_allowed(
    url: str, rule: str
) -> None:
    """cliffwatch's own control planes are on loopback, which the default allowlist admits: the deny list wins,
    and the refusal names the rule that refused."""
    rules, _ = parse_denied(["127.0.0.1:7000"])
    settings = make_settings(toxiproxy_url="http://127.0.0.1:18474", ray_address="auto", denied_targets=rules,
                             database_url="postgresql+asyncpg://cw:pw@localhost:25432/cw")  # fmt: skip
    async with serve(await build_parts(settings), settings) as api:
        reply = await api.call("POST", "/api/v1/runs", json={"document": small_scenario("planes", target=url)})
        allowed = await api.call(
            "POST", "/api/v1/runs", json={"document": small_scenario("fine", target="http://127.0.0.1:8000")}
        )
    assert reply.status == 422
    assert reply.body["field"] == "target.url"
    assert rule in reply.body["reason"]
    assert allowed.status == 202


@pytest.mark.parametrize("listen", ["0.0.0.0:18000", "[::]:0", "10.0.0.1:18000"])
async def test_a_proxy_listening_beyond_loopback_is_refused_with_the_reason(api: Api, listen: str) -> None:
    """A proxy that would listen on the network (a tunnel to its upstream) is refused at submit, naming the
    proxy and the setting that would allow it; nothing is queued."""
    document = small_scenario("tunnel")
    document["proxies"] = [{"name": "llm", "listen": listen}]
    reply = await api.call("POST", "/api/v1/runs", json={"document": document})
    assert reply.status == 422
    assert reply.body["type"].endswith(":target-not-allowed")
    assert "proxy llm listen address" in reply.body["reason"]
    assert "CLIFFWATCH_ALLOWED_PROXY_LISTEN" in reply.body["reason"]
    assert await api.store.active_runs() == []


async def test_a_run_with_redirects_shows_them_in_its_phases_outcomes_and_report(api: Api) -> None:
    """Redirects are a class of their own in the run's phases, in its outcomes (status and error kept) and
    in its report's phase table."""
    run_id = (await api.queue({"document": small_scenario("moved")}))["id"]
    records = await api.finish(run_id, redirect_every=4)
    redirected = [r.id for r in records if r.id % 4 == 0]

    run = (await api.call("GET", f"/api/v1/runs/{run_id}")).body
    assert sum(p["outcomes"]["redirect"] for p in run["result"]["phases"]) == len(redirected) == 5
    listed = (await api.call("GET", f"/api/v1/runs/{run_id}/outcomes", params={"limit": "100"})).body["outcomes"]
    moved = [o for o in listed if o["outcome"] == "redirect"]
    assert [o["request_id"] for o in moved] == redirected
    assert {(o["status"], o["error"].split(",")[0]) for o in moved} == {
        (307, "HTTP 307 redirect to http://127.0.0.1:9/")
    }
    report = await api.call("GET", f"/api/v1/runs/{run_id}/report")
    assert report.status == 200
    assert "<th>redirect</th>" in report.body


@pytest.mark.parametrize("target", ["builtin", "http://127.0.0.1:8000", "http://localhost:9000/v1"])
async def test_the_builtin_target_and_loopback_are_accepted(api: Api, target: str) -> None:
    run = await api.queue({"scenario": "burst-storm", "overrides": {"target_url": target}})
    assert run["target_url"] == target


async def test_a_run_over_the_offered_rate_cap_is_refused_with_the_reason(api: Api) -> None:
    """The settings allow 1000 requests/s; a phase offering 5000/s is refused, saying both numbers."""
    reply = await api.call("POST", "/api/v1/runs", json={"document": small_scenario("too-hot", rate=5000)})
    assert reply.status == 422
    assert reply.body["type"].endswith(":run-refused")
    [problem] = reply.body["problems"]
    assert "5000" in problem["message"]
    assert "1000" in problem["message"]


async def test_an_invalid_inline_document_lists_every_problem(api: Api) -> None:
    document = small_scenario("broken")
    document["slo"] = {"e2e_ms": -1, "timeout_ms": 3000}
    document["phases"][0]["arrival"] = {"process": "constant"}
    reply = await api.call("POST", "/api/v1/runs", json={"document": document})
    assert reply.status == 422
    assert reply.body["type"].endswith(":scenario-invalid")
    paths = {p["path"] for p in reply.body["problems"]}
    assert "slo.e2e_ms" in paths
    assert any(p.startswith("phases[0].arrival") for p in paths)


async def test_an_invalid_override_is_reported_under_its_body_path(api: Api) -> None:
    body = {"scenario": "burst-storm", "overrides": {"target_url": "ftp://127.0.0.1/x"}}
    reply = await api.call("POST", "/api/v1/runs", json=body)
    assert reply.status == 422
    assert [p["path"] for p in reply.body["problems"]] == ["overrides.target_url"]


async def test_an_unknown_scenario_is_a_404(api: Api) -> None:
    reply = await api.call("POST", "/api/v1/runs", json={"scenario": "no-such-thing"})
    assert reply.status == 404
    assert reply.body["type"].endswith(":scenario-not-found")
    assert "no-such-thing" in reply.body["detail"]


async def _queue_many(api: Api, count: int) -> list[str]:
    return [(await api.queue())["id"] for _ in range(count)]


async def test_walking_the_cursor_returns_every_run_once_newest_first(api: Api) -> None:
    """Pages of 3 over 8 runs: every run exactly once, newest first, each Link header naming the next page."""
    created = await _queue_many(api, 8)
    seen: list[str] = []
    url = "/api/v1/runs?limit=3"
    pages = 0
    while url:
        reply = await api.call("GET", url, role=TokenRole.VIEWER)
        assert reply.status == 200
        pages += 1
        seen += [r["id"] for r in reply.body["runs"]]
        cursor = reply.body["next_cursor"]
        if cursor is None:
            assert "Link" not in reply.headers
            url = ""
        else:
            link = reply.headers["Link"]
            assert link.endswith('>; rel="next"')
            url = link[1 : link.index(">")]
            assert "limit=3" in url
    assert pages == 3
    assert seen == list(reversed(created))


async def test_runs_are_filtered_by_status_scenario_time_and_schedule(api: Api) -> None:
    first, second = await _queue_many(api, 2)
    inline = (await api.queue({"document": small_scenario("filtered")}))["id"]
    await api.call("POST", f"/api/v1/runs/{first}/abort")
    assert [r["id"] for r in (await api.call("GET", "/api/v1/runs?status=aborted")).body["runs"]] == [first]
    assert [r["id"] for r in (await api.call("GET", "/api/v1/runs?scenario=filtered")).body["runs"]] == [inline]
    second_run = await api.store.get_run(second)
    assert second_run is not None
    since = (second_run.created_at).isoformat().replace("+00:00", "Z")
    until = (second_run.created_at + timedelta(seconds=1)).isoformat()
    reply = await api.call("GET", "/api/v1/runs", params={"since": since, "until": until})
    assert [r["id"] for r in reply.body["runs"]] == [second]
    assert (await api.call("GET", "/api/v1/runs?schedule=nope")).body["runs"] == []


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ("limit=201", "limit"),
        ("limit=0", "limit"),
        ("limit=ten", "limit"),
        ("status=lost", "status"),
        ("since=yesterday", "since"),
        ("since=2026-11-30T09:00:00", "since"),  # no offset: which instant is that?
        ("colour=blue", "colour"),
        ("limit=1&limit=2", "limit"),
    ],
)
async def test_bad_list_parameters_are_a_400_naming_the_parameter(api: Api, query: str, path: str) -> None:
    reply = await api.call("GET", f"/api/v1/runs?{query}")
    assert reply.status == 400
    assert reply.body["type"].endswith(":query-invalid")
    assert [p["path"] for p in reply.body["problems"]] == [path]


async def test_a_cursor_that_is_not_ours_is_a_400(api: Api) -> None:
    reply = await api.call("GET", "/api/v1/runs?cursor=bm90LWEtY3Vyc29y")
    assert reply.status == 400
    assert reply.body["type"].endswith(":cursor-invalid")


async def test_a_finished_run_shows_its_phases_score_components_and_verdicts(api: Api) -> None:
    run_id = (await api.queue({"document": small_scenario("finished")}))["id"]
    await api.finish(run_id)
    reply = await api.call("GET", f"/api/v1/runs/{run_id}", role=TokenRole.VIEWER)
    body: dict[str, Any] = reply.body
    assert body["status"] == "succeeded"
    assert body["score"] is not None
    result = body["result"]
    assert [p["name"] for p in result["phases"]] == ["calm", "burst", "after"]
    assert {c["name"] for c in result["score"]["components"]} >= {"preservation", "recovery"}
    assert result["score"]["value"] == body["score"]
    assert isinstance(result["verdicts"], list)
    assert "timeseries" not in result


async def test_an_unknown_run_is_a_404_everywhere(api: Api) -> None:
    for method, path in [("GET", "/api/v1/runs/nope"), ("GET", "/api/v1/runs/nope/timeseries"),
                         ("GET", "/api/v1/runs/nope/server-metrics"),
                         ("GET", "/api/v1/runs/nope/outcomes"), ("POST", "/api/v1/runs/nope/abort")]:  # fmt: skip
        reply = await api.call(method, path)
        assert reply.status == 404, path
        assert reply.body["type"].endswith(":run-not-found")


async def test_the_timeseries_is_empty_until_the_run_ends_then_has_a_row_per_second(api: Api) -> None:
    run_id = (await api.queue({"document": small_scenario("series")}))["id"]
    assert (await api.call("GET", f"/api/v1/runs/{run_id}/timeseries")).body == {"run_id": run_id, "rows": []}
    await api.finish(run_id)
    rows = (await api.call("GET", f"/api/v1/runs/{run_id}/timeseries")).body["rows"]
    assert [row["t"] for row in rows] == list(range(len(rows)))
    assert len(rows) >= 5


async def test_the_server_metrics_a_run_scraped_are_summarised_in_its_result_and_served_whole(api: Api) -> None:
    run_id = (await api.queue({"document": small_scenario("watched")}))["id"]
    assert (await api.call("GET", f"/api/v1/runs/{run_id}/server-metrics")).body == {
        "run_id": run_id,
        "server_metrics": None,
    }
    waiting = ServerSeries(
        name="waiting", signal=Signal.WAITING, expr="vllm:num_requests_waiting", unit="requests", values=(0.0, 4.0, 9.0)
    )
    server = ServerView(
        url="http://127.0.0.1:8000/metrics",
        engine=EngineKind.VLLM,
        interval_ms=1000.0,
        times_s=(0.0, 1.0, 2.0),
        series=(waiting,),
        scrapes=4,
        failures={"HTTP 503": 1},
    )
    await api.finish(run_id, server=server)
    run = (await api.call("GET", f"/api/v1/runs/{run_id}")).body
    assert run["links"]["server_metrics"] == f"/api/v1/runs/{run_id}/server-metrics"
    summary = run["result"]["server_metrics"]
    assert summary["engine"] == "vllm"
    assert (summary["scrapes"], summary["failed"], summary["failures"]) == (4, 1, {"HTTP 503": 1})
    assert summary["series"] == [
        {"name": "waiting", "signal": "waiting", "expr": "vllm:num_requests_waiting", "unit": "requests"}
    ]
    whole = (await api.call("GET", run["links"]["server_metrics"])).body["server_metrics"]
    assert whole["times_s"] == [0.0, 1.0, 2.0]
    assert whole["series"][0]["values"] == [0.0, 4.0, 9.0]
    rows = (await api.call("GET", f"/api/v1/runs/{run_id}/timeseries")).body["rows"]
    assert [row["server"]["waiting"] for row in rows[:3]] == [0.0, 4.0, 9.0]


async def test_a_run_that_scraped_nothing_says_so_with_null(api: Api) -> None:
    run_id = (await api.queue({"document": small_scenario("unwatched")}))["id"]
    await api.finish(run_id)
    assert (await api.call("GET", f"/api/v1/runs/{run_id}")).body["result"]["server_metrics"] is None
    assert (await api.call("GET", f"/api/v1/runs/{run_id}/server-metrics")).body["server_metrics"] is None


async def test_outcomes_are_paged_by_request_id_until_a_short_page(api: Api) -> None:
    run_id = (await api.queue({"document": small_scenario("paged")}))["id"]
    records = await api.finish(run_id)
    seen: list[int] = []
    after: int | None = None
    while True:
        params = {"limit": "7"} if after is None else {"limit": "7", "after": str(after)}
        reply = await api.call("GET", f"/api/v1/runs/{run_id}/outcomes", params=params)
        seen += [o["request_id"] for o in reply.body["outcomes"]]
        after = reply.body["next_after"]
        if after is None:
            assert "Link" not in reply.headers
            break
        assert f"after={after}" in reply.headers["Link"]
    assert seen == sorted(r.id for r in records)
    assert len(seen) == 20


async def test_aborting_a_queued_run_ends_it_with_the_reason(api: Api) -> None:
    run_id = (await api.queue())["id"]
    reply = await api.call(
        "POST", f"/api/v1/runs/{run_id}/abort", role=TokenRole.OPERATOR, json={"reason": "wrong day"}
    )
    assert reply.status == 200
    assert reply.body["status"] == "aborted"
    assert reply.body["reason"] == "wrong day"
    default = await api.call("POST", f"/api/v1/runs/{(await api.queue())['id']}/abort", role=TokenRole.OPERATOR)
    assert default.body["reason"] == "aborted through the API by operator-token"
