"""``cliffwatch report`` of a sweep: from the file ``cliffwatch sweep --json`` wrote, or from a sweep run in
the service's store; told from a run by the document's kind."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest

from cliffwatch.cli import main
from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.service.runs import RunKind
from report_kit import report_data
from stored_run_kit import store_finished_run

FIXTURE = Path(__file__).parents[1] / "fixtures" / "reports" / "sweep-retries.json"


def test_a_sweep_file_becomes_a_sweep_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "sweep.html"
    assert main(["report", str(FIXTURE), "-o", str(output)]) == 0
    assert f"report written to {output}" in capsys.readouterr().out
    data = report_data(output.read_text(encoding="utf-8"))
    assert data["kind"] == "sweep"
    assert [f["id"] for f in data["frames"]] == ["v0", "v1", "cmp"]


def test_a_sweep_file_without_variants_is_refused_naming_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(FIXTURE.read_text(encoding="utf-8"))
    del document["variants"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(document), encoding="utf-8")
    assert main(["report", str(broken), "-o", str(tmp_path / "x.html")]) == 2
    assert "not a cliffwatch sweep result: missing variants" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()


def test_a_stored_sweep_becomes_a_sweep_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLIFFWATCH_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'service.db'}")
    monkeypatch.setenv("CLIFFWATCH_STATE_DIR", str(tmp_path / "state"))
    document = json.loads(FIXTURE.read_text(encoding="utf-8"))
    sweep = {"kind": RunKind.SWEEP, "sweep": SweepSpec(start=4.0, stop=24.0, step_s=3.0, warmup_s=2.0, cooldown_s=0.5)}
    asyncio.run(store_finished_run(document, run_id="sweep-1", took=timedelta(minutes=2),
                                   usable_rps=document["usable_rps"], run_fields=sweep))  # fmt: skip
    output = tmp_path / "stored.html"
    assert main(["report", "sweep-1", "-o", str(output)]) == 0
    assert f"report written to {output}" in capsys.readouterr().out
    data = report_data(output.read_text(encoding="utf-8"))
    assert data["kind"] == "sweep"
    assert data["sweep_id"] == document["sweep_id"]
