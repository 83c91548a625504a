"""Secret references in scenario documents: parsed and checked as references, never read, never quoted."""

from __future__ import annotations

from typing import Any

import pytest

from cliffwatch.domain.errors import CliffwatchError, ScenarioInvalid
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.security.secrets import (
    SecretRef,
    SecretScheme,
    env_name_allowed,
    sendable_headers,
    sendable_path,
)
from cliffwatch.services.overrides import with_overrides

SECRET = "sk-live-0123456789"
CALM = {"name": "calm", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}


def document(headers: dict[str, Any], url: str = "http://127.0.0.1:8000") -> dict[str, Any]:
    return {
        "name": "refs",
        "target": {"url": url, "request": {"model": "m", "headers": headers}},
        "slo": {"e2e_ms": 500, "timeout_ms": 1000},
        "phases": [CALM],
    }


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ScenarioInvalid) as caught:
        parse_scenario(doc)
    return [str(p) for p in caught.value.problems]


def test_a_header_may_reference_an_environment_variable_or_a_file() -> None:
    """`{secret: env:NAME}` and `{secret: file:/path}` become references, kept beside literal headers."""
    scenario = parse_scenario(
        document({"Authorization": {"secret": "env:TARGET_API_KEY"}, "api-key": {"secret": "file:/run/secrets/key"},
                  "X-Trace": "1"})
    )  # fmt: skip

    assert scenario.target.request.headers == (
        ("Authorization", SecretRef(scheme=SecretScheme.ENV, name="TARGET_API_KEY")),
        ("api-key", SecretRef(scheme=SecretScheme.FILE, name="/run/secrets/key")),
        ("X-Trace", "1"),
    )
    assert str(scenario.target.request.headers[0][1]) == "env:TARGET_API_KEY"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"secret": "vault:kv/target"}, "a secret reference must be env:NAME or file:/absolute/path"),
        ({"secret": SECRET}, "a secret reference must be env:NAME or file:/absolute/path"),
        ({"secret": "env:"}, "env:NAME must name a variable"),
        ({"secret": "env:1KEY"}, "env:NAME must name a variable"),
        ({"secret": "env:CLIFFWATCH_DATABASE_URL"}, "must not name cliffwatch's own settings"),
        ({"secret": "file:run/secrets/key"}, "file:PATH must give an absolute path"),
        ({"secret": "file:/run/secrets/\x00key"}, "file:PATH must give an absolute path"),
        ({"secret": 3}, "a secret reference must be a string"),
        ({"secret": "env:A", "fallback": "x"}, "must be a string or a secret reference"),
        ({"secrets": "env:A"}, "must be a string or a secret reference"),
    ],
)
def test_a_malformed_reference_is_named_by_its_header_without_quoting_it(value: Any, says: str) -> None:
    """`validate` names the header and the rule broken, and never repeats what was written (it may be the secret)."""
    found = problems(document({"Authorization": value}))

    assert len(found) == 1
    assert found[0].startswith("target.request.headers.Authorization: ")
    assert says in found[0]
    assert SECRET not in found[0]


def test_a_url_with_a_password_and_an_authorization_header_are_refused_together() -> None:
    """aiohttp cannot send both, so the scenario (or a --target override) says to keep one."""
    assert problems(document({"Authorization": "Bearer x"}, url="http://u:pw@127.0.0.1:8000")) == [
        "target.url: carries a user and password, and target.request.headers sets Authorization: keep one"
    ]
    scenario = parse_scenario(document({"authorization": {"secret": "env:TARGET_KEY"}}))
    with pytest.raises(ScenarioInvalid, match="--target: carries a user and password"):
        with_overrides(scenario, target_url="http://u:pw@127.0.0.1:8000")


def test_a_url_quoted_in_a_problem_has_its_password_masked() -> None:
    """A refused target URL is quoted with its password masked: validation messages end up in logs."""
    found = problems(document({}, url=f"ftp://user:{SECRET}@127.0.0.1/"))

    assert found == ["target.url: must be 'builtin' or an http(s) URL with a host, got 'ftp://user:***@127.0.0.1/'"]


@pytest.mark.parametrize(
    ("name", "patterns", "allowed"),
    [
        ("TARGET_API_KEY", ("TARGET_*",), True),
        ("TARGET", ("TARGET_*",), False),
        ("OPENAI_API_KEY", ("TARGET_*", "OPENAI_API_KEY"), True),
        ("OPENAI_API_KEY_2", ("OPENAI_API_KEY",), False),
        ("CLIFFWATCH_DATABASE_URL", ("*",), False),
        ("cliffwatch_database_url", ("*",), False),
        ("HOME", (), False),
    ],
)
def test_which_variables_a_reference_may_read(name: str, patterns: tuple[str, ...], allowed: bool) -> None:
    """A pattern is a name or a prefix ending in *; cliffwatch's own settings never match."""
    assert env_name_allowed(name, patterns) is allowed


def test_headers_with_an_unread_reference_are_never_sent() -> None:
    """The HTTP client's headers refuse a reference that nothing resolved, rather than send its text."""
    assert sendable_headers([("A", "1")]) == {"A": "1"}
    with pytest.raises(Exception, match="the secret env:TARGET_KEY was not resolved"):
        sendable_headers([("Authorization", SecretRef(scheme=SecretScheme.ENV, name="TARGET_KEY"))])


def plain(request: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "refs",
        "target": {"url": "http://127.0.0.1:8000", "api": "http", "request": request},
        "slo": {"e2e_ms": 500, "timeout_ms": 1000},
        "phases": [CALM],
    }


def test_query_parameters_take_values_or_references_and_bad_ones_are_named() -> None:
    """`request.query` maps names to strings, numbers, true/false or references; anything else is a problem at
    its name, a malformed reference too, and the written value is never quoted."""
    scenario = parse_scenario(plain({"query": {"key": {"secret": "env:TARGET_KEY"}, "n": 2, "on": True, "q": "a b"}}))
    assert scenario.target.request.query == (
        ("key", SecretRef(scheme=SecretScheme.ENV, name="TARGET_KEY")), ("n", "2"), ("on", "true"), ("q", "a b"),
    )  # fmt: skip
    found = problems(plain({"query": {"key": {"secret": f"vault:{SECRET}"}, "x": [1], "y": "a\nb", "": "z"}}))
    assert found == [
        "target.request.query.key: a secret reference must be env:NAME or file:/absolute/path (its scheme one of "
        "env, file)",
        "target.request.query.x: must be a single-line string, a number, true/false or a secret reference",
        "target.request.query.y: must be a single-line string, a number, true/false or a secret reference",
        "target.request.query: is not a valid query parameter name",
    ]
    assert not any(SECRET in p for p in found)


def test_a_body_string_may_be_a_reference_and_a_malformed_one_is_named_by_its_path() -> None:
    """Only a mapping of the one key `secret` naming a scheme (`env:`, `file:`) is a reference; `{secret: "x"}`
    is part of the body as written. A reference to cliffwatch's own settings is refused where it stands."""
    scenario = parse_scenario(plain({"body": {"k": {"secret": "env:TARGET_K"}, "v": {"secret": "plain words"}}}))
    assert scenario.target.request.body == {"k": {"secret": "env:TARGET_K"}, "v": {"secret": "plain words"}}
    found = problems(plain({"body": {"list": [{"secret": "env:CLIFFWATCH_DATABASE_URL"}],
                                     "deep": {"x": {"secret": "file:relative/path"}}}}))  # fmt: skip
    assert found == [
        "target.request.body.list[0]: a secret reference must not name cliffwatch's own settings (CLIFFWATCH_*)",
        "target.request.body.deep.x: a secret reference file:PATH must give an absolute path of printable "
        "characters (at most 4096)",
    ]


@pytest.mark.parametrize(
    ("path", "sent"),
    [
        ("/v1/x", "/v1/x?key=a%20b%26c&n=1"),
        ("/v1/x?page=2", "/v1/x?page=2&key=a%20b%26c&n=1"),
        ("/v1/x#top", "/v1/x?key=a%20b%26c&n=1#top"),
    ],
)
def test_query_parameters_join_the_paths_own_percent_encoded_before_any_fragment(path: str, sent: str) -> None:
    assert sendable_path(path, (("key", "a b&c"), ("n", "1"))) == sent
    with pytest.raises(CliffwatchError, match=r"target.request.query.key: the secret env:K was not resolved"):
        sendable_path(path, (("key", SecretRef(scheme=SecretScheme.ENV, name="K")),))
