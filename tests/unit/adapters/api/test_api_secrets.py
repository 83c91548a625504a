"""Credentials through the API: stored masked, shown masked to every role, kept apart for the run alone."""

from __future__ import annotations

import copy
from typing import Any

from api_harness import Api, small_scenario

from cliffwatch.domain.scenario.scenario import content_hash
from cliffwatch.domain.service.runs import TokenRole

KEY = "sk-live-0123456789"
PASSWORD = "pw-9876543210"


def with_credentials(name: str = "keyed", key: str = KEY) -> dict[str, Any]:
    document = small_scenario(name, target=f"http://alice:{PASSWORD}@127.0.0.1:8000")
    document["target"]["request"]["headers"] = {"x-api-key": key, "X-Trace": "1",
                                                "Cookie": {"secret": "env:TARGET_COOKIE"}}  # fmt: skip
    return document


async def test_a_viewer_never_reads_a_target_key(api: Api) -> None:
    """The issue's reproduction: an admin registers `Authorization: Bearer sk-…`; a viewer reads the scenario."""
    document = small_scenario("keyed", target="http://127.0.0.1:8000")
    document["target"]["request"]["headers"] = {"Authorization": f"Bearer {KEY}"}
    assert (await api.call("PUT", "/api/v1/scenarios/keyed", json=document)).status == 200

    reply = await api.call("GET", "/api/v1/scenarios/keyed", role=TokenRole.VIEWER)

    assert reply.body["document"]["target"]["request"]["headers"] == {"Authorization": "***"}
    assert KEY not in str(reply.body)


async def test_a_registered_key_is_never_shown_and_kept_apart_for_the_run(api: Api) -> None:
    """PUT answers, GET (any role), the list and the run queued by name show the mask; the store keeps the key
    apart, keyed by the version."""
    put = await api.call("PUT", "/api/v1/scenarios/keyed", json=with_credentials())
    assert put.status == 200
    shown = put.body["document"]
    assert shown["target"]["request"]["headers"] == {"x-api-key": "***", "X-Trace": "1",
                                                     "Cookie": {"secret": "env:TARGET_COOKIE"}}  # fmt: skip
    assert shown["target"]["url"] == "http://alice:***@127.0.0.1:8000"
    for role in TokenRole:
        reply = await api.call("GET", "/api/v1/scenarios/keyed", role=role)
        assert reply.body == put.body
    listed = await api.call("GET", "/api/v1/scenarios", role=TokenRole.VIEWER)
    run = await api.queue({"scenario": "keyed"})
    for text in (str(put.body), str(listed.body), str(run)):
        assert KEY not in text
        assert PASSWORD not in text
    assert run["target_url"] == "http://alice:***@127.0.0.1:8000"
    kept = await api.store.scenario_credentials("keyed", put.body["content_hash"])
    assert {(c.path, c.value) for c in kept} == {
        (("target", "url"), f"http://alice:{PASSWORD}@127.0.0.1:8000"),
        (("target", "request", "headers", "x-api-key"), KEY),
    }


async def test_a_changed_key_is_a_new_version_whose_hash_confirms_no_guess(api: Api) -> None:
    """Two documents that differ only in a key are two versions (each with its own key kept), and neither hash is
    the hash of the document as sent."""
    one = (await api.call("PUT", "/api/v1/scenarios/keyed", json=with_credentials())).body
    two = (await api.call("PUT", "/api/v1/scenarios/keyed", json=with_credentials(key="sk-live-other"))).body
    again = (await api.call("PUT", "/api/v1/scenarios/keyed", json=with_credentials(key="sk-live-other"))).body

    assert one["document"] == two["document"]
    assert one["content_hash"] != two["content_hash"] == again["content_hash"]
    assert one["content_hash"] not in (content_hash(with_credentials()), content_hash(one["document"]))
    kept = await api.store.scenario_credentials("keyed", two["content_hash"])
    assert (("target", "request", "headers", "x-api-key"), "sk-live-other") in {(c.path, c.value) for c in kept}


async def test_an_inline_document_with_a_key_is_stored_masked(api: Api) -> None:
    """A run sent with its whole document queues against the masked version; the key is kept for it."""
    run = await api.queue({"document": with_credentials("adhoc")})
    version = await api.store.scenario_version("adhoc", run["scenario_hash"])

    assert version is not None
    assert version.document["target"]["request"]["headers"]["x-api-key"] == "***"
    detail = await api.call("GET", f"/api/v1/scenarios/adhoc?hash={run['scenario_hash']}", role=TokenRole.VIEWER)
    assert KEY not in str(detail.body)
    assert len(await api.store.scenario_credentials("adhoc", run["scenario_hash"])) == 2


async def test_a_document_read_back_with_its_masks_is_refused_naming_each_place(api: Api) -> None:
    """Sending the shown document again would send the mask as the key: 422, and validation says the same."""
    shown = (await api.call("PUT", "/api/v1/scenarios/keyed", json=with_credentials())).body["document"]

    put = await api.call("PUT", "/api/v1/scenarios/keyed", json=copy.deepcopy(shown))
    assert put.status == 422
    assert [p["path"] for p in put.body["problems"]] == ["target.url", "target.request.headers.x-api-key"]
    validated = await api.call("POST", "/api/v1/scenarios/validate", role=TokenRole.VIEWER, json=shown)
    assert validated.body["valid"] is False
    inline = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR, json={"document": shown})
    assert inline.status == 422


async def test_an_override_url_with_a_password_is_refused(api: Api) -> None:
    """Overrides are stored and shown as given, so a password in one is refused, for runs and schedules."""
    override = {"target_url": f"http://alice:{PASSWORD}@127.0.0.1:8000"}
    run = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR,
                         json={"scenario": "burst-storm", "overrides": override})  # fmt: skip
    nightly = {"name": "n", "cron": "0 3 * * *", "timezone": "UTC", "scenario": "burst-storm", "overrides": override}
    schedule = await api.call("POST", "/api/v1/schedules", json=nightly)

    for reply in (run, schedule):
        assert reply.status == 422
        assert [p["path"] for p in reply.body["problems"]] == ["overrides.target_url"]
        assert PASSWORD not in str(reply.body)


def with_keys_outside_headers(name: str = "queried", *, query: bool = True) -> dict[str, Any]:
    """A plain-HTTP scenario whose keys sit in the path's query, in the body and (``query``) in ``request.query``."""
    document = small_scenario(name, target="http://127.0.0.1:8000")
    document["target"] = {"url": "http://127.0.0.1:8000", "api": "http", "request": {
        "method": "POST", "path": "/v1/things?api_key=sk-path-0123&page=2",
        "body": {"auth": {"token": "sk-body-89ab"}, "note": "kept"},
    }}  # fmt: skip
    if query:
        document["target"]["request"]["query"] = {"key": "sk-query-4567", "limit": 5,
                                                  "sig": {"secret": "env:TARGET_SIG"}}  # fmt: skip
        document["target"]["request"]["body"]["password"] = {"secret": "env:TARGET_PW"}
    return document


async def test_a_key_in_the_path_or_the_body_is_never_shown_to_a_viewer(api: Api) -> None:
    """The issue's reproduction: `request.path: …?api_key=…` and a body key were returned verbatim by
    `GET /api/v1/scenarios/{name}?hash=`; both are masked now, and kept apart for the run."""
    put = await api.call("PUT", "/api/v1/scenarios/pathed", json=with_keys_outside_headers("pathed", query=False))
    assert put.status == 200, put.body
    digest = put.body["content_hash"]

    reply = await api.call("GET", "/api/v1/scenarios/pathed", role=TokenRole.VIEWER, params={"hash": digest})

    request = reply.body["document"]["target"]["request"]
    assert request["path"] == "/v1/things?api_key=***&page=2"
    assert request["body"] == {"auth": {"token": "***"}, "note": "kept"}
    assert "sk-path-0123" not in str(reply.body)
    assert "sk-body-89ab" not in str(reply.body)


async def test_keys_in_the_query_and_the_body_are_never_shown_and_kept_for_the_run(api: Api) -> None:
    """A key in `request.path` (`?api_key=…`), a sensitive `request.query` parameter and a body string under a
    sensitive key are masked in every view of the version, references stay as written, and the store keeps the
    keys apart for the run."""
    put = await api.call("PUT", "/api/v1/scenarios/queried", json=with_keys_outside_headers())
    assert put.status == 200, put.body
    digest = put.body["content_hash"]

    for role in TokenRole:
        reply = await api.call("GET", "/api/v1/scenarios/queried", role=role, params={"hash": digest})
        request = reply.body["document"]["target"]["request"]
        assert request["path"] == "/v1/things?api_key=***&page=2"
        assert request["query"] == {"key": "***", "limit": 5, "sig": {"secret": "env:TARGET_SIG"}}
        assert request["body"] == {"auth": {"token": "***"}, "note": "kept", "password": {"secret": "env:TARGET_PW"}}
        for secret in ("sk-path-0123", "sk-query-4567", "sk-body-89ab"):
            assert secret not in str(reply.body)
    kept = await api.store.scenario_credentials("queried", digest)
    assert {(c.path, c.value) for c in kept} == {
        (("target", "request", "path"), "/v1/things?api_key=sk-path-0123&page=2"),
        (("target", "request", "query", "key"), "sk-query-4567"),
        (("target", "request", "body", "auth", "token"), "sk-body-89ab"),
    }
