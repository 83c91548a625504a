"""``GET /api/v1/compare``: two stored runs compared as ``cliffwatch compare`` does, refused with every reason
when they cannot be, and a 4xx problem for a bad query."""

from __future__ import annotations

from api_harness import Api

from cliffwatch.domain.service.runs import TokenRole


async def test_two_finished_runs_of_one_scenario_are_compared_figure_by_figure(api: Api) -> None:
    first, second = await api.queue(), await api.queue()
    await api.finish(first["id"])
    await api.finish(second["id"])
    reply = await api.call("GET", f"/api/v1/compare?a={first['id']}&b={second['id']}", role=TokenRole.VIEWER)
    assert reply.status == 200, reply.body
    assert reply.body["kind"] == "comparison"
    assert reply.body["verdict"] == "no detectable difference"
    assert (reply.body["a"]["id"], reply.body["b"]["id"]) == (first["id"], second["id"])
    shares = [f for f in reply.body["figures"] if f["figure"] == "on_time_share"]
    assert shares
    assert all(f["p_adjusted"] == 1.0 and f["detectable"] > 0 for f in shares)
    again = await api.call("GET", f"/api/v1/compare?a={first['id']}&b={second['id']}", role=TokenRole.VIEWER)
    assert again.body == reply.body  # the bootstrap is seeded from the two ids


async def test_a_run_without_a_result_is_refused_with_the_reason(api: Api) -> None:
    finished, queued = await api.queue(), await api.queue()
    await api.finish(finished["id"])
    reply = await api.call("GET", f"/api/v1/compare?a={finished['id']}&b={queued['id']}", role=TokenRole.VIEWER)
    assert reply.status == 422
    assert reply.body["type"].endswith("compare-refused")
    assert reply.body["reasons"] == [f"{queued['id']} has no result yet (it is queued)"]


async def test_an_unknown_run_is_404_and_a_bad_query_400_naming_the_parameter(api: Api) -> None:
    run = await api.queue()
    await api.finish(run["id"])
    missing = await api.call("GET", f"/api/v1/compare?a={run['id']}&b=nope", role=TokenRole.VIEWER)
    assert missing.status == 404
    no_b = await api.call("GET", f"/api/v1/compare?a={run['id']}", role=TokenRole.VIEWER)
    assert no_b.status == 400
    assert any(e["path"] == "b" and e["message"] == "is required" for e in no_b.body["problems"])
    odd = await api.call("GET", f"/api/v1/compare?a={run['id']}&b={run['id']}&allow_unlike=yes", role=TokenRole.VIEWER)
    assert odd.status == 400
