"""Score trends through the API: one series per scenario and target, points by run, day or week."""

from __future__ import annotations

from api_harness import Api, small_scenario

from cliffwatch.domain.service.runs import TokenRole


async def _finished(api: Api, name: str, count: int) -> list[str]:
    await api.call("PUT", f"/api/v1/scenarios/{name}", json=small_scenario(name))
    ids = []
    for _ in range(count):
        run_id = (await api.queue({"scenario": name}))["id"]
        await api.finish(run_id)
        ids.append(run_id)
    return ids


async def test_a_series_has_a_point_per_run_with_components_and_a_judgement(api: Api) -> None:
    ids = await _finished(api, "trend-a", 4)
    await _finished(api, "trend-b", 1)
    await api.queue({"scenario": "trend-a"})  # still queued: not part of any trend
    reply = await api.call("GET", "/api/v1/trends?scenario=trend-a", role=TokenRole.VIEWER)
    assert reply.body["bucket"] == "run"
    [series] = reply.body["series"]
    assert (series["scenario"], series["target_url"]) == ("trend-a", "builtin")
    assert [p["runs"] for p in series["points"]] == [[i] for i in ids]
    assert all(p["components"] for p in series["points"])
    assert series["trailing_median"] == series["points"][0]["score"]  # identical runs, identical scores
    assert series["regression"] is False
    assert "no regression" in series["summary"]


async def test_buckets_group_runs_by_utc_day_and_iso_week(api: Api) -> None:
    ids = await _finished(api, "trend-c", 3)
    passed = sum([(await api.call("GET", f"/api/v1/runs/{run_id}")).body["passed"] for run_id in ids])
    for bucket in ("day", "week"):
        reply = await api.call("GET", f"/api/v1/trends?scenario=trend-c&bucket={bucket}")
        [series] = reply.body["series"]
        [point] = series["points"]  # the ticking clock stays within one day, and one week
        assert point["runs"] == ids
        assert point["passed"] == passed


async def test_filters_by_target_and_time_leave_other_series_out(api: Api) -> None:
    await _finished(api, "trend-d", 2)
    assert (await api.call("GET", "/api/v1/trends?target=http://127.0.0.1:1")).body["series"] == []
    assert (await api.call("GET", "/api/v1/trends?since=2100-01-01T00:00:00Z")).body["series"] == []
    assert len((await api.call("GET", "/api/v1/trends?target=builtin")).body["series"]) == 1


async def test_an_unknown_bucket_is_a_400(api: Api) -> None:
    reply = await api.call("GET", "/api/v1/trends?bucket=month")
    assert reply.status == 400
    assert reply.body["problems"][0]["path"] == "bucket"
