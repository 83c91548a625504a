"""Each experiment's scenario as the suite makes it: bundled or inline, the targets laid over it, errors named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cliffwatch.adapters.documents.suite_files import experiment_scenarios, load_suite
from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.gameday.suite_spec import parse_suite

INLINE = {
    "name": "inline-one",
    "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
    "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m"}},
    "phases": [{"name": "p", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
}


def test_the_suites_target_and_then_the_experiments_are_laid_over_each_scenario() -> None:
    suite = parse_suite({"name": "gd", "target": {"url": "http://127.0.0.1:9000"}, "experiments": [
        {"scenario": "burst-storm"},
        {"scenario": INLINE, "target": {"url": "http://127.0.0.1:9100"}},
    ]})  # fmt: skip
    bundled, inline = experiment_scenarios(suite)
    assert bundled.name == "burst-storm"
    assert bundled.target.url == "http://127.0.0.1:9000"
    assert bundled.target.request.model == "sim-llm"  # the rest of the bundled target is kept
    assert inline.target.url == "http://127.0.0.1:9100"


def test_an_experiment_that_cannot_be_made_is_named() -> None:
    suite = parse_suite({"name": "gd", "experiments": [{"scenario": {**INLINE, "phases": []}, "name": "empty"}]})
    with pytest.raises(ScenarioInvalid) as caught:
        experiment_scenarios(suite)
    assert caught.value.source == "gd: experiment empty"


def test_a_suite_file_is_read_and_a_bad_one_names_the_file(tmp_path: Path) -> None:
    good = tmp_path / "suite.yaml"
    good.write_text(yaml.safe_dump({"name": "gd", "experiments": [{"scenario": "burst-storm"}]}))
    assert load_suite(good).experiments[0].scenario == "burst-storm"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioInvalid) as caught:
        load_suite(bad)
    assert caught.value.source == str(bad)


def test_a_bare_on_key_is_refused_with_the_way_to_write_it(tmp_path: Path) -> None:
    """YAML 1.1 reads a bare ``on`` as true: the loader refuses a key that is not a string, saying to quote it."""
    path = tmp_path / "suite.yaml"
    path.write_text("name: gd\nexperiments: [{scenario: burst-storm}]\nnotify:\n  - webhook: http://127.0.0.1:9/h\n"
                    "    on: [finished]\n")  # fmt: skip
    with pytest.raises(ScenarioInvalid) as caught:
        load_suite(path)
    assert "quote it" in str(caught.value)
    path.write_text(path.read_text().replace("    on:", '    "on":'))
    assert (load_suite(path).notify[0].on or ("",))[0] == "finished"
