"""Fuzzing the scenario files' parse and validate (hypothesis, bounded to a few seconds): whatever the text,
the answer is a Scenario or a clear ``ScenarioInvalid``, never another exception; and a Scenario's document
can be hashed, stored as JSON and shown as YAML."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from cliffwatch.adapters.documents import SCENARIO_LIMITS, dump_yaml, load_yaml
from cliffwatch.adapters.documents.scenario_files import load_scenario, parse_scenario_text
from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.scenario import Scenario, content_hash
from cliffwatch.services.store_values import plain_json
from document_strategies import hostile_texts

FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def parsed(text: str) -> Scenario | ScenarioInvalid:
    """What parsing and validating ``text`` gives: the scenario, or the ``ScenarioInvalid`` it raised."""
    try:
        return parse_scenario_text(text, source="fuzz")
    except ScenarioInvalid as exc:
        return exc


@FUZZ
@given(hostile_texts())
@example("seed: " + "1" * 5_000)
@example("[" * 100_000)
@example('{"name": "x", "seed": 1e400}')
@example("a: &a [*a]")
def test_any_text_is_a_scenario_or_a_clear_scenario_invalid(text: str) -> None:
    """Parsing and validating any text gives a Scenario (whose document hashes, stores and dumps) or a
    ScenarioInvalid with at least one problem; nothing else escapes."""
    scenario = parsed(text)
    if isinstance(scenario, ScenarioInvalid):
        event("invalid")
        assert scenario.problems
        assert all(isinstance(p.message, str) and p.message for p in scenario.problems)
        return
    event("valid")
    assert isinstance(scenario, Scenario)
    document = load_yaml(text, SCENARIO_LIMITS)
    assert scenario.content_hash == content_hash(document)
    assert plain_json(document) is not None
    assert load_yaml(dump_yaml(document), SCENARIO_LIMITS) == plain_json(document)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400) | hostile_texts().map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_file_is_a_scenario_or_a_clear_scenario_invalid(tmp_path: Path, raw: bytes) -> None:
    """A file of any bytes (not UTF-8, NUL, halves of characters, encoded surrogates) loads as a Scenario or
    is a ScenarioInvalid naming the file."""
    path = tmp_path / "fuzz.yaml"
    path.write_bytes(raw)
    try:
        loaded: Scenario | ScenarioInvalid = load_scenario(str(path))
    except ScenarioInvalid as exc:
        loaded = exc
    if isinstance(loaded, ScenarioInvalid):
        assert loaded.source == str(path)
        assert loaded.problems
    else:
        assert isinstance(loaded, Scenario)
