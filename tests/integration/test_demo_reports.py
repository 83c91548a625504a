"""`cliffwatch demo` writes an HTML report next to each scenario's JSON result and prints where."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from test_cli import QUICK  # a short run on a small, fast built-in target, standing in for the demo's scenarios

import cliffwatch.cli as cli
from cliffwatch.adapters.documents.scenario_files import load_scenario


@pytest.mark.slow
def test_demo_writes_and_names_an_html_report_per_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario_file = tmp_path / "quick.yaml"
    scenario_file.write_text(yaml.safe_dump(QUICK), encoding="utf-8")

    async def no_toxiproxy(settings: object) -> str:
        return "not used in this test"

    monkeypatch.setattr(cli, "DEMO_SCENARIOS", ("quick",))
    monkeypatch.setattr(cli, "load_scenario", lambda name: load_scenario(str(scenario_file)))
    monkeypatch.setattr(cli, "toxiproxy_unavailable", no_toxiproxy)
    monkeypatch.setenv("CLIFFWATCH_STATE_DIR", tempfile.mkdtemp(prefix="cliffwatch-demo-state-"))
    monkeypatch.delenv("CLIFFWATCH_ALLOWED_TARGETS", raising=False)

    out_dir = tmp_path / "demo-out"
    assert cli.main(["demo", "--reports-dir", str(out_dir)]) == 0

    report = out_dir / "quick.html"
    page = report.read_text(encoding="utf-8")
    result = json.loads((out_dir / "quick.json").read_text(encoding="utf-8"))
    assert f"<h1>{result['scenario']['name']}</h1>" in page
    assert result["run_id"] in page
    printed = capsys.readouterr().out
    assert f"report: {report}" in printed
    assert f"HTML reports (open in a browser): {report}" in printed
