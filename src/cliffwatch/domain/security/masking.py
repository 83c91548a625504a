"""The one mask cliffwatch shows in place of a credential, and masking of credentials inside strings and URLs.

Strings only, no documents: a URL's password, a URL's user part when it has no password (then the user
part is the token), the value of a query parameter with a sensitive name (``?api_key=…``, ``&sig=…``), and
``Name: value`` of a sensitive header inside free text (a log message, an error). ``domain.security.redaction`` masks
whole scenario documents with these; the log processor masks log lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

MASK = "***"
# Query parameters that carry a credential: API keys (Google's ``key``), OAuth tokens, signed URLs (S3's
# X-Amz-Signature, Azure's SAS ``sig``, GCS's X-Goog-Signature); compared without regard to case.
DEFAULT_SENSITIVE_QUERY = ("api_key", "apikey", "key", "token", "access_token", "refresh_token", "id_token",
                           "client_secret", "password", "signature", "sig", "x-amz-signature", "x-amz-credential",
                           "x-amz-security-token", "x-goog-signature", "x-goog-credential")  # fmt: skip
# The authority's user part ends at its last "@": a careless password may hold "@" itself. It cannot hold
# "/", "?", "#" or a space, or the URL would not parse (cliffwatch refuses such a target URL).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#\"'<>]*)@")


def mask_userinfo(userinfo: str) -> str:
    """``user:***`` for ``user:password``; ``***`` for a user part without a password (it is the token)."""
    if not userinfo:
        return userinfo
    user, colon, _ = userinfo.partition(":")
    return f"{user}:{MASK}" if colon else MASK


def mask_url(url: str) -> str:
    """``url`` (or any text holding URLs) with the credentials of every ``scheme://userinfo@`` masked."""
    if "@" not in url:
        return url
    return _USERINFO.sub(lambda m: f"{m['scheme']}{mask_userinfo(m['userinfo'])}@", url)


def without_password(url: str) -> str:
    """One URL (a database's, say) with the password of its user part masked, so it can be logged and shown.

    Unlike ``mask_url``, which finds URLs in any text and so stops a user part at ``/``, this takes the whole
    string as one URL: its user part ends at the last ``@``, so a careless password holding ``/`` is masked
    too. A user without a password is shown: a database's user name is not its credential."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    # The user part ends at the last "@": a password may itself hold "@", ":" or "/" (unescaped, if careless),
    # and masking too much of an odd URL is better than showing a password.
    user, at, host = rest.rpartition("@")
    if not at or ":" not in user:
        return url
    return f"{scheme}://{user.partition(':')[0]}:{MASK}@{host}"


def url_credentials(url: str) -> list[str]:
    """The passwords (or user parts without one) in the URLs of ``url``, masked ones included (as ``MASK``)."""
    found = []
    for match in _USERINFO.finditer(url) if "@" in url else ():
        user, colon, password = match["userinfo"].partition(":")
        found.append(password if colon else user)
    return [value for value in found if value]


def header_pattern(names: Iterable[str]) -> re.Pattern[str]:
    """Finds ``Name: value`` / ``'Name': 'value'`` / ``name=value`` of the given headers in free text; the value
    (group ``value``) runs to the end of the line, a quote, a comma or a closing brace."""
    alternatives = "|".join(sorted((re.escape(n) for n in names), key=len, reverse=True))
    return re.compile(
        rf"(?P<name>(?<![A-Za-z0-9-])(?:{alternatives})[\"']?\s*[:=]\s*[\"']?)(?P<value>[^\"'\r\n,}}]+)",
        re.IGNORECASE,
    )


def mask_headers_in_text(text: str, pattern: re.Pattern[str]) -> str:
    """``text`` with the value of every header ``pattern`` (``header_pattern``) finds masked."""
    return pattern.sub(lambda m: f"{m['name']}{MASK}", text)


def query_pattern(names: Iterable[str]) -> re.Pattern[str]:
    """Finds ``?name=value`` / ``&name=value`` (or ``;``) of the given parameter names in any text; the value
    (group ``value``) runs to the next ``&``, ``#``, space or quote."""
    alternatives = "|".join(sorted((re.escape(n) for n in names), key=len, reverse=True))
    return re.compile(rf"(?P<name>[?&;](?:{alternatives})=)(?P<value>[^&;#\s\"'<>]+)", re.IGNORECASE)


def mask_query(text: str, pattern: re.Pattern[str]) -> str:
    """``text`` with the value of every sensitive query parameter ``pattern`` (``query_pattern``) finds masked."""
    if "=" not in text:
        return text
    return pattern.sub(lambda m: f"{m['name']}{MASK}", text)


def query_credentials(text: str, pattern: re.Pattern[str]) -> list[str]:
    """The values of the sensitive query parameters in ``text``, masked ones included (as ``MASK``)."""
    return [m["value"] for m in pattern.finditer(text)] if "=" in text else []


def origin_only(url: str) -> str:
    """``url`` as its scheme and host (and port) only, ``/…`` standing for any path or query: what a webhook's URL
    is shown and kept as, since its path is often its secret (a Slack incoming webhook's is)."""
    parts = urlsplit(mask_url(url))
    origin = f"{parts.scheme}://{parts.netloc}"
    return f"{origin}/…" if parts.path not in ("", "/") or parts.query else f"{origin}/"
