"""A run killed with ``kill -9`` while a toxic is on: the next start-up finds the leftover and removes it.

The killed CLI cannot clean up after itself; the fault ledger it wrote before creating the toxic is what
lets the next process do it. The built-in target it had started dies with it (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from toxiproxy import Toxiproxy

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def scenario(proxy: str) -> dict[str, Any]:
    return {
        "name": "crash-me",
        "seed": 2,
        "target": {
            "url": "builtin",
            "builtin": {"max_batch": 8, "decode_base_ms": 2, "decode_per_seq_ms": 0.2},
            "via_proxy": proxy,
            "request": {"model": "sim-llm", "prompt_tokens": 8, "max_tokens": 8},
        },
        "proxies": [{"name": proxy}],
        "slo": {"e2e_ms": 2000, "timeout_ms": 4000},
        "phases": [
            {"name": "calm", "role": "baseline", "duration_s": 1, "arrival": {"process": "poisson", "rate": 4}},
            {
                "name": "slow", "role": "stress", "duration_s": 60, "arrival": {"process": "poisson", "rate": 4},
                "faults": [{"proxy": proxy, "type": "latency", "attributes": {"latency": 200}}],
            },
        ],
    }  # fmt: skip


def our_toxics(server: Toxiproxy, proxy: str) -> list[str] | None:
    found = server.get_proxy(proxy)
    return None if found is None else sorted(found.toxics())


def port_open(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, int(port))) == 0


def test_a_toxic_left_by_a_killed_run_is_removed_at_the_next_start_up(toxiproxy: Any, tmp_path: Path) -> None:
    """kill -9 mid-fault leaves the toxic on the server; the next `cliffwatch run` removes it (and the run's
    proxy) before doing anything else, and says what it removed."""
    proxy = f"crash-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "crash.yaml"
    path.write_text(yaml.safe_dump(scenario(proxy)))
    env = {**os.environ, "CLIFFWATCH_TOXIPROXY_URL": toxiproxy.url, "CLIFFWATCH_STATE_DIR": str(tmp_path / "state"),
           "CLIFFWATCH_LOG_FORMAT": "json"}  # fmt: skip
    oracle = Toxiproxy()
    oracle.update_api_consumer(toxiproxy.host, toxiproxy.port)

    victim = subprocess.Popen(
        [sys.executable, "-m", "cliffwatch", "run", str(path)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert victim.stderr is not None
        target_url = None
        for line in victim.stderr:
            if (match := re.search(r"against (http://\S+) through", line)) is not None:
                target_url = match.group(1)
            if "phase slow" in line:
                break
        assert target_url is not None, "the run never said where its target was"
        deadline = time.monotonic() + 10
        while not our_toxics(oracle, proxy):
            assert time.monotonic() < deadline, "the toxic never appeared"
            time.sleep(0.05)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
    finally:
        if victim.poll() is None:
            victim.kill()
        victim.communicate(timeout=10)  # closes the pipes
    [leftover] = our_toxics(oracle, proxy) or []
    assert leftover.startswith("cliffwatch-")
    assert leftover.endswith("-p1-0-latency")
    deadline = time.monotonic() + 5
    while port_open(target_url):  # the built-in target went with its parent
        assert time.monotonic() < deadline, "the built-in target outlived the killed run"
        time.sleep(0.05)

    quick = {**scenario(proxy), "name": "next", "proxies": [], "phases": scenario(proxy)["phases"][:1]}
    quick["target"] = {k: v for k, v in quick["target"].items() if k != "via_proxy"}
    (tmp_path / "next.yaml").write_text(yaml.safe_dump(quick))
    after = subprocess.run(
        [sys.executable, "-m", "cliffwatch", "run", str(tmp_path / "next.yaml")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert after.returncode in (0, 1), after.stderr
    assert "removed" in after.stderr
    assert leftover in after.stderr
    assert our_toxics(oracle, proxy) is None  # the toxic, and the proxy the killed run had created, are gone
    again = subprocess.run(
        [sys.executable, "-m", "cliffwatch", "faults", "reconcile"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert again.returncode == 0
    assert "nothing to clean up" in again.stdout


def test_sigterm_mid_fault_stops_the_run_and_removes_its_toxic_itself(toxiproxy: Any, tmp_path: Path) -> None:
    """SIGTERM (what a supervisor sends) is an orderly stop: the run removes its own toxic and proxy, records
    itself as interrupted, and leaves nothing for the reconciler."""
    proxy = f"term-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "term.yaml"
    path.write_text(yaml.safe_dump(scenario(proxy)))
    env = {**os.environ, "CLIFFWATCH_TOXIPROXY_URL": toxiproxy.url, "CLIFFWATCH_STATE_DIR": str(tmp_path / "state"),
           "CLIFFWATCH_LOG_FORMAT": "json"}  # fmt: skip
    oracle = Toxiproxy()
    oracle.update_api_consumer(toxiproxy.host, toxiproxy.port)
    run = subprocess.Popen(
        [sys.executable, "-m", "cliffwatch", "run", str(path), "--json", str(tmp_path / "out.json")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not our_toxics(oracle, proxy):
            assert time.monotonic() < deadline, "the toxic never appeared"
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate(timeout=10)
    assert run.returncode == 130
    assert our_toxics(oracle, proxy) is None
    document = yaml.safe_load((tmp_path / "out.json").read_text())
    assert document["status"] == "interrupted"
    assert [f["action"] for f in document["faults"]] == ["on", "off"]
    assert all(f["ok"] for f in document["faults"]), document["faults"]
    check = subprocess.run(
        [sys.executable, "-m", "cliffwatch", "faults", "reconcile"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "nothing to clean up" in check.stdout
