"""Where a followed redirect goes next, with which method, body and headers (``loadgen.redirects``)."""

from __future__ import annotations

import pytest

from cliffwatch.adapters.loadgen.redirects import Hop, next_hop, shown_url

ORIGIN = "http://127.0.0.1:8000/v1/chat/completions"
HEADERS = {"Authorization": "Bearer sk", "COOKIE": "a=1", "Content-Type": "application/json", "X-Trace": "t"}


def post() -> Hop:
    return Hop(method="POST", url=ORIGIN, body=b"{}", headers=HEADERS)


@pytest.mark.parametrize(
    ("location", "url"),
    [
        ("/v2/chat", "http://127.0.0.1:8000/v2/chat"),
        ("next", "http://127.0.0.1:8000/v1/chat/next"),
        ("http://127.0.0.1:9000/x#frag", "http://127.0.0.1:9000/x"),
        ("//other.test/y", "http://other.test/y"),
    ],
)
def test_a_location_is_resolved_against_the_hops_url_without_its_fragment(location: str, url: str) -> None:
    hop = next_hop(post(), 307, location, origin=ORIGIN, headers=HEADERS)
    assert isinstance(hop, Hop)
    assert hop.url == url


def test_credentials_go_only_to_the_targets_origin_whatever_their_case() -> None:
    """Another port is another origin; a hop back to the origin gets them again."""
    away = next_hop(post(), 307, "http://127.0.0.1:9000/", origin=ORIGIN, headers=HEADERS)
    assert isinstance(away, Hop)
    assert dict(away.headers) == {"Content-Type": "application/json", "X-Trace": "t"}
    back = next_hop(away, 307, ORIGIN, origin=ORIGIN, headers=HEADERS)
    assert isinstance(back, Hop)
    assert dict(back.headers) == HEADERS


def test_a_303_after_a_head_stays_a_head() -> None:
    head = Hop(method="HEAD", url=ORIGIN, body=None, headers={})
    hop = next_hop(head, 303, "/elsewhere", origin=ORIGIN, headers={})
    assert isinstance(hop, Hop)
    assert hop.method == "HEAD"


@pytest.mark.parametrize(
    ("status", "location", "why"),
    [
        (300, "/x", "a 300 is not a redirect to follow"),
        (307, "", "no Location"),
        (307, "file:///etc/passwd", "is not an http(s) URL"),
        (307, "http://[::1/", "unreadable Location"),
        (307, "/x?then=1", None),
        (307, "http://u:p@127.0.0.1:8000/x", "carries a user or password"),
        (307, "//tok@127.0.0.1:8000/x", "carries a user or password"),
    ],
)
def test_what_is_not_followed_says_why(status: int, location: str, why: str | None) -> None:
    """A Location with a user or password is never followed: aiohttp would raise on it beside the scenario's
    Authorization, and a target may not choose the credentials the load carries."""
    reason = next_hop(post(), status, location, origin=ORIGIN, headers=HEADERS)
    if why is None:
        assert isinstance(reason, Hop)
        return
    assert isinstance(reason, str)
    assert why in reason
    assert "u:p@" not in reason


def test_a_quoted_url_loses_its_password_and_is_cut_to_a_readable_length() -> None:
    assert shown_url("http://user:pw@127.0.0.1:9/x") == "http://127.0.0.1:9/x"
    long = shown_url("http://127.0.0.1/" + "a" * 500)
    assert len(long) == 200
    assert long.endswith("…")
