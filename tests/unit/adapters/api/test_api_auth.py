"""Authentication and roles: bearer tokens, 401 versus 403, the role each route needs, and token management."""

from __future__ import annotations

import re

import pytest
import structlog
from api_harness import Api

from cliffwatch.adapters.api.app import ROUTE_TABLE
from cliffwatch.adapters.api.context import Route
from cliffwatch.domain.service.runs import TokenRole

ORDER = (TokenRole.VIEWER, TokenRole.OPERATOR, TokenRole.ADMIN)


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "some-id", path)


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Basic dXNlcjpwYXNz", "Bearer cw_not-a-real-token", "Bearer not-even-prefixed", "Token abc"],
)
async def test_missing_or_bad_tokens_are_a_401_with_a_bearer_challenge(api: Api, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    reply = await api.call("GET", "/api/v1/runs", role=None, headers=headers)
    assert reply.status == 401
    assert reply.headers["WWW-Authenticate"].startswith('Bearer realm="cliffwatch"')


async def test_the_scheme_is_case_insensitive(api: Api) -> None:
    headers = {"Authorization": f"bearer {api.tokens[TokenRole.VIEWER]}"}
    assert (await api.call("GET", "/api/v1/runs", role=None, headers=headers)).status == 200


async def test_unknown_paths_need_a_token_too(api: Api) -> None:
    """Without a token a caller cannot tell real paths from others: both are 401."""
    assert (await api.call("GET", "/api/v1/secret-admin-thing", role=None)).status == 401
    assert (await api.call("GET", "/api/v1/secret-admin-thing", role=TokenRole.VIEWER)).status == 404


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_only_the_probes_answer_without_a_token(api: Api, path: str) -> None:
    assert (await api.call("GET", path, role=None)).status == 200


def _matrix() -> list[tuple[Route, TokenRole]]:
    return [(route, role) for route in ROUTE_TABLE if route.role is not None for role in ORDER]


@pytest.mark.parametrize(
    ("route", "role"), _matrix(), ids=[f"{r.method} {r.path} as {role.value}" for r, role in _matrix()]
)
async def test_each_route_admits_its_role_and_above_and_refuses_below_with_403(
    api: Api, route: Route, role: TokenRole
) -> None:
    assert route.role is not None
    reply = await api.call(route.method, _concrete(route.path), role=role)
    if ORDER.index(role) < ORDER.index(route.role):
        assert reply.status == 403
        assert route.role.value in reply.body["detail"]
        assert 'error="insufficient_scope"' in reply.headers["WWW-Authenticate"]
    else:
        assert reply.status not in (401, 403), reply.body


async def test_a_created_token_is_shown_once_and_works_for_its_role(api: Api) -> None:
    reply = await api.call("POST", "/api/v1/tokens", json={"name": "ci", "role": "operator"})
    assert reply.status == 201
    assert reply.headers["Cache-Control"] == "no-store"
    token = reply.body["token"]
    assert token.startswith("cw_")
    headers = {"Authorization": f"Bearer {token}"}
    assert (await api.call("GET", "/api/v1/runs", role=None, headers=headers)).status == 200
    assert (await api.call("GET", "/api/v1/tokens", role=None, headers=headers)).status == 403
    listed = (await api.call("GET", "/api/v1/tokens")).body["tokens"]
    assert [t["name"] for t in listed] == ["viewer-token", "operator-token", "admin-token", "ci"]
    assert all(set(t) == {"id", "name", "role", "created_at", "revoked_at"} for t in listed)
    assert token not in str(listed)


async def test_a_revoked_token_is_a_401_and_cannot_be_revoked_twice(api: Api) -> None:
    created = (await api.call("POST", "/api/v1/tokens", json={"name": "temp", "role": "viewer"})).body
    headers = {"Authorization": f"Bearer {created['token']}"}
    assert (await api.call("DELETE", f"/api/v1/tokens/{created['id']}")).status == 204
    reply = await api.call("GET", "/api/v1/runs", role=None, headers=headers)
    assert reply.status == 401
    assert 'error="invalid_token"' in reply.headers["WWW-Authenticate"]
    [record] = [t for t in (await api.call("GET", "/api/v1/tokens")).body["tokens"] if t["id"] == created["id"]]
    assert record["revoked_at"] is not None
    assert (await api.call("DELETE", f"/api/v1/tokens/{created['id']}")).status == 404
    assert (await api.call("DELETE", "/api/v1/tokens/never-was")).status == 404


@pytest.mark.parametrize(
    ("body", "paths"),
    [
        ({"name": "x", "role": "root"}, ["role"]),
        ({"role": "viewer"}, ["name"]),
        ({"name": "", "role": "viewer"}, ["name"]),
        ({"name": "x", "role": "viewer", "expires": "never"}, ["expires"]),
    ],
)
async def test_a_bad_token_request_names_each_bad_field(api: Api, body: dict[str, str], paths: list[str]) -> None:
    reply = await api.call("POST", "/api/v1/tokens", json=body)
    assert reply.status == 422
    assert [p["path"] for p in reply.body["problems"]] == paths


async def test_tokens_never_reach_the_log_but_the_caller_and_request_id_do(api: Api) -> None:
    token = api.tokens[TokenRole.OPERATOR]
    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR, json={"scenario": "burst-storm"})
        await api.call("GET", "/api/v1/runs", role=None, headers={"Authorization": f"Bearer {token}x"})
    assert logs
    assert token not in str(logs)
    served = [e for e in logs if e["event"] == "request served"]
    assert [e["status"] for e in served] == [202, 401]
    queued = next(e for e in logs if e["event"] == "run queued")
    assert queued["caller"] == "operator-token"
    assert queued["request_id"] == served[0]["request_id"]
