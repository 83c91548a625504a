"""A game day: a suite's experiments one after another, each judged against its hypothesis.

Written against one port, ``ExperimentRunner`` (the CLI's and the service's run one experiment the way a single
run goes: faults, leases, caps, fencing and the allowlist as for any run), so the order, the pauses, the stop
rule and the verdict are tested without a target. The suite's verdict, and the exit code a CLI gives it:

- ``held`` (0): every experiment ran and held its hypothesis;
- ``broken`` (1): at least one hypothesis broke (and with ``stop_when.hypothesis_broken`` the suite stopped
  there: the experiments after it are listed as not run);
- ``failed`` (3): an experiment could not run (the target unreachable, faults unavailable): the suite stops,
  since what comes after would be measured on an environment already known to be broken;
- ``stopped`` (130): an emergency stop or Ctrl-C ended the whole suite.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.gameday.hypothesis import JudgedRun, Judgement, judge
from cliffwatch.domain.gameday.suite_spec import ExperimentSpec, SuiteEvent, SuiteSpec


class ExperimentRunner(Protocol):
    async def run(self, experiment: ExperimentSpec) -> JudgedRun:
        """Runs one experiment's scenario to its result; raises ``CliffwatchError`` when it cannot run."""


class ExperimentNotStarted(CliffwatchError):
    """An experiment's run was never started: the suite was stopped, or the emergency stop refused it, first."""


class SuiteVerdict(StrEnum):
    HELD = "held"
    BROKEN = "broken"
    FAILED = "failed"
    STOPPED = "stopped"


EXIT_CODES = {SuiteVerdict.HELD: 0, SuiteVerdict.BROKEN: 1, SuiteVerdict.FAILED: 3, SuiteVerdict.STOPPED: 130}


@dataclass(frozen=True, kw_only=True)
class ExperimentOutcome:
    experiment: ExperimentSpec
    result: JudgedRun | None = None  # None: it did not run (failed to start, or the suite stopped before it)
    judgement: Judgement | None = None
    error: str | None = None  # why it could not run
    stopped: bool = False  # the suite was stopped while it ran: what its run showed is no verdict either way

    @property
    def state(self) -> str:
        if self.stopped:
            return "stopped"
        if self.judgement is not None:
            return "held" if self.judgement.held else "broken"
        return "failed" if self.error is not None else "not run"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.experiment.name,
            "scenario": self.experiment.scenario or "(inline)",
            "hypothesis": self.experiment.expect.describe(),
            "state": self.state,
            "broken_because": [] if self.judgement is None else list(self.judgement.broken_because),
            "error": self.error,
            "result": None if self.result is None else self.result.to_dict(),
        }


@dataclass(frozen=True, kw_only=True)
class SuiteOutcome:
    suite: SuiteSpec
    experiments: tuple[ExperimentOutcome, ...]
    verdict: SuiteVerdict

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def summary(self) -> str:
        counts = {state: sum(1 for e in self.experiments if e.state == state)
                  for state in ("held", "broken", "failed", "stopped", "not run")}  # fmt: skip
        said = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
        return f"{self.suite.name}: {self.verdict.value} ({said})"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "gameday", "name": self.suite.name, "verdict": self.verdict.value,
                "summary": self.summary(), "experiments": [e.to_dict() for e in self.experiments]}  # fmt: skip

    def events(self) -> list[SuiteEvent]:
        """What the suite's webhooks are told: finished when every experiment ran, hypothesis_broken when one
        broke, failed when one could not run or the suite was stopped."""
        found = []
        if self.verdict in (SuiteVerdict.HELD, SuiteVerdict.BROKEN):
            found.append(SuiteEvent.FINISHED)
        if any(e.state == "broken" for e in self.experiments):
            found.append(SuiteEvent.HYPOTHESIS_BROKEN)
        if self.verdict in (SuiteVerdict.FAILED, SuiteVerdict.STOPPED):
            found.append(SuiteEvent.FAILED)
        return found

    def notice(self) -> dict[str, Any]:
        """The document a webhook is sent: the combined one without each experiment's full result."""
        summary = {k: v for k, v in self.to_dict().items() if k != "experiments"}
        summary["experiments"] = [{k: v for k, v in e.to_dict().items() if k != "result"} for e in self.experiments]
        return summary


class GamedayService:
    """Runs ``suite`` through ``runner``; ``pause(seconds)`` waits between experiments (a stop ends it)."""

    def __init__(
        self, suite: SuiteSpec, runner: ExperimentRunner, *, pause: Callable[[float], Awaitable[None]]
    ) -> None:
        self.suite = suite
        self.runner = runner
        self.pause = pause
        self.stopped = False

    def stop(self) -> None:
        """The emergency stop, or Ctrl-C: no experiment starts after this one."""
        self.stopped = True

    def _halted(self) -> bool:
        return self.stopped  # a call, not the attribute: a stop may come while an experiment or a pause runs

    async def run(self) -> SuiteOutcome:
        done: list[ExperimentOutcome] = []
        verdict = SuiteVerdict.HELD
        for experiment in self.suite.experiments:
            if self._halted() or verdict is SuiteVerdict.FAILED:
                done.append(ExperimentOutcome(experiment=experiment))
                continue
            if verdict is SuiteVerdict.BROKEN and self.suite.stop_on_broken:
                done.append(ExperimentOutcome(experiment=experiment))
                continue
            if experiment.pause_before_s > 0 and done:
                await self.pause(experiment.pause_before_s)
                if self._halted():
                    done.append(ExperimentOutcome(experiment=experiment))
                    continue
            try:
                result = await self.runner.run(experiment)
            except ExperimentNotStarted:  # the stop came as it started (the emergency stop refused its run)
                done.append(ExperimentOutcome(experiment=experiment))
                continue
            except CliffwatchError as exc:
                if self._halted():  # stopped while its run was queued or running: it ended without a result
                    done.append(ExperimentOutcome(experiment=experiment, stopped=True))
                    continue
                done.append(ExperimentOutcome(experiment=experiment, error=str(exc)))
                verdict = SuiteVerdict.FAILED
                continue
            if self._halted():  # stopped while it ran (Ctrl-C, the emergency stop): its partial result is kept
                done.append(ExperimentOutcome(experiment=experiment, result=result, stopped=True))
                continue
            # a run its own abort guard stopped breaks its hypothesis (judge says so); a stop of the whole suite
            # comes through ``stop``
            judgement = judge(experiment.expect, result)
            done.append(ExperimentOutcome(experiment=experiment, result=result, judgement=judgement))
            if not judgement.held and verdict is SuiteVerdict.HELD:
                verdict = SuiteVerdict.BROKEN
        if self._halted():
            verdict = SuiteVerdict.STOPPED
        return SuiteOutcome(suite=self.suite, experiments=tuple(done), verdict=verdict)
