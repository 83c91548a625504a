"""Result files: written atomically as JSON, with the permissions an ordinary file would get."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cliffwatch.adapters.documents import result_files
from cliffwatch.adapters.documents.result_files import write_result
from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.results.metrics import RunAggregator
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.results.scoring import score_run
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.traffic.generator_health import GeneratorLimits, judge_generator
from cliffwatch.domain.traffic.plan import phase_windows


def _result(run_id: str = "run-1") -> RunResult:
    scenario = parse_scenario(
        {
            "name": "files",
            "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
            "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m"}},
            "phases": [
                {"name": "calm", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}
            ],
        }
    )
    metrics = RunAggregator(phase_windows(scenario), e2e_ms=1000, fast_fail_ms=100).result()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return RunResult(
        run_id=run_id,
        scenario=scenario,
        target_url="http://127.0.0.1:8000",
        status=RunStatus.SUCCEEDED,
        abort_reason=None,
        started_at=now,
        finished_at=now,
        duration_s=1.0,
        metrics=metrics,
        generator=judge_generator(Histogram(), max_stall_ms=0, cpu_busy=0, overflow=0, limits=GeneratorLimits()),
        score=score_run(metrics, slo=scenario.slo, spec=scenario.score),
    )


def test_the_result_is_written_as_its_json_document(tmp_path: Path) -> None:
    """The file holds exactly the result's to_dict, as JSON ending in a newline."""
    path = tmp_path / "result.json"
    result = _result()
    write_result(result, path)
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    assert json.loads(text) == json.loads(json.dumps(result.to_dict()))


def test_no_temporary_file_is_left_behind(tmp_path: Path) -> None:
    """After writing, the directory holds the result file and nothing else."""
    write_result(_result(), tmp_path / "result.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_missing_directories_are_created(tmp_path: Path) -> None:
    """A result path in directories that do not exist yet is written, directories and all."""
    path = tmp_path / "runs" / "2026" / "result.json"
    write_result(_result(), path)
    assert json.loads(path.read_text(encoding="utf-8"))["run_id"] == "run-1"


def test_an_existing_result_is_replaced_whole(tmp_path: Path) -> None:
    """Writing over an older, longer file replaces it entirely, with no leftover bytes."""
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"padding": "x" * 100_000}), encoding="utf-8")
    write_result(_result("run-2"), path)
    assert json.loads(path.read_text(encoding="utf-8"))["run_id"] == "run-2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the final rename fails, the previous result is untouched and the temporary file is removed."""
    path = tmp_path / "result.json"
    path.write_text('{"run_id": "old"}\n', encoding="utf-8")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(result_files.os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        write_result(_result(), path)
    assert path.read_text(encoding="utf-8") == '{"run_id": "old"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_the_file_gets_the_permissions_of_an_ordinary_new_file(tmp_path: Path) -> None:
    """The result is readable as the umask allows, not private like a temporary file."""
    old_umask = os.umask(0o022)
    try:
        write_result(_result(), tmp_path / "result.json")
        (tmp_path / "plain.json").write_text("{}", encoding="utf-8")
    finally:
        os.umask(old_umask)
    mode = stat.S_IMODE((tmp_path / "result.json").stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "plain.json").stat().st_mode) == 0o644
