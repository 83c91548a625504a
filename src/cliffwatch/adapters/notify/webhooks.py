"""Webhooks: a game day's events posted to the URLs its suite names, and every delivery recorded.

- ``generic``: the event as JSON, signed when the suite gives a key (by reference only): the
  ``X-Cliffwatch-Signature`` header is ``sha256=`` and the hex HMAC-SHA256 of ``<timestamp>.<body>`` under the
  key, ``X-Cliffwatch-Timestamp`` the Unix time it was made at, so a receiver can refuse a replay;
- ``slack``: a Slack-compatible body (``{"text": …}``, Slack's incoming-webhook shape), the summary in one line
  a broken hypothesis each.

Every URL must pass ``CLIFFWATCH_ALLOWED_WEBHOOKS`` (loopback by default) and the deny list, checked on the
resolved addresses and pinned (``Destinations``) as a run's target is. A delivery is tried up to
``ATTEMPTS`` times with a doubling back-off on a connection failure or a 5xx; a 4xx is final. A webhook that
fails never fails the game day: each delivery, and why it failed, is what ``notify`` returns.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from cliffwatch import __version__
from cliffwatch.adapters.loadgen.pinned_resolver import PinnedResolver
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.gameday.suite_spec import SuiteEvent, WebhookFormat, WebhookSpec
from cliffwatch.domain.security.masking import mask_url
from cliffwatch.domain.security.secrets import SecretRef

ATTEMPTS = 3
FIRST_BACKOFF_S = 0.5
TIMEOUT_S = 10.0
SIGNATURE = "X-Cliffwatch-Signature"
TIMESTAMP = "X-Cliffwatch-Timestamp"


@dataclass(frozen=True, kw_only=True)
class Delivery:
    url: str  # as shown: scheme and host (``shown_url``)
    event: SuiteEvent
    ok: bool
    attempts: int
    status: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "event": self.event.value, "ok": self.ok, "attempts": self.attempts,
                "status": self.status, "error": self.error}  # fmt: skip


def shown_url(url: str) -> str:
    """A webhook's URL as printed and kept: its scheme and host only. A webhook's path is often its secret (a
    Slack incoming webhook's is), and a delivery record must not hand it to whoever reads the result."""
    parts = urlsplit(mask_url(url))
    return (
        f"{parts.scheme}://{parts.netloc}/…"
        if parts.path not in ("", "/") or parts.query
        else f"{parts.scheme}://{parts.netloc}/"
    )


def signature(key: str, timestamp: str, body: bytes) -> str:
    """The ``X-Cliffwatch-Signature`` value of ``body`` made at ``timestamp`` under ``key``."""
    digest = hmac.new(key.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def slack_body(event: SuiteEvent, payload: Mapping[str, Any]) -> dict[str, Any]:
    lines = [f"cliffwatch game day {payload.get('summary', '')} ({event.value})"]
    for experiment in payload.get("experiments") or []:
        if experiment.get("state") in ("broken", "failed"):
            why = "; ".join(experiment.get("broken_because") or []) or experiment.get("error") or ""
            lines.append(f"• {experiment.get('name')}: {experiment.get('state')}: {why}")
    return {"text": "\n".join(lines)}


async def notify(
    webhooks: Sequence[WebhookSpec],
    event: SuiteEvent,
    payload: Mapping[str, Any],
    *,
    destinations: Destinations,
    resolve: Callable[[SecretRef], str],
    sleep: Callable[[float], Any] = asyncio.sleep,
) -> list[Delivery]:
    """Posts ``event`` (with ``payload``, the game day's summary document) to each webhook that listens for it."""
    listening = [w for w in webhooks if event in w.on]
    if not listening:
        return []
    connector = aiohttp.TCPConnector(resolver=PinnedResolver(destinations), use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                     timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session:  # fmt: skip
        return [await _deliver(session, w, event, payload, destinations, resolve, sleep) for w in listening]


async def _deliver(session: aiohttp.ClientSession, webhook: WebhookSpec, event: SuiteEvent,
                   payload: Mapping[str, Any], destinations: Destinations, resolve: Callable[[SecretRef], str],
                   sleep: Callable[[float], Any]) -> Delivery:  # fmt: skip
    shown = shown_url(webhook.url)
    try:
        await destinations.admit(webhook.url, field="notify.webhook")
        body, headers = _request(webhook, event, payload, resolve)
    except CliffwatchError as exc:
        return Delivery(url=shown, event=event, ok=False, attempts=0, error=str(exc))
    status: int | None = None
    error: str | None = None
    for attempt in range(1, ATTEMPTS + 1):
        try:
            async with session.post(webhook.url, data=body, headers=headers, allow_redirects=False) as response:
                await response.read()
                status, error = response.status, None
                if response.status < 300:
                    return Delivery(url=shown, event=event, ok=True, attempts=attempt, status=status)
                if response.status < 500:
                    break  # the receiver refused it: asking again would be refused again
                error = f"HTTP {response.status}"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            status, error = None, f"{type(exc).__name__}: {str(exc)[:120]}"
        if attempt < ATTEMPTS:
            await sleep(FIRST_BACKOFF_S * 2 ** (attempt - 1))
    return Delivery(url=shown, event=event, ok=False, attempts=attempt, status=status,
                    error=error or f"HTTP {status}")  # fmt: skip


class WebhookNotifier:
    """``services.ports.Notifier``: ``notify`` with this service's destinations and secrets, each delivery as
    its record."""

    def __init__(self, destinations: Destinations, resolve: Callable[[SecretRef], str]) -> None:
        self.destinations = destinations
        self.resolve = resolve

    async def __call__(
        self, webhooks: Sequence[WebhookSpec], event: SuiteEvent, payload: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        found = await notify(webhooks, event, payload, destinations=self.destinations, resolve=self.resolve)
        return [delivery.to_dict() for delivery in found]


def _request(webhook: WebhookSpec, event: SuiteEvent, payload: Mapping[str, Any],
             resolve: Callable[[SecretRef], str]) -> tuple[bytes, dict[str, str]]:  # fmt: skip
    headers = {"Content-Type": "application/json", "User-Agent": f"cliffwatch/{__version__}"}
    if webhook.format is WebhookFormat.SLACK:
        return json.dumps(slack_body(event, payload)).encode(), headers
    body = json.dumps({"event": event.value, **payload}).encode()
    headers["X-Cliffwatch-Event"] = event.value
    if webhook.secret is not None:
        stamp = str(int(time.time()))
        headers[TIMESTAMP] = stamp
        headers[SIGNATURE] = signature(resolve(webhook.secret), stamp, body)
    return body, headers
