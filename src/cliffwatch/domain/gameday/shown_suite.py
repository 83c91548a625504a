"""A suite as it may be shown and kept where viewers read it: every literal credential masked (a header's
token, a URL's password, a sensitive query parameter), and each webhook's URL cut to its scheme and host, since
a webhook's path is often its secret (a Slack incoming webhook's is).

The service drives a game day from the suite as sent, held in memory only; what it stores on the game day and
what the API and the dashboard show of a game day or a schedule is this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cliffwatch.domain.security.masking import origin_only
from cliffwatch.domain.security.redaction import redact_document


def shown_suite(document: Mapping[str, Any]) -> dict[str, Any]:
    shown = dict(redact_document(document).document)
    notify = shown.get("notify")
    if isinstance(notify, list):
        shown["notify"] = [_shown_webhook(entry) for entry in notify]
    return shown


def _shown_webhook(entry: Any) -> Any:
    if isinstance(entry, Mapping) and isinstance(entry.get("webhook"), str):
        return {**entry, "webhook": origin_only(entry["webhook"])}
    return entry
