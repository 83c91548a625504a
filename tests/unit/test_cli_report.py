"""``cliffwatch report``: from a result file or a stored run to an HTML file, and clear refusals (exit 2)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cliffwatch.cli import main
from report_kit import report_data
from stored_run_kit import store_finished_run

FIXTURE = Path(__file__).parents[1] / "fixtures" / "reports" / "slow-backend.json"


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'service.db'}"
    monkeypatch.setenv("CLIFFWATCH_DATABASE_URL", url)
    monkeypatch.setenv("CLIFFWATCH_STATE_DIR", str(tmp_path / "state"))
    return url


def test_a_result_file_becomes_an_html_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "out" / "report.html"
    assert main(["report", str(FIXTURE), "-o", str(output)]) == 0
    assert f"report written to {output}" in capsys.readouterr().out
    document = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert len(report_data(output.read_text(encoding="utf-8"))["x"]) == len(document["timeseries"])


def test_a_stored_run_is_reported_with_the_time_series_kept_apart_from_its_result(
    database: str, tmp_path: Path
) -> None:
    document = json.loads(FIXTURE.read_text(encoding="utf-8"))
    count = len(document["timeseries"])
    rows = document.pop("timeseries")
    asyncio.run(store_finished_run(document, run_id=document["run_id"], timeseries=rows))
    output = tmp_path / "stored.html"
    assert main(["report", document["run_id"], "-o", str(output)]) == 0
    data = report_data(output.read_text(encoding="utf-8"))
    assert len(data["x"]) == count
    assert data["run_id"] == document["run_id"]


def test_a_missing_file_is_refused_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope.json"), "-o", str(tmp_path / "r.html")]) == 2
    assert "no result file" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_an_unknown_run_id_is_refused_with_exit_2(database: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "0123456789ab"]) == 2
    err = capsys.readouterr().err
    assert "'0123456789ab' is neither a result file nor a run in" in err


def test_a_json_file_that_is_not_a_run_result_is_refused_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "other.json"
    source.write_text('{"points": []}', encoding="utf-8")
    assert main(["report", str(source)]) == 2
    assert "not a cliffwatch run result: missing run_id" in capsys.readouterr().err
