"""``cliffwatch gameday`` as a pipeline runs it: a two-experiment suite against the built-in target, one file
and one inline scenario, the combined JSON, a JUnit testsuite per experiment, and the exit code that says
whether every hypothesis held."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from cliffwatch.adapters.notify.webhooks import SIGNATURE, TIMESTAMP

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = tempfile.mkdtemp(prefix="cliffwatch-gameday-state-")
KEY = "gameday-hmac-key"

pytestmark = pytest.mark.slow

# A short healthy scenario on a small, fast built-in target: two phases, four seconds.
CALM: dict[str, Any] = {
    "name": "calm",
    "seed": 3,
    "target": {"url": "builtin", "builtin": {"max_batch": 8, "decode_base_ms": 5, "decode_per_seq_ms": 0.5},
               "request": {"model": "sim-llm", "prompt_tokens": 16, "max_tokens": 8}},
    "slo": {"ttft_ms": 500, "e2e_ms": 1000, "timeout_ms": 3000},
    "phases": [
        {"name": "base", "role": "baseline", "duration_s": 2, "arrival": {"process": "constant", "rate": 5}},
        {"name": "push", "role": "stress", "duration_s": 2, "arrival": {"process": "constant", "rate": 8}},
    ],
}  # fmt: skip


def gameday_files(tmp_path: Path, experiments: list[dict[str, Any]], **suite: Any) -> tuple[Path, dict[str, str]]:
    (tmp_path / "calm.yaml").write_text(yaml.safe_dump(CALM))
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({"name": "ci-gameday", "experiments": experiments, **suite}))
    env = {**os.environ, "CLIFFWATCH_LOG_FORMAT": "json", "CLIFFWATCH_STATE_DIR": STATE_DIR,
           "TARGET_GAMEDAY_KEY": KEY}  # fmt: skip
    env.pop("CLIFFWATCH_ALLOWED_TARGETS", None)
    env.pop("GITHUB_ACTIONS", None)
    return path, env


def gameday(tmp_path: Path, experiments: list[dict[str, Any]], *args: str) -> subprocess.CompletedProcess[str]:
    suite, env = gameday_files(tmp_path, experiments)
    return subprocess.run([sys.executable, "-m", "cliffwatch", "gameday", str(suite), *args], capture_output=True,
                          text=True, timeout=180, cwd=REPO, env=env, check=False)  # fmt: skip


async def test_a_suite_whose_hypotheses_hold_exits_0_writes_its_outputs_and_posts_a_signed_webhook(
    tmp_path: Path,
) -> None:
    received: list[tuple[dict[str, str], bytes]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append((dict(request.headers), await request.read()))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    out, junit, report = tmp_path / "gameday.json", tmp_path / "gameday.xml", tmp_path / "gameday.html"
    inline = {**CALM, "name": "calm-inline"}
    hook_url = str(server.make_url("/hook"))
    suite, env = gameday_files(tmp_path, [
        {"scenario": str(tmp_path / "calm.yaml"), "expect": {"score_at_least": 50, "no_generator_limited": True}},
        {"scenario": inline, "expect": {"passes": True}},
    ], notify=[{"webhook": hook_url, "secret": {"secret": "env:TARGET_GAMEDAY_KEY"}}])  # fmt: skip
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cliffwatch", "gameday", str(suite), "--json", str(out), "--junit", str(junit),
            "--report", str(report), cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stdout_bytes, stderr_bytes = await asyncio.wait_for(process.communicate(), timeout=180)
    finally:
        await server.close()
    stdout = stdout_bytes.decode()
    assert process.returncode == 0, stdout + stderr_bytes.decode()
    assert "ci-gameday: held (2 held)" in stdout
    document = json.loads(out.read_text())
    assert document["kind"] == "gameday"
    assert [e["name"] for e in document["experiments"]] == ["calm", "calm-inline"]
    assert all(e["state"] == "held" for e in document["experiments"])
    assert document["experiments"][0]["result"]["scenario"]["name"] == "calm"
    suites = ElementTree.parse(junit).getroot().findall("testsuite")
    assert [s.get("name") for s in suites] == ["calm", "calm-inline"]
    first_case = suites[0].find("testcase")
    assert first_case is not None
    assert first_case.get("name") == "hypothesis: score at least 50, no generator_limited"
    page = report.read_text()
    assert 'id="gameday-summary"' in page
    assert page.count('class="experiment-report"') == 2  # each experiment's own report below the summary

    ((headers, body),) = received  # one event: finished
    expected = hmac.new(KEY.encode(), headers[TIMESTAMP].encode() + b"." + body, hashlib.sha256).hexdigest()
    assert headers[SIGNATURE] == f"sha256={expected}"
    assert json.loads(body)["event"] == "finished"
    shown = hook_url.removesuffix("/hook") + "/…"  # a webhook's path may be its secret: never kept
    (delivery,) = document["notifications"]
    assert datetime.fromisoformat(delivery.pop("at")).tzinfo is not None  # when its last attempt ended
    assert delivery == {"url": shown, "event": "finished", "format": "generic", "ok": True, "attempts": 1,
                        "status": 204, "error": None}  # fmt: skip
    assert "/hook" not in stdout


def test_a_broken_hypothesis_exits_1_and_a_bad_experiment_refuses_the_suite_before_any_load(tmp_path: Path) -> None:
    broken = gameday(tmp_path, [{"scenario": str(tmp_path / "calm.yaml"), "expect": {"score_at_least": 100.0,
                                                                                   "no_hidden_overload": True}},
                                {"scenario": "no-such-scenario"}])  # fmt: skip
    assert broken.returncode == 2, broken.stdout + broken.stderr  # the second cannot be made: nothing ran
    assert "experiment no-such-scenario" in broken.stderr
    assert "run " not in broken.stdout

    # a scenario that parses but whose file cannot be read is refused with the suite too, before any load
    missing = {
        **CALM,
        "phases": [
            {
                "name": "replay",
                "role": "baseline",
                "duration_s": 2,
                "arrival": {"process": "trace", "path": "missing.csv", "format": "azure"},
            }
        ],
    }
    unreadable = gameday(tmp_path, [{"scenario": str(tmp_path / "calm.yaml")},
                                    {"scenario": missing, "name": "replay"}])  # fmt: skip
    assert unreadable.returncode == 2, unreadable.stdout + unreadable.stderr
    assert "experiment replay" in unreadable.stderr
    assert "run " not in unreadable.stdout

    inline = {**CALM, "slo": {"e2e_ms": 1, "timeout_ms": 3000}}  # an SLO nothing can meet
    done = gameday(tmp_path, [{"scenario": inline, "expect": {"score_at_least": 60}}])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "hypothesis broken: score" in done.stdout
