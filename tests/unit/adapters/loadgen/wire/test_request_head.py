"""The lean transport's request head: the Host a URL names (never its user part), a URL's credentials as Basic
authorization unless the scenario sets its own, Accept by default, and a header that would split the request
refused."""

from __future__ import annotations

import base64

import pytest

from cliffwatch.adapters.loadgen.redirects import Hop
from cliffwatch.adapters.loadgen.wire.pool import Origin
from cliffwatch.adapters.loadgen.wire.reader import WireReader, _head


def head(url: str, headers: dict[str, str] | None = None, method: str = "POST") -> tuple[Origin, list[str]]:
    origin, made = _head(Hop(method=method, url=url, body=b"{}", headers=headers or {}))
    return origin, made.decode().split("\r\n")


def test_the_host_and_target_come_from_the_url_and_its_user_part_becomes_basic_authorization() -> None:
    origin, lines = head("http://alice:p%40ss@127.0.0.1:8000/v1/chat?x=1", {"Content-Type": "application/json"})
    assert origin == Origin(scheme="http", host="127.0.0.1", port=8000)
    assert lines[:3] == ["POST /v1/chat?x=1 HTTP/1.1", "Host: 127.0.0.1:8000", "Content-Type: application/json"]
    assert f"Authorization: Basic {base64.b64encode(b'alice:p@ss').decode()}" in lines
    assert "Accept: */*" in lines
    assert lines[-1] == ""  # the head ends its last line; the length and the blank line follow per request
    assert not any("alice" in line for line in lines if line.startswith("Host"))


def test_a_scenarios_own_authorization_and_accept_win_and_default_ports_are_left_out() -> None:
    origin, lines = head("https://user:pw@example.test/", {"authorization": "Bearer t", "Accept": "text/event-stream"})
    assert origin == Origin(scheme="https", host="example.test", port=443)
    assert "Host: example.test" in lines
    assert [line for line in lines if line.lower().startswith("authorization")] == ["authorization: Bearer t"]
    assert "Accept: */*" not in lines
    _, six = head("http://[::1]:9000/", method="GET")
    assert "Host: [::1]:9000" in six


def test_a_header_with_a_line_break_or_a_url_without_a_host_is_refused() -> None:
    with pytest.raises(ValueError, match="line break"):
        head("http://127.0.0.1:8000/", {"X-Evil": "a\r\nX-Injected: 1"})
    with pytest.raises(ValueError, match="http"):
        head("ftp://127.0.0.1/")


def test_a_kept_head_is_found_by_its_headers_content_never_by_another_dict_that_took_its_place() -> None:
    """A redirect's headers are a dict of their own, freed after the hop: a later hop to the same URL with other
    headers (its credentials dropped, say) must be written with its own."""
    reader = WireReader.__new__(WireReader)
    reader._heads = {}
    url = "http://127.0.0.1:8000/v1"
    _, first = reader._head(Hop(method="GET", url=url, body=None, headers={"Authorization": "Bearer t"}))
    _, second = reader._head(Hop(method="GET", url=url, body=None, headers={}))
    assert b"Bearer t" in first
    assert b"Bearer t" not in second
    _, again = reader._head(Hop(method="GET", url=url, body=None, headers={"Authorization": "Bearer t"}))
    assert again is first  # the same content: the head made once is reused
