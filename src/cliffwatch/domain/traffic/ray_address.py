"""What a Ray cluster's address may look like, checked before anything tries to join it.

A malformed address is the user's input error (exit 2, a settings problem) and is caught where it is read
(``--ray``, ``CLIFFWATCH_RAY_ADDRESS``); only a well-formed address where nothing answers is the
environment's (exit 3, found when the run joins the cluster).
"""

from __future__ import annotations

import re

RAY_ADDRESS_FORMS = "auto, HOST:PORT or ray://HOST:PORT"
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)$")


def ray_address_problem(address: str) -> str | None:
    """Why ``address`` is not a Ray address cliffwatch can join, or None."""
    if address == "auto":
        return None
    rest = address.removeprefix("ray://")
    host, colon, port = rest.rpartition(":")
    if not colon or not host or not _HOST.match(host):
        return f"{address!r} is not {RAY_ADDRESS_FORMS}"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"{address!r}: the port must be a number from 1 to 65535"
    return None
