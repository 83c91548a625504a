"""Secrets at a run's start: every reference read through the port, every failure named, no value told."""

from __future__ import annotations

from typing import Any

import pytest

from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.security.redaction import DEFAULT_RULES
from cliffwatch.domain.security.secrets import SecretsUnavailable
from cliffwatch.services.secrets import InMemorySecrets, resolve_secrets, secret_values

KEY = "sk-live-0123456789"


def scenario(headers: dict[str, Any], url: str = "http://127.0.0.1:8000") -> Any:
    return parse_scenario({
        "name": "refs",
        "target": {"url": url, "request": {"model": "m", "headers": headers}},
        "slo": {"e2e_ms": 500, "timeout_ms": 1000},
        "phases": [{"name": "calm", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant",
                                                                                   "rate": 1}}],
    })  # fmt: skip


def test_every_reference_is_replaced_by_the_secret_it_names() -> None:
    """The resolved scenario sends the values; literal headers and the header order stay."""
    written = scenario({"Authorization": {"secret": "env:TARGET_API_KEY"}, "X-Trace": "1",
                        "X-Key": {"secret": "file:/run/secrets/key"}})  # fmt: skip
    secrets = InMemorySecrets({"env:TARGET_API_KEY": f"Bearer {KEY}", "file:/run/secrets/key": "k2"})

    resolved = resolve_secrets(written, secrets)

    assert resolved.target.request.headers == (("Authorization", f"Bearer {KEY}"), ("X-Trace", "1"), ("X-Key", "k2"))
    assert secrets.resolved == ["env:TARGET_API_KEY", "file:/run/secrets/key"]
    assert resolved.content_hash == written.content_hash
    assert secret_values(written, resolved, DEFAULT_RULES) == [f"Bearer {KEY}", "k2"]


def test_a_scenario_without_references_reads_nothing() -> None:
    """No reference, no read: the scenario is returned as it is."""
    written = scenario({"X-Trace": "1"})
    secrets = InMemorySecrets()

    assert resolve_secrets(written, secrets) is written
    assert secrets.resolved == []


def test_every_missing_secret_is_named_by_its_field_and_reference_and_none_by_its_value() -> None:
    """One error lists each reference that cannot be read (unset, empty, multi-line), never a value."""
    written = scenario({"Authorization": {"secret": "env:TARGET_API_KEY"}, "X-Empty": {"secret": "env:TARGET_EMPTY"},
                        "X-Lines": {"secret": "file:/run/secrets/lines"},
                        "X-Fine": {"secret": "env:TARGET_FINE"}})  # fmt: skip
    secrets = InMemorySecrets({"env:TARGET_EMPTY": "", "file:/run/secrets/lines": f"{KEY}\nInjected: 1",
                               "env:TARGET_FINE": KEY})  # fmt: skip

    with pytest.raises(SecretsUnavailable) as caught:
        resolve_secrets(written, secrets)

    message = str(caught.value)
    assert message.startswith("secrets are missing, no load was sent (3 problem(s)):")
    assert "target.request.headers.Authorization: env:TARGET_API_KEY is not set" in message
    assert "target.request.headers.X-Empty: env:TARGET_EMPTY is empty" in message
    assert "target.request.headers.X-Lines: file:/run/secrets/lines holds a line break or NUL" in message
    assert KEY not in message


def test_the_url_password_and_sensitive_literals_are_secret_values_too() -> None:
    """What a run sends that log lines must mask: the URL's password and sensitive headers, references or not."""
    written = scenario({"x-api-key": "literal-key", "X-Trace": "1"}, url="http://alice:pw-123@127.0.0.1:8000")

    assert secret_values(written, resolve_secrets(written, InMemorySecrets()), DEFAULT_RULES) == [
        "pw-123", "literal-key"
    ]  # fmt: skip


def plain(request: dict[str, Any]) -> Any:
    return parse_scenario({
        "name": "refs",
        "target": {"url": "http://127.0.0.1:8000", "api": "http", "request": {"method": "POST", **request}},
        "slo": {"e2e_ms": 500, "timeout_ms": 1000},
        "phases": [{"name": "calm", "role": "baseline", "duration_s": 1,
                    "arrival": {"process": "constant", "rate": 1}}],
    })  # fmt: skip


def test_references_in_the_query_and_the_body_are_replaced_and_masked_in_log_lines() -> None:
    """A query parameter's reference and a body string's reference (at any depth, in lists too) send the secret;
    each is a value log lines mask, as are the literal values under sensitive names."""
    written = plain({"path": "/v1?api_key=literal-path-key", "query": {"sig": {"secret": "env:TARGET_SIG"}, "n": 1},
                     "body": {"auth": [{"token": {"secret": "file:/run/secrets/t"}}], "password": "literal-pw",
                              "note": {"secret": "not a reference"}}})  # fmt: skip
    secrets = InMemorySecrets({"env:TARGET_SIG": "sig-0123", "file:/run/secrets/t": "tok-4567"})

    resolved = resolve_secrets(written, secrets)

    assert resolved.target.request.query == (("sig", "sig-0123"), ("n", "1"))
    assert resolved.target.request.body == {"auth": [{"token": "tok-4567"}], "password": "literal-pw",
                                            "note": {"secret": "not a reference"}}  # fmt: skip
    assert set(secret_values(written, resolved, DEFAULT_RULES)) == {"sig-0123", "tok-4567", "literal-pw",
                                                                    "literal-path-key"}  # fmt: skip


def test_a_missing_query_or_body_secret_is_named_by_its_field() -> None:
    """The problems name the query parameter and the body's path; a body secret may span lines, a query's not."""
    written = plain(
        {
            "query": {"key": {"secret": "env:TARGET_KEY"}},
            "body": {"a": {"b": {"secret": "env:TARGET_BODY"}}, "pem": {"secret": "env:TARGET_PEM"}},
        }
    )
    secrets = InMemorySecrets({"env:TARGET_KEY": "one\ntwo", "env:TARGET_PEM": "-----BEGIN-----\nx\n-----END-----"})

    with pytest.raises(SecretsUnavailable) as caught:
        resolve_secrets(written, secrets)

    message = str(caught.value)
    assert "(2 problem(s))" in message
    assert "target.request.query.key: env:TARGET_KEY holds a line break or NUL" in message
    assert "target.request.body.a.b: env:TARGET_BODY is not set" in message
