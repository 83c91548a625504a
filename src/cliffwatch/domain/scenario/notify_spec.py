"""Whom to tell: the webhooks of a ``notify:`` list, the events each listens for, and one delivery's record.

Scenarios (their runs and sweeps) and game-day suites share the shape; each says which events exist for it:

```yaml
notify:
  - webhook: http://127.0.0.1:9000/hooks/runs      # CLIFFWATCH_ALLOWED_WEBHOOKS must allow it when it is sent
    format: generic                                # or slack
    "on": [not_passed, failed, interrupted]        # quoted: YAML 1.1 reads a bare on as true
    secret: {secret: "env:RUN_WEBHOOK_KEY"}        # the HMAC key of a generic body, by reference only
```

A run is ``finished`` when it ran to its end (whatever its score), ``not_passed`` when it ran to its end and did
not pass (its score, ``generator_limited``, ``capped``, ``workload_mismatch``), ``failed`` when it could not run
or was aborted, ``interrupted`` when it was stopped. A sweep of the same scenario tells the same webhooks of its
own events (``finished``, ``failed``, ``interrupted``). A webhook that does not say ``on`` hears the events a team
wants to hear of: a run that did not pass, failed or was interrupted; every sweep's end (its capacity is the
news). Parsing is pure; every problem names its field (``notify[0].on[1]: must be one of …``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from cliffwatch.domain.security.secrets import SecretRef, parse_reference
from cliffwatch.domain.validation import Reader

MAX_WEBHOOKS = 10


class WebhookFormat(StrEnum):
    GENERIC = "generic"  # the event as JSON, signed with an HMAC header when a key is given
    SLACK = "slack"  # Slack's incoming-webhook body, {"text": …}


class RunEvent(StrEnum):
    FINISHED = "finished"  # ran to its end, whatever its score
    NOT_PASSED = "not_passed"  # ran to its end and did not pass
    FAILED = "failed"  # could not run, or was aborted
    INTERRUPTED = "interrupted"  # stopped before its end (Ctrl-C, a shutdown, a lost lease)


class SweepEvent(StrEnum):
    FINISHED = "finished"
    FAILED = "failed"  # could not run, or was aborted
    INTERRUPTED = "interrupted"


RUN_DEFAULTS: tuple[str, ...] = (RunEvent.NOT_PASSED, RunEvent.FAILED, RunEvent.INTERRUPTED)
SWEEP_DEFAULTS: tuple[str, ...] = (SweepEvent.FINISHED, SweepEvent.FAILED, SweepEvent.INTERRUPTED)
# What a scenario's webhook may listen for: its runs' events and its sweeps' (a sweep's are a subset).
SCENARIO_EVENTS: tuple[str, ...] = tuple(RunEvent)


@dataclass(frozen=True, kw_only=True)
class WebhookSpec:
    url: str
    format: WebhookFormat = WebhookFormat.GENERIC
    on: tuple[str, ...] | None = None  # None: the defaults of whatever is told (a run's, a sweep's)
    secret: SecretRef | None = None  # the HMAC key of a generic body, by reference only

    def listens(self, event: str, defaults: Sequence[str] = ()) -> bool:
        """Whether this webhook hears ``event``: its own ``on``, or without one ``defaults``."""
        return event in (self.on if self.on is not None else defaults)


def listening(webhooks: Sequence[WebhookSpec], event: str, defaults: Sequence[str] = ()) -> list[WebhookSpec]:
    """The webhooks that hear ``event``, each with the events it hears written out."""
    hearing = [w for w in webhooks if w.listens(event, defaults)]
    return [replace(w, on=w.on if w.on is not None else tuple(defaults)) for w in hearing]


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """One webhook delivery as recorded, delivered or not: never an error of what it tells of."""

    url: str  # as shown: scheme and host only (a webhook's path is often its secret)
    event: str
    format: str
    ok: bool
    attempts: int  # 0: not sent at all (refused by the allowlist, its key unreadable)
    at: datetime  # when its last attempt ended
    status: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "event": self.event, "format": self.format, "ok": self.ok, "attempts": self.attempts,
                "status": self.status, "error": self.error, "at": self.at.isoformat()}  # fmt: skip


def parse_webhooks(reader: Reader, *, events: Sequence[str], defaults: Sequence[str] | None,
                   key: str = "notify") -> tuple[WebhookSpec, ...]:  # fmt: skip
    """The webhooks under ``key``, each listening for some of ``events`` (``defaults`` when it says none; None
    leaves ``on`` unset, for the defaults of what is told); problems go to ``reader``, naming their field."""
    found: list[WebhookSpec] = []
    items = list(reader.items(key, []))
    if len(items) > MAX_WEBHOOKS:
        reader.error(key, f"at most {MAX_WEBHOOKS} webhooks")
    for path, item in items:
        one = Reader.of(item, path, reader.problems)
        if one is None:
            continue
        url = one.string("webhook")
        if isinstance(url, str):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                one.error("webhook", "must be an http(s) URL with a host")
                url = None
        fmt = one.string("format", WebhookFormat.GENERIC.value, choices=tuple(f.value for f in WebhookFormat))
        on = _events(one, events) if one.has("on") else None
        secret = parse_reference(one.raw("secret"), one.child("secret"), one.problems) if one.has("secret") else None
        one.done()
        if isinstance(url, str) and fmt is not None and (on is not None or not one.has("on")):
            chosen = on if on is not None else None if defaults is None else tuple(defaults)
            found.append(WebhookSpec(url=url, format=WebhookFormat(fmt), on=chosen, secret=secret))
    return tuple(found)


def _events(reader: Reader, events: Sequence[str]) -> tuple[str, ...] | None:
    chosen: list[str] = []
    bad = False
    for path, event in reader.items("on", nonempty=True):
        if event not in events:
            reader.problems.add(path, f"must be one of {', '.join(events)}")
            bad = True
        elif event not in chosen:
            chosen.append(event)
    return None if bad or not chosen else tuple(chosen)
