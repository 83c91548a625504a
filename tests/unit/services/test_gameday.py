"""GamedayService: a suite's experiments in order, each judged, with pauses, the stop rule and the verdict."""

from __future__ import annotations

import dataclasses
from typing import Any

from cliffwatch.domain.errors import TargetUnreachable
from cliffwatch.domain.gameday.suite_spec import ExperimentSpec, SuiteSpec, parse_suite
from cliffwatch.domain.results.result import RunResult
from cliffwatch.services.gameday import GamedayService, SuiteVerdict
from run_results_kit import result

HEALTHY, BURSTING = result(), result(burst_fails=True)


def suite(*experiments: dict[str, Any], stop: bool = False) -> SuiteSpec:
    return parse_suite({"name": "gd", "experiments": list(experiments), "stop_when": {"hypothesis_broken": stop}})


class Runner:
    """Answers each experiment by name: a result, or an exception to raise; records the order."""

    def __init__(self, answers: dict[str, RunResult | Exception], on_run: Any = None) -> None:
        self.answers = answers
        self.ran: list[str] = []
        self.on_run = on_run

    async def run(self, experiment: ExperimentSpec) -> RunResult:
        self.ran.append(experiment.name)
        if self.on_run is not None:
            self.on_run(experiment)
        answer = self.answers[experiment.name]
        if isinstance(answer, Exception):
            raise answer
        return answer


class Pauses:
    def __init__(self) -> None:
        self.waited: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waited.append(seconds)


async def test_every_hypothesis_held_is_a_suite_that_held() -> None:
    pauses = Pauses()
    runner = Runner({"a": HEALTHY, "b": HEALTHY})
    outcome = await GamedayService(suite({"scenario": "a", "expect": {"score_at_least": 90}},
                                         {"scenario": "b", "pause_before_s": 30}), runner,
                                   pause=pauses).run()  # fmt: skip
    assert outcome.verdict is SuiteVerdict.HELD
    assert outcome.exit_code == 0
    assert runner.ran == ["a", "b"]
    assert pauses.waited == [30.0]
    assert [e.state for e in outcome.experiments] == ["held", "held"]
    assert outcome.summary() == "gd: held (2 held)"


async def test_a_broken_hypothesis_breaks_the_suite_and_the_rest_still_run_unless_told_to_stop() -> None:
    answers: dict[str, RunResult | Exception] = {"a": BURSTING, "b": HEALTHY}
    experiments = ({"scenario": "a", "expect": {"score_at_least": 90}}, {"scenario": "b"})
    went_on = await GamedayService(suite(*experiments), Runner(answers), pause=Pauses()).run()
    assert went_on.verdict is SuiteVerdict.BROKEN
    assert went_on.exit_code == 1
    assert [e.state for e in went_on.experiments] == ["broken", "held"]
    assert went_on.experiments[0].to_dict()["broken_because"][0].startswith("score ")

    runner = Runner(answers)
    stopped = await GamedayService(suite(*experiments, stop=True), runner, pause=Pauses()).run()
    assert runner.ran == ["a"]
    assert [e.state for e in stopped.experiments] == ["broken", "not run"]


async def test_an_experiment_that_cannot_run_fails_the_suite_and_nothing_runs_after_it() -> None:
    runner = Runner({"a": TargetUnreachable("http://127.0.0.1:9", "connection refused"), "b": HEALTHY})
    outcome = await GamedayService(suite({"scenario": "a"}, {"scenario": "b"}), runner, pause=Pauses()).run()
    assert outcome.verdict is SuiteVerdict.FAILED
    assert outcome.exit_code == 3
    assert runner.ran == ["a"]
    first = outcome.experiments[0].to_dict()
    assert first["state"] == "failed"
    assert "connection refused" in first["error"]


async def test_a_stop_during_an_experiment_ends_the_whole_suite() -> None:
    service: GamedayService | None = None

    def stop_during(experiment: ExperimentSpec) -> None:
        assert service is not None
        service.stop()  # the emergency stop arrives while the first experiment runs

    runner = Runner({"a": HEALTHY, "b": HEALTHY}, on_run=stop_during)
    service = GamedayService(suite({"scenario": "a"}, {"scenario": "b"}), runner, pause=Pauses())
    outcome = await service.run()
    assert outcome.verdict is SuiteVerdict.STOPPED
    assert outcome.exit_code == 130
    assert runner.ran == ["a"]
    # stopped while it ran: what its run showed is no verdict either way, and its result is kept
    assert [e.state for e in outcome.experiments] == ["stopped", "not run"]
    assert outcome.experiments[0].result is HEALTHY
    assert outcome.summary() == "gd: stopped (1 stopped, 1 not run)"


async def test_the_combined_document_holds_each_experiments_full_result() -> None:
    outcome = await GamedayService(suite({"scenario": "a"}), Runner({"a": HEALTHY}), pause=Pauses()).run()
    document = outcome.to_dict()
    assert document["kind"] == "gameday"
    assert document["verdict"] == "held"
    (experiment,) = document["experiments"]
    assert experiment["result"] == dataclasses.replace(HEALTHY).to_dict()
    assert experiment["hypothesis"] == "the run ends on its own"
