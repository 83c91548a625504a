"""Log lines as the CLI and the service write them: no credential in any of them, whatever carries it."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from cliffwatch.adapters.runtime.logs import configure_logging, forget_secrets, remember_secrets
from cliffwatch.domain.security.redaction import RedactionRules

KEY = "sk-live-0123456789"


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


@pytest.fixture(autouse=True)
def _no_secret_remembered() -> Iterator[None]:
    """Each rule is tested on its own: a key an earlier test (or run) remembered would mask it whatever the rule."""
    forget_secrets()
    yield
    forget_secrets()


@pytest.fixture
def lines() -> io.StringIO:
    stream = io.StringIO()
    configure_logging(level="debug", fmt="json", stream=stream, rules=RedactionRules.adding(["X-Tenant-Key"]))
    return stream


def logged(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_urls_sensitive_keys_and_header_text_are_masked_in_every_format(fmt: str) -> None:
    """A URL's password, an event key named like a sensitive header and `Name: value` in text lose their values."""
    stream = io.StringIO()
    configure_logging(level="info", fmt=fmt, stream=stream, rules=RedactionRules.adding(["X-Tenant-Key"]))
    structlog.get_logger("t").info(
        f"run started against http://alice:{KEY}@127.0.0.1:8000",
        target=f"http://alice:{KEY}@127.0.0.1:8000/v1",
        authorization=f"Bearer {KEY}",
        headers={"X-Tenant-Key": KEY, "Accept": "text/plain"},
        detail=f"sent {{'x-api-key': '{KEY}'}}",
        attempts=[f"Cookie: s={KEY}"],
    )
    text = stream.getvalue()

    assert KEY not in text
    assert "alice:***@127.0.0.1:8000" in text
    assert "text/plain" in text
    if fmt == "json":  # each rule on its own field
        [record] = [json.loads(line) for line in text.splitlines()]
        assert record["target"] == "http://alice:***@127.0.0.1:8000/v1"
        assert record["authorization"] == "***"
        assert record["headers"] == {"X-Tenant-Key": "***", "Accept": "text/plain"}
        assert record["detail"] == "sent {'x-api-key': '***'}"
        assert record["attempts"] == ["Cookie: ***"]


def test_standard_library_records_and_tracebacks_are_masked(lines: io.StringIO) -> None:
    """aiohttp's and asyncio's records, and an exception's text, pass the same redactor."""
    logging.getLogger("aiohttp.client").warning("could not reach http://bob:%s@10.0.0.1/", KEY)
    try:
        raise ValueError(f"Authorization: Bearer {KEY}")
    except ValueError:
        structlog.get_logger("t").exception("run crashed")

    records = logged(lines)
    assert [r["event"] for r in records] == ["could not reach http://bob:***@10.0.0.1/", "run crashed"]
    assert "ValueError: Authorization: ***" in str(records[1]["exception"])
    assert KEY not in lines.getvalue()


def test_a_secret_a_run_resolved_is_masked_wherever_it_turns_up(lines: io.StringIO) -> None:
    """Values ``remember_secrets`` was told of are masked anywhere, also when logged without their scheme."""
    remember_secrets([f"Bearer {KEY}", "abc"])
    structlog.get_logger("t").warning("odd answer", body=f"echo: {KEY}!", note="abc is short and stays")

    record = logged(lines)[0]
    assert record["body"] == "echo: ***!"
    assert record["note"] == "abc is short and stays"
