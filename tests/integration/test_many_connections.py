"""A run's connection pool cannot exhaust the file descriptors of the process that runs it: ``cliffwatch run``
under a lowered ``RLIMIT_NOFILE`` (set in the child only) caps a pool of 3,000 to its share, says so on the
terminal and in the result, and no request fails for want of a descriptor. Loopback only, 600 requests."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
from pathlib import Path

import pytest
import yaml
from aiohttp import web

LIMIT = 256  # soft and hard, in the child
RESERVE = 64


async def slow_server() -> tuple[web.AppRunner, int]:
    """A loopback server that holds each request for a second: each one in flight keeps its connection."""

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1.0)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1]


def lowered() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


@pytest.mark.slow
async def test_a_pool_larger_than_the_descriptors_allow_is_capped_and_no_request_fails(tmp_path: Path) -> None:
    """300 requests/s held for a second each want ~300 connections of a pool of 3,000 in a process allowed 256
    descriptors: the pool is capped to what the limit leaves after the reserve, the terminal and the result
    say so, and every request ends without an error (some wait for a connection, and are late)."""
    runner, port = await slow_server()
    try:
        scenario = tmp_path / "many.yaml"
        scenario.write_text(yaml.safe_dump({
            "name": "many-connections", "seed": 1,
            "slo": {"e2e_ms": 3_000, "timeout_ms": 8_000},
            "target": {"url": f"http://127.0.0.1:{port}", "api": "http", "request": {"method": "GET", "path": "/slow"}},
            "client": {"pool_size": 1_000, "max_in_flight": 10_000},  # the most the caps allow a run
            "phases": [{"name": "burst", "role": "baseline", "duration_s": 2,
                        "arrival": {"process": "constant", "rate": 300}}],
        }))  # fmt: skip
        result_path = tmp_path / "result.json"
        env = {**os.environ, "CLIFFWATCH_STATE_DIR": str(tmp_path / "state"), "CLIFFWATCH_FD_RESERVE": str(RESERVE)}
        env.pop("CLIFFWATCH_ALLOWED_TARGETS", None)
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cliffwatch", "run", str(scenario), "--json", str(result_path),
            env=env, preexec_fn=lowered, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(child.communicate(), timeout=120)
    finally:
        await runner.cleanup()
    stdout = out.decode()
    assert result_path.exists(), (stdout, err.decode())
    result = json.loads(result_path.read_text())
    [phase] = result["phases"]
    assert phase["offered"] == 600
    assert phase["outcomes"]["error"] == 0, phase["outcomes"]
    assert phase["outcomes"]["timeout"] == 0, phase["outcomes"]
    [note] = result["notes"]
    assert note.startswith("client.pool_size capped from 1,000 to ")
    capped = int(note.split(" to ")[1].split(" ")[0])
    assert 100 < capped <= LIMIT - RESERVE
    assert "client.pool_size capped from 1,000" in " ".join(stdout.split())
