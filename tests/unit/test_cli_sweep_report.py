"""``cliffwatch report`` of a sweep: from the file ``cliffwatch sweep --json`` wrote, or from a sweep run in
the service's store; told from a run by the document's kind."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cliffwatch.bootstrap.service import open_store
from cliffwatch.cli import main
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import Run, RunEnd, RunKind, Trigger
from report_kit import report_data

FIXTURE = Path(__file__).parents[1] / "fixtures" / "reports" / "sweep-retries.json"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


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


async def _store_finished_sweep(document: dict[str, Any]) -> None:
    async with open_store(Settings.from_env()) as store:
        run = Run(
            id="sweep-1", scenario_name=document["scenario"]["name"], scenario_hash="h" * 64,
            status=RunStatus.QUEUED, trigger=Trigger.CLI, triggered_by="test", created_at=T0,
            target_url="builtin", seed=1, threshold=70.0, kind=RunKind.SWEEP,
            sweep=SweepSpec(start=4.0, stop=24.0, step_s=3.0, warmup_s=2.0, cooldown_s=0.5),
        )  # fmt: skip
        await store.create_run(run)
        claimed = await store.claim_run(owner="me", now=T0, lease_until=T0 + timedelta(minutes=5))
        assert claimed is not None
        end = RunEnd(status=RunStatus.SUCCEEDED, finished_at=T0 + timedelta(minutes=2), result=document,
                     usable_rps=document["usable_rps"])  # fmt: skip
        assert await store.finish_run(run.id, owner="me", end=end)


def test_a_stored_sweep_becomes_a_sweep_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLIFFWATCH_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'service.db'}")
    monkeypatch.setenv("CLIFFWATCH_STATE_DIR", str(tmp_path / "state"))
    document = json.loads(FIXTURE.read_text(encoding="utf-8"))
    asyncio.run(_store_finished_sweep(document))
    output = tmp_path / "stored.html"
    assert main(["report", "sweep-1", "-o", str(output)]) == 0
    assert f"report written to {output}" in capsys.readouterr().out
    data = report_data(output.read_text(encoding="utf-8"))
    assert data["kind"] == "sweep"
    assert data["sweep_id"] == document["sweep_id"]
