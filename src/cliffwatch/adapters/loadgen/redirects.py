"""Following a redirect, when the scenario asks for it (``client.follow_redirects``): the next hop's URL,
method, body and headers. The client admits the hop's host through the allowlist before sending anything
to it (``target_access.Destinations.admit``); this module only decides what the hop would be.

- 307 and 308 keep the method and body (RFC 9110). 303 turns into GET without a body (HEAD stays HEAD), as
  browsers do.
- 301 and 302 keep the method and body too. RFC 9110 lets a client turn a POST into a GET there, as
  browsers do for historical reasons; a load test does not: it replays the request the scenario describes,
  and a chat completion turned into a GET would load the target with a request nobody measured. A target
  that wants a GET after a POST answers 303.
- Other 3xx (300, 304, 305, 306), a missing or unreadable ``Location``, and schemes other than http(s) are
  not followed: the attempt ends with the redirect as its answer.
- Credentials (``CREDENTIALS``) go only to the target's own origin (scheme, host, port): a hop to another
  origin is sent without them, and they come back when a later hop returns to the origin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from yarl import URL

from cliffwatch.domain.quick_init import quick_init

FOLLOWED = frozenset({301, 302, 303, 307, 308})
CREDENTIALS = frozenset({"authorization", "proxy-authorization", "cookie", "api-key", "x-api-key"})
_BODY_HEADERS = frozenset({"content-type", "content-length", "content-encoding"})
_SHOWN = 200  # characters of a URL quoted in an error


@quick_init
@dataclass(frozen=True, kw_only=True)
class Hop:
    """One request of an attempt: the first, or one a redirect led to."""

    method: str
    url: str
    body: bytes | None
    headers: Mapping[str, str]


def next_hop(hop: Hop, status: int, location: str | None, *, origin: str, headers: Mapping[str, str]) -> Hop | str:
    """The hop a ``status`` answer to ``hop`` with ``location`` leads to, or why it is not followed.

    ``origin`` is the target's URL and ``headers`` its full request headers, sent again (credentials
    included) whenever the hop is to the target's own origin.
    """
    if status not in FOLLOWED:
        return f"a {status} is not a redirect to follow"
    if not location:
        return "the redirect has no Location"
    try:
        target = URL(hop.url).join(URL(location)).with_fragment(None)
        same_origin = _origin(target) == _origin(URL(origin))
    except (ValueError, UnicodeError):
        return f"unreadable Location {shown_url(location)}"
    if target.scheme not in ("http", "https") or not target.raw_host:
        return f"Location {shown_url(location)} is not an http(s) URL"
    if target.user is not None or target.password is not None:
        # A target may not hand the load credentials of its choosing (nor clash with the scenario's own).
        return f"Location {shown_url(location)} carries a user or password"
    method, body = hop.method, hop.body
    sent = dict(headers) if same_origin else {k: v for k, v in headers.items() if k.lower() not in CREDENTIALS}
    if status == 303 and method != "HEAD":
        method, body = "GET", None
    if body is None:  # nothing to describe: no Content-Type for a body that is not there
        sent = {k: v for k, v in sent.items() if k.lower() not in _BODY_HEADERS}
    return Hop(method=method, url=str(target), body=body, headers=sent)


def shown_url(url: str) -> str:
    """A URL as an error quotes it: without user and password, cut to a readable length."""
    try:
        text = str(URL(url).with_user(None).with_password(None)) if "@" in url else url
    except (ValueError, UnicodeError):
        text = repr(url)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _origin(url: URL) -> tuple[str, str, int | None]:
    return url.scheme, (url.raw_host or "").lower(), url.port
