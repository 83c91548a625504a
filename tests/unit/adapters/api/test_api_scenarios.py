"""The scenario catalog through the API: listing, reading by name and hash, validating, registering."""

from __future__ import annotations

from api_harness import Api, bundled_documents, small_scenario

from cliffwatch.domain.scenario.scenario import content_hash
from cliffwatch.domain.service.runs import TokenRole


async def test_the_bundled_scenarios_are_listed_by_name(api: Api) -> None:
    reply = await api.call("GET", "/api/v1/scenarios", role=TokenRole.VIEWER)
    names = [s["name"] for s in reply.body["scenarios"]]
    assert names == sorted(d["name"] for d in bundled_documents().values())
    assert {s["source"] for s in reply.body["scenarios"]} == {"bundled"}


async def test_a_scenario_is_read_with_its_document_latest_or_by_hash(api: Api) -> None:
    latest = (await api.call("GET", "/api/v1/scenarios/burst-storm", role=TokenRole.VIEWER)).body
    assert latest["document"]["name"] == "burst-storm"
    assert latest["content_hash"] == content_hash(latest["document"])
    by_hash = await api.call("GET", f"/api/v1/scenarios/burst-storm?hash={latest['content_hash']}")
    assert by_hash.body == latest
    missing = await api.call("GET", f"/api/v1/scenarios/burst-storm?hash={'0' * 64}")
    assert missing.status == 404
    assert (await api.call("GET", "/api/v1/scenarios/burst-storm?hash=abc")).status == 400
    assert (await api.call("GET", "/api/v1/scenarios/never-heard-of-it")).status == 404


async def test_validation_answers_200_with_the_verdict_and_every_problem(api: Api) -> None:
    good = await api.call("POST", "/api/v1/scenarios/validate", role=TokenRole.VIEWER, json=small_scenario())
    assert good.body == {"valid": True, "problems": []}
    document = small_scenario()
    document["phases"][1]["role"] = "chaos"
    document["colour"] = "blue"
    bad = await api.call("POST", "/api/v1/scenarios/validate", role=TokenRole.VIEWER, json=document)
    assert bad.status == 200
    assert bad.body["valid"] is False
    assert {p["path"] for p in bad.body["problems"]} >= {"phases[1].role", "colour"}
    not_an_object = await api.call("POST", "/api/v1/scenarios/validate", json=[1, 2])
    assert not_an_object.body["valid"] is False


async def test_registering_makes_a_new_latest_version_and_keeps_the_old_one(api: Api) -> None:
    first = small_scenario("game-day")
    one = await api.call("PUT", "/api/v1/scenarios/game-day", json=first)
    assert one.status == 200
    assert one.body["source"] == "registered"
    assert one.headers["Location"] == "/api/v1/scenarios/game-day"
    second = {**first, "seed": 99}
    two = (await api.call("PUT", "/api/v1/scenarios/game-day", json=second)).body
    assert two["content_hash"] != one.body["content_hash"]
    assert (await api.call("GET", "/api/v1/scenarios/game-day")).body["document"]["seed"] == 99
    old = await api.call("GET", f"/api/v1/scenarios/game-day?hash={one.body['content_hash']}")
    assert old.body["document"]["seed"] == 7
    again = await api.call("PUT", "/api/v1/scenarios/game-day", json=second)
    assert again.body["content_hash"] == two["content_hash"]
    names = [s["name"] for s in (await api.call("GET", "/api/v1/scenarios")).body["scenarios"]]
    assert "game-day" in names
    run = await api.queue({"scenario": "game-day"})
    assert run["scenario_hash"] == two["content_hash"]


async def test_the_documents_name_must_match_the_path(api: Api) -> None:
    document = small_scenario("other-name")
    document["slo"] = {"e2e_ms": 1000}
    reply = await api.call("PUT", "/api/v1/scenarios/game-day", json=document)
    assert reply.status == 422
    assert reply.body["type"].endswith(":scenario-invalid")
    paths = [p["path"] for p in reply.body["problems"]]
    assert paths[0] == "name"
    assert "slo.timeout_ms" in paths  # the document's own problems come with it
    assert (await api.call("GET", "/api/v1/scenarios/game-day")).status == 404


async def test_an_invalid_document_is_not_registered(api: Api) -> None:
    reply = await api.call("PUT", "/api/v1/scenarios/half", json={"name": "half"})
    assert reply.status == 422
    assert {"slo", "target", "phases"} <= {p["path"] for p in reply.body["problems"]}
    not_an_object = await api.call("PUT", "/api/v1/scenarios/half", json="half")
    assert not_an_object.status == 422
    assert (await api.call("GET", "/api/v1/scenarios/half")).status == 404
