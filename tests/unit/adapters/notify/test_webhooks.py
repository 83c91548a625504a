"""Webhooks to a loopback receiver: a generic body signed with HMAC, a Slack body, retries with back-off, a final
refusal, and a URL outside CLIFFWATCH_ALLOWED_WEBHOOKS never contacted."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.adapters.notify.webhooks import SIGNATURE, TIMESTAMP, notify, shown_url
from cliffwatch.domain.gameday.suite_spec import SuiteEvent
from cliffwatch.domain.scenario.notify_spec import RUN_DEFAULTS, RunEvent, WebhookFormat, WebhookSpec
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from cliffwatch.domain.security.secrets import SecretRef, SecretScheme

KEY = "s3cret-key"
PAYLOAD = {"kind": "gameday", "name": "gd", "verdict": "broken", "summary": "gd: broken (1 held, 1 broken)",
           "experiments": [{"name": "a", "state": "held", "broken_because": []},
                           {"name": "b", "state": "broken", "broken_because": ["score 41.3 < 60"]}]}  # fmt: skip


class Receiver:
    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.seen: list[tuple[dict[str, str], bytes]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((dict(request.headers), await request.read()))
        return web.Response(status=self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0])


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    found = Receiver([200])
    app = web.Application()
    app.router.add_post("/hook", found.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield found, str(server.make_url("/hook"))
    await server.close()


def loopback() -> Destinations:
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    return Destinations(allowlist)


async def send(webhook: WebhookSpec, event: str = SuiteEvent.FINISHED, payload: dict[str, Any] = PAYLOAD,
               defaults: tuple[str, ...] = tuple(SuiteEvent)) -> list[Any]:  # fmt: skip
    async def no_wait(seconds: float) -> None:
        return None

    return await notify([webhook], event, payload, destinations=loopback(), resolve=lambda ref: KEY, sleep=no_wait,
                        defaults=defaults)  # fmt: skip


async def test_a_generic_body_is_signed_so_the_receiver_can_check_it(receiver: tuple[Receiver, str]) -> None:
    found, url = receiver
    (delivery,) = await send(WebhookSpec(url=url, secret=SecretRef(scheme=SecretScheme.ENV, name="KEY")))
    assert delivery.ok
    assert delivery.attempts == 1
    assert (delivery.format, delivery.event) == ("generic", "finished")
    assert delivery.at.tzinfo is not None
    ((headers, body),) = found.seen
    expected = hmac.new(KEY.encode(), headers[TIMESTAMP].encode() + b"." + body, hashlib.sha256).hexdigest()
    assert headers[SIGNATURE] == f"sha256={expected}"
    document = json.loads(body)
    assert document["event"] == "finished"
    assert document["summary"] == PAYLOAD["summary"]


async def test_a_slack_body_says_the_summary_and_each_broken_hypothesis(receiver: tuple[Receiver, str]) -> None:
    found, url = receiver
    await send(WebhookSpec(url=url, format=WebhookFormat.SLACK), SuiteEvent.HYPOTHESIS_BROKEN)
    ((headers, body),) = found.seen
    assert SIGNATURE not in headers
    text = json.loads(body)["text"]
    assert text.startswith("cliffwatch game day gd: broken (1 held, 1 broken) (hypothesis_broken)")
    assert "• b: broken: score 41.3 < 60" in text


async def test_a_runs_slack_body_is_its_scorecard_line(receiver: tuple[Receiver, str]) -> None:
    found, url = receiver
    run = {"kind": "run", "run_id": "r1", "headline": "burst-storm  score 44/100 (pass ≥ 70)  FAIL  status succeeded"}
    (delivery,) = await send(WebhookSpec(url=url, format=WebhookFormat.SLACK), RunEvent.NOT_PASSED, run, RUN_DEFAULTS)
    assert delivery.format == "slack"
    ((_, body),) = found.seen
    assert json.loads(body) == {"text": f"cliffwatch run {run['headline']} (not_passed)"}


async def test_a_webhook_without_on_hears_the_defaults_it_is_given(receiver: tuple[Receiver, str]) -> None:
    found, url = receiver
    assert await send(WebhookSpec(url=url), RunEvent.FINISHED, defaults=RUN_DEFAULTS) == []
    assert found.seen == []
    (heard,) = await send(WebhookSpec(url=url), RunEvent.FAILED, defaults=RUN_DEFAULTS)
    assert heard.ok


async def test_a_5xx_is_tried_again_and_a_4xx_is_final(receiver: tuple[Receiver, str]) -> None:
    found, url = receiver
    found.statuses = [503, 200]
    (retried,) = await send(WebhookSpec(url=url))
    assert retried.ok
    assert retried.attempts == 2
    found.statuses = [404]
    (refused,) = await send(WebhookSpec(url=url))
    assert not refused.ok
    assert refused.attempts == 1
    assert refused.status == 404


async def test_a_webhook_outside_the_allowed_places_is_never_contacted() -> None:
    (delivery,) = await send(WebhookSpec(url="http://10.255.255.1:9/hook"))
    assert not delivery.ok
    assert delivery.attempts == 0
    assert "allow" in (delivery.error or "")


async def test_a_webhook_that_does_not_listen_for_the_event_is_not_sent_to(receiver: tuple[Receiver, str]) -> None:
    found, url = receiver
    assert await send(WebhookSpec(url=url, on=(SuiteEvent.FAILED,))) == []
    assert found.seen == []


def test_a_webhooks_path_is_never_shown_for_it_is_often_its_secret() -> None:
    assert shown_url("https://hooks.slack.com/services/T000/B000/XXXXSECRET") == "https://hooks.slack.com/…"
    assert shown_url("http://user:pw@127.0.0.1:9000/") == "http://user:***@127.0.0.1:9000/"
