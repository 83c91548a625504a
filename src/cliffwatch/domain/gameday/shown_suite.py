"""A suite as it may be shown and kept where viewers read it: every literal credential masked (a header's
token, a URL's password, a sensitive query parameter) and each webhook's URL cut to its scheme and host
(``https://hooks.slack.com/***``: its path is often its secret, a Slack incoming webhook's is).

The service drives a game day from the suite as sent, held in memory only; what it stores on the game day and
what the API and the dashboard show of a game day or a schedule is this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cliffwatch.domain.security.redaction import redact_document


def shown_suite(document: Mapping[str, Any]) -> dict[str, Any]:
    return dict(redact_document(document).document)
