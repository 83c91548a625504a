"""An experiment's hypothesis (``expect``) and whether a run held it.

As Chaos Toolkit's steady-state hypothesis and LitmusChaos' probes do, a game day states before each
experiment what must stay true, and the experiment's result is then that statement held or broken, with
the reason. The clauses a hypothesis may hold, all of which must hold:

- ``score_at_least: N``: the run's resilience score is at least N (0–100; a run with no score breaks it);
- ``passes: true``: the run passed as a whole: its score over the scenario's threshold, and nothing that
  makes a run unable to pass (``generator_limited``, ``capped``, ``workload_mismatch``, aborted…);
- ``no_<verdict>: true``: that verdict was not raised: ``no_hidden_overload``, ``no_generator_limited``,
  ``no_capped``, ``no_workload_mismatch``, ``no_fault_left_behind``, ``no_aborted``, ``no_interrupted``.

A run that did not end on its own (interrupted, aborted) breaks every hypothesis: what it showed is not
what the experiment was to show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.results.score_values import HIDDEN_OVERLOAD
from cliffwatch.domain.validation import Reader

VERDICTS = (HIDDEN_OVERLOAD, "generator_limited", "capped", "workload_mismatch", "fault_left_behind", "aborted",
            "interrupted")  # fmt: skip


class ScoreFacts(Protocol):
    @property
    def value(self) -> float | None: ...

    @property
    def summary(self) -> str: ...


class VerdictFacts(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def summary(self) -> str: ...


class JudgedRun(Protocol):
    """What a hypothesis is judged on: a ``RunResult`` as a run ends, or one read back from its stored document
    (``stored_result.StoredResult``: the service keeps documents, not objects)."""

    @property
    def status(self) -> RunStatus: ...

    @property
    def abort_reason(self) -> str | None: ...

    @property
    def passed(self) -> bool: ...

    @property
    def score(self) -> ScoreFacts: ...

    def verdicts(self) -> Sequence[VerdictFacts]: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True, kw_only=True)
class Hypothesis:
    score_at_least: float | None = None
    passes: bool = False
    absent: tuple[str, ...] = ()  # verdicts that must not be raised

    def describe(self) -> str:
        clauses = []
        if self.score_at_least is not None:
            clauses.append(f"score at least {self.score_at_least:g}")
        if self.passes:
            clauses.append("the run passes")
        clauses += [f"no {name}" for name in self.absent]
        return ", ".join(clauses) or "the run ends on its own"


@dataclass(frozen=True, kw_only=True)
class Judgement:
    held: bool
    broken_because: tuple[str, ...] = ()  # one sentence a broken clause

    def summary(self) -> str:
        return "held" if self.held else "broken: " + "; ".join(self.broken_because)


def parse_hypothesis(reader: Reader) -> Hypothesis | None:
    """``expect`` from its reader; problems name the field (``experiments[0].expect.score_at_least``)."""
    before = len(reader.problems.items)
    score = reader.number("score_at_least", None, ge=0, le=100)
    passes = reader.boolean("passes", False)
    absent = []
    for key in list(reader.data):
        if not key.startswith("no_"):
            continue
        name = key.removeprefix("no_")
        value = reader.boolean(key)
        if name not in VERDICTS:
            reader.error(key, f"names no verdict: use one of {', '.join('no_' + v for v in VERDICTS)}")
        elif value is False:
            reader.error(key, "may only be true (leave it out to allow the verdict)")
        elif value is True:
            absent.append(name)
    reader.done()
    if len(reader.problems.items) > before:
        return None
    return Hypothesis(score_at_least=score, passes=bool(passes), absent=tuple(absent))


def judge(hypothesis: Hypothesis, result: JudgedRun) -> Judgement:
    """Whether ``result`` held ``hypothesis``, and each broken clause's reason."""
    broken = []
    if result.status is not RunStatus.SUCCEEDED:
        reason = result.abort_reason or "it was stopped before its end"
        broken.append(f"the run {result.status.value}: {reason}")
    if hypothesis.score_at_least is not None:
        value = result.score.value
        if value is None:
            broken.append(f"the run has no score (at least {hypothesis.score_at_least:g} expected)")
        elif value < hypothesis.score_at_least:
            broken.append(f"score {value:.1f} < {hypothesis.score_at_least:g}")
    if hypothesis.passes and not result.passed:
        broken.append(f"the run did not pass: {result.score.summary}")
    raised = {v.name: v.summary for v in result.verdicts()}
    broken += [f"{name}: {raised[name]}" for name in hypothesis.absent if name in raised]
    return Judgement(held=not broken, broken_because=tuple(broken))
