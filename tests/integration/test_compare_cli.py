"""``cliffwatch compare`` on real runs whose difference is known: the built-in target at two batch sizes (the
smaller one overloaded by the same arrivals), and two runs of the same scenario and seed (no difference)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = tempfile.mkdtemp(prefix="cliffwatch-compare-state-")

pytestmark = pytest.mark.slow


def scenario(max_batch: int) -> dict[str, Any]:
    """About a second an answer (20 tokens at 50 ms a step and more), so the jitter of a busy machine is small
    beside it. 16 sequences at once serve about 12 requests a second; 2 serve under 2, and 3–6 are offered."""
    return {
        "name": "batch-sizes", "seed": 11,
        "target": {"url": "builtin",
                   "builtin": {"max_batch": max_batch, "decode_base_ms": 50, "decode_per_seq_ms": 1},
                   "request": {"model": "sim-llm", "prompt_tokens": 16, "max_tokens": 20}},
        "slo": {"ttft_ms": 1500, "e2e_ms": 2500, "timeout_ms": 8000},
        "phases": [
            {"name": "base", "role": "baseline", "duration_s": 4, "arrival": {"process": "poisson", "rate": 3}},
            {"name": "push", "role": "stress", "duration_s": 4, "arrival": {"process": "poisson", "rate": 6}},
            {"name": "calm", "role": "recovery", "duration_s": 3, "arrival": {"process": "poisson", "rate": 3}},
        ],
    }  # fmt: skip


def cliffwatch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CLIFFWATCH_STATE_DIR": STATE_DIR, "CLIFFWATCH_LOG_FORMAT": "json"}
    return subprocess.run([sys.executable, "-m", "cliffwatch", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Path]]:
    """Three runs: 16 sequences at once twice (the same seed), and 2."""
    with tempfile.TemporaryDirectory(prefix="cliffwatch-compare-") as tmp:
        folder = Path(tmp)
        paths = {}
        for name, batch in (("wide", 16), ("wide-again", 16), ("narrow", 2)):
            document = folder / f"{name}.yaml"
            document.write_text(yaml.safe_dump(scenario(batch)))
            paths[name] = folder / f"{name}.json"
            done = cliffwatch("run", str(document), "--json", str(paths[name]))
            assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: the narrow one's score fails
        yield paths


def figure(document: dict[str, Any], scope: str, name: str) -> dict[str, Any]:
    return next(f for f in document["figures"] if f["scope"] == scope and f["figure"] == name)


def test_two_batch_sizes_differ_where_the_narrow_one_is_overloaded(runs: dict[str, Path], tmp_path: Path) -> None:
    out, report = tmp_path / "compared.json", tmp_path / "compared.html"
    done = cliffwatch("compare", str(runs["wide"]), str(runs["narrow"]), "--json", str(out), "--report", str(report))
    assert done.returncode == 1, done.stdout + done.stderr  # 1: B regressed
    document = json.loads(out.read_text())
    assert document["verdict"] == "regressed"
    assert document["like"]["alike"]
    assert not document["like"]["same_scenario_hash"]
    share = figure(document, "phase push", "on_time_share")
    assert share["change"] == "regressed", share
    assert share["p_adjusted"] < 0.05
    assert share["b"] < share["a"] - 0.3
    assert share["a_interval"]["low"] > share["b_interval"]["high"]
    assert figure(document, "phase push", "e2e_p50_ms")["change"] in ("regressed", "not tested")
    assert figure(document, "phase push", "ttft_p50_ms")["change"] == "regressed"
    assert all(f["p_value"] is None or 0 <= f["p_value"] <= 1 for f in document["figures"])
    assert "B against A: regressed" in done.stdout
    page = report.read_text()
    assert "B against A: <span" in page
    assert "phase push" in page
    assert "<script" in page


def test_two_runs_of_the_same_scenario_and_seed_show_no_difference(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "same.json"
    done = cliffwatch("compare", str(runs["wide"]), str(runs["wide-again"]), "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(out.read_text())
    assert document["verdict"] == "no detectable difference", [
        (f["scope"], f["figure"], f["a"], f["b"], f["p_adjusted"]) for f in document["figures"]
        if f["change"] in ("regressed", "improved")
    ]  # fmt: skip
    assert document["like"]["same_scenario_hash"]
    tested = [f for f in document["figures"] if f["change"] != "not tested"]
    assert len(tested) >= 12
    assert all(f["detectable"] > 0 for f in tested)


def test_unlike_runs_and_missing_files_are_refused_with_the_reason(runs: dict[str, Path], tmp_path: Path) -> None:
    other = json.loads(runs["wide"].read_text())
    other["scenario"]["phases"][0]["arrival"] = "poisson 4/s"
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other))
    refused = cliffwatch("compare", str(runs["wide"]), str(path))
    assert refused.returncode == 2
    assert "scenario.phases[0].arrival" in refused.stderr
    assert "--allow-unlike" in refused.stderr
    anyway = cliffwatch("compare", str(runs["wide"]), str(path), "--allow-unlike")
    assert anyway.returncode == 0, anyway.stdout + anyway.stderr
    assert "compared although unlike" in anyway.stdout
    missing = cliffwatch("compare", str(runs["wide"]), str(tmp_path / "nothing.json"))
    assert missing.returncode == 2
    assert "no result file" in missing.stderr
