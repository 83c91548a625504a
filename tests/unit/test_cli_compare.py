"""``cliffwatch compare``: stored runs by id, a game day's experiments by name, and clear refusals (exit 2)."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from cliffwatch.cli import main
from stored_run_kit import store_finished_run

FIXTURE = Path(__file__).parents[1] / "fixtures" / "reports" / "slow-backend.json"  # a real run's result


def fixture(run_id: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return {**document, "run_id": run_id}


def test_two_stored_runs_are_compared_by_their_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLIFFWATCH_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'service.db'}")
    monkeypatch.setenv("CLIFFWATCH_STATE_DIR", str(tmp_path / "state"))
    for run_id in ("first", "second"):
        asyncio.run(store_finished_run(fixture(run_id), run_id=run_id))
    out = tmp_path / "compared.json"
    assert main(["compare", "first", "second", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert (document["a"]["id"], document["b"]["id"]) == ("first", "second")
    assert document["verdict"] == "no detectable difference"
    latency = [f for f in document["figures"] if f["figure"] == "e2e_p50_ms"]
    assert latency  # written before distributions were kept: shown, untested, and said so
    assert all(f["change"] == "not tested" and "only its percentiles" in f["note"] for f in latency)
    assert "no detectable difference" in capsys.readouterr().out
    assert main(["compare", "first", "nobody"]) == 2
    assert "'nobody' is neither a result file nor a run" in capsys.readouterr().err


def test_a_game_days_experiments_are_compared_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    worse = fixture("worse")
    recovery = worse["phases"][2]  # all 41 on time in the real run: here all timed out
    recovery["outcomes"] = {**recovery["outcomes"], "on_time": 0, "timeout": recovery["offered"]}
    suite = {"kind": "gameday", "name": "weekly", "experiments": [
        {"name": "calm", "state": "held", "result": fixture("calm")},
        {"name": "rough", "state": "broken", "result": worse},
        {"name": "skipped", "state": "not run", "error": None, "result": None},
    ]}  # fmt: skip
    path = tmp_path / "gameday.json"
    path.write_text(json.dumps(suite))
    report = tmp_path / "compared.html"
    assert main(["compare", f"{path}#calm", f"{path}#rough", "--report", str(report)]) == 1
    assert "B against A: regressed" in capsys.readouterr().out
    assert "timeout_share" in report.read_text()
    assert main(["compare", str(path), f"{path}#rough"]) == 2
    assert "name one as" in capsys.readouterr().err
    assert main(["compare", f"{path}#calm", f"{path}#nope"]) == 2
    assert "no experiment 'nope' in this game day (calm, rough, skipped)" in capsys.readouterr().err
    assert main(["compare", f"{path}#calm", f"{path}#skipped"]) == 2
    assert "did not run" in capsys.readouterr().err


def test_unlike_runs_are_refused_unless_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = copy.deepcopy(fixture("other"))
    other["scenario"]["slo"]["e2e_ms"] = 1
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(fixture("a")))
    b.write_text(json.dumps(other))
    assert main(["compare", str(a), str(b)]) == 2
    assert "scenario.slo.e2e_ms" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--allow-unlike", "--alpha", "0.01"]) in (0, 1)
    assert "compared although unlike" in capsys.readouterr().out
    assert main(["compare", str(a), str(b), "--alpha", "2"]) == 2
