"""Webhooks: a run's, a sweep's or a game day's events posted to the URLs its ``notify:`` names, every delivery
recorded.

- ``generic``: the event as JSON, signed when the suite gives a key (by reference only): the
  ``X-Cliffwatch-Signature`` header is ``sha256=`` and the hex HMAC-SHA256 of ``<timestamp>.<body>`` under the
  key, ``X-Cliffwatch-Timestamp`` the Unix time it was made at, so a receiver can refuse a replay;
- ``slack``: a Slack-compatible body (``{"text": …}``, Slack's incoming-webhook shape): a run's or a sweep's
  scorecard line, or a game day's summary and a line a broken hypothesis.

Every URL must pass ``CLIFFWATCH_ALLOWED_WEBHOOKS`` (loopback by default) and the deny list, checked on the
resolved addresses and pinned (``Destinations``) as a run's target is. A delivery is tried up to
``ATTEMPTS`` times with a doubling back-off on a connection failure or a 5xx; a 4xx is final. A webhook that
fails never fails what it tells of: each delivery, and why it failed, is what ``notify`` returns.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import aiohttp

from cliffwatch import __version__
from cliffwatch.adapters.loadgen.pinned_resolver import PinnedResolver
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.domain.errors import CliffwatchError, Problem
from cliffwatch.domain.scenario.notify_spec import Delivery, WebhookFormat, WebhookSpec, listening
from cliffwatch.domain.security.allowlist import Allowlist
from cliffwatch.domain.security.masking import origin_only
from cliffwatch.domain.security.secrets import SecretRef

ATTEMPTS = 3
FIRST_BACKOFF_S = 0.5
TIMEOUT_S = 10.0
SIGNATURE = "X-Cliffwatch-Signature"
TIMESTAMP = "X-Cliffwatch-Timestamp"


def shown_url(url: str) -> str:
    """A webhook's URL as printed and kept: its scheme and host only. A webhook's path is often its secret (a
    Slack incoming webhook's is), and a delivery record must not hand it to whoever reads the result."""
    return origin_only(url)


def signature(key: str, timestamp: str, body: bytes) -> str:
    """The ``X-Cliffwatch-Signature`` value of ``body`` made at ``timestamp`` under ``key``."""
    digest = hmac.new(key.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def slack_body(event: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Slack's incoming-webhook body: a run's or a sweep's scorecard line, or a game day's summary and a line a
    broken or failed experiment."""
    if payload.get("kind") != "gameday":
        return {"text": f"cliffwatch {payload.get('kind', 'run')} {payload.get('headline', '')} ({event})"}
    lines = [f"cliffwatch game day {payload.get('summary', '')} ({event})"]
    for experiment in payload.get("experiments") or []:
        if experiment.get("state") in ("broken", "failed"):
            why = "; ".join(experiment.get("broken_because") or []) or experiment.get("error") or ""
            lines.append(f"• {experiment.get('name')}: {experiment.get('state')}: {why}")
    return {"text": "\n".join(lines)}


async def notify(
    webhooks: Sequence[WebhookSpec],
    event: str,
    payload: Mapping[str, Any],
    *,
    destinations: Destinations,
    resolve: Callable[[SecretRef], str],
    defaults: Sequence[str] = (),
    sleep: Callable[[float], Any] = asyncio.sleep,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[Delivery]:
    """Posts ``event`` (with ``payload``, the summary of what ended) to each webhook that listens for it (its own
    ``on``, else ``defaults``)."""
    hearing = listening(webhooks, event, defaults)
    if not hearing:
        return []
    connector = aiohttp.TCPConnector(resolver=PinnedResolver(destinations), use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                     timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session:  # fmt: skip
        return [await _deliver(session, w, event, payload, destinations, resolve, sleep, now) for w in hearing]


async def _deliver(session: aiohttp.ClientSession, webhook: WebhookSpec, event: str, payload: Mapping[str, Any],
                   destinations: Destinations, resolve: Callable[[SecretRef], str], sleep: Callable[[float], Any],
                   now: Callable[[], datetime]) -> Delivery:  # fmt: skip
    shown = shown_url(webhook.url)
    said: dict[str, Any] = {"url": shown, "event": str(event), "format": webhook.format.value}
    try:
        await destinations.admit(webhook.url, field="notify.webhook")
        body, headers = _request(webhook, event, payload, resolve)
    except CliffwatchError as exc:
        return Delivery(**said, ok=False, attempts=0, at=now(), error=str(exc))
    status: int | None = None
    error: str | None = None
    for attempt in range(1, ATTEMPTS + 1):
        try:
            async with session.post(webhook.url, data=body, headers=headers, allow_redirects=False) as response:
                await response.read()
                status, error = response.status, None
                if response.status < 300:
                    return Delivery(**said, ok=True, attempts=attempt, at=now(), status=status)
                if response.status < 500:
                    break  # the receiver refused it: asking again would be refused again
                error = f"HTTP {response.status}"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            status, error = None, f"{type(exc).__name__}: {str(exc)[:120]}"
        if attempt < ATTEMPTS:
            await sleep(FIRST_BACKOFF_S * 2 ** (attempt - 1))
    return Delivery(**said, ok=False, attempts=attempt, at=now(), status=status, error=error or f"HTTP {status}")


class WebhookNotifier:
    """``services.ports.Notifier``: ``notify`` with this service's allowlist of webhooks and its secrets.

    Each telling admits its webhooks afresh (its own ``Destinations``): a long-lived service must not pin a
    webhook's address for its whole life (a Slack or CDN address changes), keep a lookup that failed once as a
    refusal for ever, or run out of places after a thousand webhooks, as one set of destinations shared by every
    run would."""

    def __init__(self, allowlist: Allowlist, resolve: Callable[[SecretRef], str]) -> None:
        self.allowlist = allowlist
        self.resolve = resolve

    async def __call__(
        self, webhooks: Sequence[WebhookSpec], event: str, payload: Mapping[str, Any], *, defaults: Sequence[str] = ()
    ) -> list[Delivery]:
        return await notify(webhooks, event, payload, destinations=Destinations(self.allowlist), resolve=self.resolve,
                            defaults=defaults)  # fmt: skip

    async def problems(self, webhooks: Sequence[WebhookSpec], at: str = "notify") -> list[Problem]:
        """Why each webhook could not be told, judged now, before anything runs: a URL outside
        ``CLIFFWATCH_ALLOWED_WEBHOOKS`` or on the deny list (or whose name does not resolve), a secret reference that
        cannot be read. The same checks a delivery makes, so a typo surfaces at the request, not hours later."""
        destinations = Destinations(self.allowlist)
        found = []
        for index, webhook in enumerate(webhooks):
            try:
                await destinations.admit(webhook.url)
            except CliffwatchError as exc:
                reason = getattr(exc, "reason", str(exc))
                found.append(Problem(path=f"{at}[{index}].webhook", message=f"{shown_url(webhook.url)}: {reason}"))
            if webhook.secret is not None:
                try:
                    self.resolve(webhook.secret)
                except CliffwatchError as exc:
                    found.append(Problem(path=f"{at}[{index}].secret", message=str(exc)))
        return found


def _request(webhook: WebhookSpec, event: str, payload: Mapping[str, Any],
             resolve: Callable[[SecretRef], str]) -> tuple[bytes, dict[str, str]]:  # fmt: skip
    headers = {"Content-Type": "application/json", "User-Agent": f"cliffwatch/{__version__}"}
    if webhook.format is WebhookFormat.SLACK:
        return json.dumps(slack_body(event, payload)).encode(), headers
    body = json.dumps({"event": str(event), **payload}).encode()
    headers["X-Cliffwatch-Event"] = str(event)
    if webhook.secret is not None:
        stamp = str(int(time.time()))
        headers[TIMESTAMP] = stamp
        headers[SIGNATURE] = signature(resolve(webhook.secret), stamp, body)
    return body, headers
