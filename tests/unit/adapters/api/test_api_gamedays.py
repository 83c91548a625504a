"""``POST /api/v1/gamedays`` in process: a repeat with its Idempotency-Key answered with the game day it started
(200, no second suite), a key another suite used refused, a bad key a 400; ``…/notifications`` of a game day."""

from __future__ import annotations

from api_harness import Api, small_scenario

from cliffwatch.domain.service.runs import TokenRole


async def test_a_repeat_with_its_key_gets_the_game_day_the_first_started(api: Api) -> None:
    await api.services.catalog.register(small_scenario("gd-api"))
    suite = {"name": "retried", "experiments": [{"scenario": "gd-api", "expect": {"score_at_least": 50}}]}
    headers = {"Idempotency-Key": "ci-build-41"}
    first = await api.call("POST", "/api/v1/gamedays", role=TokenRole.OPERATOR, json=suite, headers=headers)
    assert first.status == 202, first.body
    again = await api.call("POST", "/api/v1/gamedays", role=TokenRole.OPERATOR, json=suite, headers=headers)
    assert again.status == 200, again.body
    assert again.body["id"] == first.body["id"]
    listed = await api.call("GET", "/api/v1/gamedays", role=TokenRole.VIEWER)
    assert [g["id"] for g in listed.body["gamedays"]] == [first.body["id"]]
    assert "suite" not in listed.body["gamedays"][0]  # a list of whole suites could weigh hundreds of megabytes
    detail = await api.call("GET", f"/api/v1/gamedays/{first.body['id']}", role=TokenRole.VIEWER)
    assert detail.body["suite"]["name"] == "retried"
    other = {**suite, "name": "other"}
    reused = await api.call("POST", "/api/v1/gamedays", role=TokenRole.OPERATOR, json=other, headers=headers)
    assert reused.status == 422
    assert reused.body["type"].endswith("idempotency-key-reused")
    bad = await api.call("POST", "/api/v1/gamedays", role=TokenRole.OPERATOR, json=suite,
                         headers={"Idempotency-Key": "two words"})  # fmt: skip
    assert bad.status == 400
    told = await api.call("GET", f"/api/v1/gamedays/{first.body['id']}/notifications", role=TokenRole.VIEWER)
    assert told.status == 200
    assert told.body == {"gameday_id": first.body["id"], "notifications": []}  # none until it ends
    assert api.services.gamedays is not None
    await api.services.gamedays.shutdown()
