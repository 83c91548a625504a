"""``cliffwatch sweep`` as people and pipelines use it, against the real built-in target: the table and the
verdict, the JSON document, exit codes for bad options, an unreachable target and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

pytestmark = pytest.mark.heavy  # sweeps: each step must keep its schedule, two at most at once

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = tempfile.mkdtemp(prefix="cliffwatch-sweep-state-")

# A small, sharp built-in target: 4 sequences a batch, 16 tokens each; it saturates near 13 req/s.
SMALL = {
    "name": "small",
    "description": "a small target with a sharp cliff",
    "seed": 5,
    "target": {
        "url": "builtin",
        "builtin": {"max_batch": 4, "decode_base_ms": 10, "decode_per_seq_ms": 2},
        "request": {"model": "sim-llm", "prompt_tokens": 16, "max_tokens": 16},
    },
    "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
    "phases": [{"name": "p", "role": "baseline", "duration_s": 2, "arrival": {"process": "poisson", "rate": 2}}],
}
QUICK = ("--arrival", "constant", "--step-seconds", "1.5", "--warmup-seconds", "0.5", "--cooldown-seconds", "0.2")


def env() -> dict[str, str]:
    values = {**os.environ, "CLIFFWATCH_LOG_FORMAT": "json", "CLIFFWATCH_STATE_DIR": STATE_DIR}
    values.pop("CLIFFWATCH_ALLOWED_TARGETS", None)
    return values


def sweep(
    *args: str, timeout: float = 120, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cliffwatch", "sweep", *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, env={**env(), **(extra_env or {})}, check=False,
    )  # fmt: skip


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    return path


@pytest.mark.slow
def test_a_sweep_prints_its_steps_usable_capacity_and_verdict_and_writes_the_document(
    small: Path, tmp_path: Path
) -> None:
    out, junit, summary = tmp_path / "sweep.json", tmp_path / "sweep.xml", tmp_path / "summary.md"
    github = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}  # as in a GitHub Actions job
    done = sweep(str(small), "--from", "8", "--to", "40", *QUICK, "--json", str(out), "--junit", str(junit),
                 extra_env=github)  # fmt: skip
    assert done.returncode == 0, done.stderr
    cases = {case.get("name"): case for case in ElementTree.parse(junit).getroot().iter("testcase")}
    assert "usable capacity found" in cases, sorted(cases)
    assert cases["usable capacity found"].find("failure") is None
    assert "usable" in summary.read_text()
    assert "usable capacity at 99.0% on time" in done.stdout
    assert "verdict:" in done.stdout
    assert "req/s" in done.stdout
    document = json.loads(out.read_text())
    assert document["kind"] == "sweep"
    assert document["status"] == "succeeded"
    [variant] = document["variants"]
    result = variant["result"]
    assert result["steps"][0]["rate"] == 8
    assert result["first_bad_rps"] is not None
    # The model's saturation is 13.1 req/s; 1.5-s steps let a rate a little above it pass.
    assert document["usable_rps"] == result["usable_rps"]
    assert 8 <= result["usable_rps"] <= 20
    assert (result["first_bad_rps"] - result["usable_rps"]) / result["first_bad_rps"] <= 0.05 or (
        result["finished_because"] != "bracketed within 5 %"
    )


@pytest.mark.slow
@pytest.mark.alone  # worker processes beside the sweep: it needs the machine, not one core
def test_a_sweep_with_workers_sends_every_step_from_the_same_worker_processes(small: Path, tmp_path: Path) -> None:
    """``--workers 2``: the workers start once and send every step (below the cliff near 13 req/s), none
    lost."""
    out = tmp_path / "sweep.json"
    done = sweep(str(small), "--from", "4", "--to", "8", *QUICK, "--workers", "2", "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert "sending from 2 worker processes" in done.stdout + done.stderr
    document = json.loads(out.read_text())
    [variant] = document["variants"]
    steps = variant["result"]["steps"]
    assert len(steps) >= 2
    assert variant["result"]["usable_rps"] == 8  # below the cliff: every step good
    assert {step["workers"] for step in steps} == {2}
    assert not any("generator worker" in reason for step in steps for reason in step["generator_reasons"])
    assert all(step["not_sent"] == 0 for step in steps)


def test_a_bad_option_is_named_and_nothing_is_sent(small: Path) -> None:
    done = sweep(str(small), "--from", "8", "--to", "4", timeout=30)
    assert done.returncode == 2
    assert "--to: must be > start (8)" in done.stderr
    assert "starting the built-in" not in done.stderr


def test_a_range_or_auto_is_required(small: Path) -> None:
    done = sweep(str(small), "--from", "8", timeout=30)
    assert done.returncode == 2
    assert "give a range" in done.stderr


def test_an_unreachable_target_fails_before_any_load_with_exit_3(small: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = sweep(str(small), "--auto", "--target", f"http://127.0.0.1:{port}", timeout=30)
    assert done.returncode == 3, done.stderr
    assert "unreachable" in done.stderr or "not reachable" in done.stderr or str(port) in done.stderr


@pytest.mark.slow
def test_ctrl_c_discards_the_step_in_progress_and_exits_130(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "cliffwatch", "sweep", str(small), "--from", "4", "--to", "40",
         "--step-seconds", "3", "--warmup-seconds", "0.5", "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env(),
    )  # fmt: skip
    try:
        assert process.stderr is not None
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            seen.append(line)
            if "step at 11.2" in line:  # the second step began: the first is measured
                break
        process.send_signal(signal.SIGINT)
        stdout, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, "".join(seen)
    document = json.loads(out.read_text())
    assert document["status"] == "interrupted"
    [variant] = document["variants"]
    assert [s["rate"] for s in variant["result"]["steps"]] == [4]
    assert variant["result"]["finished_because"].startswith("interrupted")
    assert "usable capacity" in stdout
