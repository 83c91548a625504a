"""The generator-fidelity benchmark runs end to end and reports its figures (it checks the bench, not speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "generator_fidelity.py"
ROW_KEYS = {
    "generator",
    "rate",
    "achieved_ratio",
    "lag_p50_ms",
    "lag_p99_ms",
    "lag_max_ms",
    "overhead_p50_ms",
    "overhead_p99_ms",
    "cpu_s_per_1k",
    "faithful",
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["http", "sse"])
def test_quick_run_measures_both_generators_at_a_low_rate(mode: str, tmp_path: Path) -> None:
    """At a low rate both generators send nearly all they planned, and every figure is reported."""
    out = tmp_path / "fidelity.json"
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--mode", mode, "--rates", "40", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "highest faithful rate, cliffwatch:" in completed.stdout
    assert "cliffwatch / peer:" in completed.stdout
    result = json.loads(out.read_text())
    assert result["config"]["mode"] == mode
    rows = {row["generator"]: row for row in result["rows"]}
    assert set(rows) == {"timer", "peer", "cliffwatch"}
    for row in rows.values():
        assert set(row) >= ROW_KEYS
        assert row["rate"] == 40
        assert row["failed"] == 0
        assert row["achieved_ratio"] >= 0.95
    assert rows["timer"]["overhead_p50_ms"] is None  # the floor sends nothing
    assert set(result["ratios"]["highest_faithful_rate"]) == {"timer", "peer", "cliffwatch"}
    assert result["ratios"]["cpu_per_1k_ratio"] is not None
    assert set(result["ratios"]["highest_unsaturated_rate"]) == {"peer", "cliffwatch"}
