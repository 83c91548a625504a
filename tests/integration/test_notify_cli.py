"""``cliffwatch run`` and ``cliffwatch sweep`` tell their scenario's webhooks how they ended: a signed generic body a
loopback receiver checks, a receiver answering 500 tried three times and a refused port likewise, each delivery
printed and kept in the result file, and the exit code what the run alone makes it."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import socket
import sys
import tempfile
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from cliffwatch.adapters.notify.webhooks import SIGNATURE, TIMESTAMP

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = tempfile.mkdtemp(prefix="cliffwatch-notify-state-")
KEY = "run-hmac-key"

pytestmark = pytest.mark.slow

CALM: dict[str, Any] = {
    "name": "calm-notify",
    "seed": 5,
    "target": {"url": "builtin", "builtin": {"max_batch": 8, "decode_base_ms": 5, "decode_per_seq_ms": 0.5},
               "request": {"model": "sim-llm", "prompt_tokens": 16, "max_tokens": 8}},
    "slo": {"ttft_ms": 500, "e2e_ms": 1000, "timeout_ms": 3000},
    "phases": [
        {"name": "base", "role": "baseline", "duration_s": 1.5, "arrival": {"process": "constant", "rate": 5}},
        {"name": "push", "role": "stress", "duration_s": 1.5, "arrival": {"process": "constant", "rate": 8}},
    ],
}  # fmt: skip


class Receivers:
    """Loopback webhook receivers: /good answers 204 (after checking nothing), /broken answers 500."""

    def __init__(self) -> None:
        self.good: list[tuple[dict[str, str], bytes]] = []
        self.broken: list[bytes] = []
        self.url = ""

    async def handle_good(self, request: web.Request) -> web.Response:
        self.good.append((dict(request.headers), await request.read()))
        return web.Response(status=204)

    async def handle_broken(self, request: web.Request) -> web.Response:
        self.broken.append(await request.read())
        return web.Response(status=500)


@pytest.fixture
async def receivers() -> AsyncIterator[Receivers]:
    found = Receivers()
    app = web.Application()
    app.router.add_post("/good", found.handle_good)
    app.router.add_post("/broken", found.handle_broken)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    found.url = str(server.make_url("")).rstrip("/")
    yield found
    await server.close()


def refused_url() -> str:
    """A loopback port nothing listens on: connecting to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/gone"


async def cliffwatch(*args: str) -> tuple[int, str]:
    env = {**os.environ, "CLIFFWATCH_LOG_FORMAT": "json", "CLIFFWATCH_STATE_DIR": STATE_DIR, "TARGET_RUN_HOOK_KEY": KEY}
    for name in ("CLIFFWATCH_ALLOWED_TARGETS", "CLIFFWATCH_ALLOWED_WEBHOOKS", "GITHUB_ACTIONS"):
        env.pop(name, None)
    pipe = asyncio.subprocess.PIPE
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "cliffwatch", *args, cwd=REPO, env=env,
                                                   stdout=pipe, stderr=pipe)  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=180)
    assert process.returncode is not None
    return process.returncode, out.decode() + err.decode()


def check_signed(headers: dict[str, str], body: bytes) -> dict[str, Any]:
    expected = hmac.new(KEY.encode(), headers[TIMESTAMP].encode() + b"." + body, hashlib.sha256).hexdigest()
    assert headers[SIGNATURE] == f"sha256={expected}"
    document: dict[str, Any] = json.loads(body)
    assert headers["X-Cliffwatch-Event"] == document["event"]
    return document


async def test_a_run_posts_a_signed_notice_and_failing_webhooks_are_retried_recorded_and_change_nothing(
    tmp_path: Path, receivers: Receivers
) -> None:
    gone = refused_url()
    scenario = {**CALM, "notify": [
        {"webhook": f"{receivers.url}/good", "on": ["finished"], "secret": {"secret": "env:TARGET_RUN_HOOK_KEY"}},
        {"webhook": f"{receivers.url}/broken", "format": "slack", "on": ["finished"]},
        {"webhook": gone, "on": ["finished"]},
        {"webhook": f"{receivers.url}/good", "on": ["interrupted"]},  # not what happened: not told
    ]}  # fmt: skip
    path, out = tmp_path / "calm.yaml", tmp_path / "run.json"
    path.write_text(yaml.safe_dump(scenario))
    code, said = await cliffwatch("run", str(path), "--json", str(out))
    document = json.loads(out.read_text())
    assert code == (0 if document["passed"] else 1), said  # what the run alone makes it
    assert document["status"] == "succeeded"

    ((headers, body),) = receivers.good
    notice = check_signed(headers, body)
    assert notice["event"] == "finished"
    assert notice["kind"] == "run"
    assert notice["run_id"] == document["run_id"]
    assert notice["scenario"] == "calm-notify"
    assert notice["status"] == "succeeded"
    assert notice["passed"] == document["passed"]
    assert notice["score"] == document["score"]["value"]
    assert notice["verdicts"] == [v["name"] for v in document["verdicts"]]
    assert notice["summary"] == document["score"]["summary"]
    assert "phases" not in notice  # a summary, not the result
    assert len(receivers.broken) == 3  # a 5xx is tried again, three times in all
    assert json.loads(receivers.broken[0])["text"].startswith("cliffwatch run calm-notify  score ")

    deliveries = document["notifications"]
    for delivery in deliveries:
        assert datetime.fromisoformat(delivery.pop("at")).tzinfo is not None
    host = receivers.url + "/…"
    assert deliveries[:2] == [
        {"url": host, "event": "finished", "format": "generic", "ok": True, "attempts": 1, "status": 204,
         "error": None},
        {"url": host, "event": "finished", "format": "slack", "ok": False, "attempts": 3, "status": 500,
         "error": "HTTP 500"},
    ]  # fmt: skip
    refused = deliveries[2]
    assert (refused["url"], refused["ok"], refused["attempts"], refused["status"]) == (
        gone.removesuffix("/gone") + "/…", False, 3, None)  # fmt: skip
    assert "Connect" in refused["error"]
    assert len(deliveries) == 3
    assert f"webhook {host} (finished): delivered (204)" in said
    assert f"webhook {host} (finished): NOT delivered: HTTP 500" in said
    assert "/good" not in said  # a webhook's path may be its secret
    assert "/broken" not in said


async def test_a_sweep_tells_its_scenarios_webhooks_of_its_end_by_the_sweeps_defaults(
    tmp_path: Path, receivers: Receivers
) -> None:
    hook = {"webhook": f"{receivers.url}/good", "secret": {"secret": "env:TARGET_RUN_HOOK_KEY"}}
    scenario = {**CALM, "notify": [hook]}
    path, out = tmp_path / "calm.yaml", tmp_path / "sweep.json"
    path.write_text(yaml.safe_dump(scenario))
    code, said = await cliffwatch("sweep", str(path), "--from", "2", "--to", "4", "--arrival", "constant",
                                  "--step-seconds", "1", "--warmup-seconds", "0.2", "--cooldown-seconds", "0.1",
                                  "--no-recheck", "--json", str(out))  # fmt: skip
    assert code == 0, said
    document = json.loads(out.read_text())
    ((headers, body),) = receivers.good  # no on: a sweep's defaults, which its end (finished) is in
    notice = check_signed(headers, body)
    assert notice["event"] == "finished"
    assert notice["kind"] == "sweep"
    assert notice["sweep_id"] == document["sweep_id"]
    assert notice["usable_rps"] == document["usable_rps"]
    assert [v["verdict"] for v in notice["variants"]] == [v["result"]["verdict"] for v in document["variants"]]
    (delivery,) = document["notifications"]
    assert (delivery["event"], delivery["ok"], delivery["attempts"]) == ("finished", True, 1)


async def test_a_webhook_that_could_not_be_told_refuses_the_run_before_any_load(tmp_path: Path) -> None:
    """Outside CLIFFWATCH_ALLOWED_WEBHOOKS (loopback by default), or with a secret reference that cannot be read:
    exit 2 naming the field, and no result (no load) rather than a failed delivery found out at the end."""
    scenario = {
        **CALM,
        "notify": [
            {"webhook": "http://203.0.113.9/hook"},
            {"webhook": "http://127.0.0.1:9/hook", "secret": {"secret": "env:TARGET_NOT_SET"}},
        ],
    }
    path = tmp_path / "outside.yaml"
    path.write_text(yaml.safe_dump(scenario))
    result = tmp_path / "result.json"
    code, output = await cliffwatch("run", str(path), "--json", str(result))
    assert code == 2, output
    assert "notify[0].webhook: http://203.0.113.9/…" in output
    assert "notify[1].secret" in output
    assert not result.exists()
