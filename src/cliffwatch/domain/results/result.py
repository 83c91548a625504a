"""A finished run: its status, metrics, generator verdict, fault timeline and score, and its JSON form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from cliffwatch import __version__
from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_S, Outcome
from cliffwatch.domain.results.cost import Price, priced
from cliffwatch.domain.results.run_metrics import PhaseStats, RunMetrics, SecondStats, merge_phases, outcome_counts
from cliffwatch.domain.results.scoring import Score
from cliffwatch.domain.results.workload_match import output_shortfall_summary, workload_mismatch
from cliffwatch.domain.scenario.conversations import pooled
from cliffwatch.domain.scenario.faults import FaultEvent
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.server.server_view import ServerView
from cliffwatch.domain.server.state_headers import unit_of
from cliffwatch.domain.traffic.generator_health import GeneratorReport
from cliffwatch.domain.workload.prompt_sizing import WORDS_SIZING, PromptSizing

RESULT_FORMAT = 1
DISTRIBUTIONS = ("e2e", "ttft")  # the latencies whose histograms a phase keeps whole (domain.compare)


class RunStatus(StrEnum):
    QUEUED = "queued"  # accepted by the service, waiting for a worker
    RUNNING = "running"  # claimed by a worker, which holds its lease
    SUCCEEDED = "succeeded"  # ran every phase (the score may still fail)
    ABORTED = "aborted"  # an abort guard stopped it
    INTERRUPTED = "interrupted"  # stopped from outside (Ctrl-C, shutdown, crash)
    FAILED = "failed"  # could not run (target unreachable, faults unavailable, ...)

    @property
    def terminal(self) -> bool:
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING)


@dataclass(frozen=True, kw_only=True)
class PhaseTiming:
    """When a phase actually began and ended on the run clock (ns from the run's start)."""

    index: int
    began_ns: int
    ended_ns: int


@dataclass(frozen=True, kw_only=True)
class Verdict:
    name: str
    summary: str


@dataclass(frozen=True, kw_only=True)
class RunResult:
    run_id: str
    scenario: Scenario
    target_url: str
    status: RunStatus
    abort_reason: str | None
    started_at: datetime
    finished_at: datetime
    duration_s: float
    metrics: RunMetrics
    generator: GeneratorReport
    score: Score
    fault_events: tuple[FaultEvent, ...] = ()
    phase_timings: tuple[PhaseTiming, ...] = ()
    notes: tuple[str, ...] = ()  # where the run as prepared differs from its scenario (a capped pool, say)
    prompt_sizing: PromptSizing = WORDS_SIZING  # how prompt_tokens became prompts (domain.workload.prompt_sizing)
    server: ServerView | None = None  # the target's own metrics, scraped during the run (target.metrics)

    @property
    def passed(self) -> bool:
        """A pass needs a complete run, a generator that kept its schedule, the load as written (nothing held
        back by the attempt cap), and a passing score."""
        return (self.status is RunStatus.SUCCEEDED and not self.generator.limited and not self.capped
                and self.workload_mismatch is None and self.score.passed)  # fmt: skip

    @property
    def workload_mismatch(self) -> str | None:
        """Why the prompts sent are not the sizes the scenario asks for (domain.results.workload_match)."""
        return workload_mismatch(self.prompt_sizing, self.metrics.phases)

    @property
    def capped(self) -> bool:
        """Whether the run's attempt cap held back any attempt (``GeneratorReport.cap``)."""
        return self.generator.capped

    def verdicts(self) -> list[Verdict]:
        found = [Verdict(name=f.name, summary=f.summary) for f in self.score.flags if f.raised]
        if self.generator.limited:
            found.append(
                Verdict(
                    name="generator_limited",
                    summary="the load generator could not keep its schedule, so these numbers describe the "
                    "client, not the target: " + "; ".join(self.generator.reasons),
                )
            )
        mismatch = self.workload_mismatch
        if mismatch is not None:
            found.append(Verdict(name="workload_mismatch", summary="the prompts sent are not the sizes the scenario "
                                 f"asks for, so these figures describe another workload: {mismatch}"))  # fmt: skip
        if self.generator.cap is not None and self.generator.cap.capped:
            found.append(Verdict(name="capped", summary=self.generator.cap.summary()))
        left = [e for e in self.fault_events if e.action == "off" and not e.ok]
        if left:
            found.append(
                Verdict(
                    name="fault_left_behind",
                    summary=f"{len(left)} fault(s) could not be removed ({left[0].detail}); they stay in the fault "
                    "ledger and the next start-up removes them (cliffwatch faults reconcile)",
                )
            )
        if self.status is RunStatus.ABORTED:
            found.append(Verdict(name="aborted", summary=self.abort_reason or "aborted"))
        if self.status is RunStatus.INTERRUPTED:
            found.append(Verdict(name="interrupted", summary="the run was stopped before its end"))
        return found

    def to_dict(self) -> dict[str, Any]:
        """The JSON document ``cliffwatch run --json`` writes."""
        timings = {t.index: t for t in self.phase_timings}
        return {
            "format": RESULT_FORMAT,
            "cliffwatch_version": __version__,
            "run_id": self.run_id,
            "status": self.status.value,
            "passed": self.passed,
            "capped": self.capped,
            "workload_mismatch": self.workload_mismatch is not None,
            "workload_mismatch_reason": self.workload_mismatch,
            "cost": self._cost(),
            "abort_reason": self.abort_reason,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
            "duration_s": round(self.duration_s, 3),
            "scenario": _scenario_dict(self.scenario),
            "target": {"url": self.target_url, "api": self.scenario.target.api.value},
            "score_version": self.score.version,
            "score": self.score.to_dict(),
            "verdicts": [{"name": v.name, "summary": v.summary} for v in self.verdicts()],
            "generator": self.generator.to_dict(),
            "phases": [_phase_dict(p, timings.get(p.window.index), self.server) for p in self.metrics.phases],
            "timeseries": self._timeseries(),
            "faults": [_fault_dict(e) for e in self.fault_events],
            "notes": list(self.notes),
            "prompt_tokens": self._prompt_tokens(),
            "server_metrics": None if self.server is None else self.server.to_dict(),
            "classes": self._classes(timings),
            "conversations": self._conversations(),
        }

    def _conversations(self) -> dict[str, Any] | None:
        """The conversations each phase started and how they ended, and all of them; None without sessions."""
        stats = self.metrics.conversations
        if not stats:
            return None
        phases = [{"name": p.window.name, **c.to_dict()} for p, c in zip(self.metrics.phases, stats, strict=True)]
        return {"phases": phases, "total": pooled(list(stats)).to_dict()}

    def _classes(self, timings: Mapping[int, PhaseTiming]) -> list[dict[str, Any]]:
        """Each traffic class's own figures (empty without classes): what the class is, and its phases as the
        run's are given."""
        declared = {c.name: c for c in self.scenario.classes}
        return [
            {**declared[name].describe(),
             "phases": [_phase_dict(p, timings.get(p.window.index), None) for p in metrics.phases]}
            for name, metrics in self.metrics.classes
            if name in declared
        ]  # fmt: skip

    def _timeseries(self) -> list[dict[str, Any]]:
        """The per-second rows; with server metrics, each row also has every server series' value in that
        second (``server``: the mean of its scrapes then, None without one), on the same time axis."""
        rows = [_second_dict(s) for s in self.metrics.seconds]
        for name, metrics in self.metrics.classes:  # each class's own requests of the second
            for row, second in zip(rows, metrics.seconds, strict=False):
                row.setdefault("classes", {})[name] = _class_second(second)
        if self.server is not None:
            columns = self.server.per_second(len(rows))
            for index, row in enumerate(rows):
                row["server"] = {name: _rounded(values[index]) for name, values in columns.items()}
        return rows

    def price(self) -> Price | None:
        """The whole run's cost against what it served on time (``target.cost``); None without a cost."""
        spec = self.scenario.target.cost
        phases = self.metrics.phases
        if spec is None or not phases:
            return None
        return priced(spec, seconds=sum(p.window.duration_s for p in phases), on_time=sum(p.on_time for p in phases),
                      on_time_output_tokens=sum(p.on_time_output_tokens for p in phases))  # fmt: skip

    def _cost(self) -> dict[str, Any] | None:
        """``cost``: the target's hourly cost, and its price per on-time work over the run and each phase."""
        spec, whole = self.scenario.target.cost, self.price()
        if spec is None or whole is None:
            return None
        phases = [{"name": p.window.name, **priced(spec, seconds=p.window.duration_s, on_time=p.on_time,
                                                   on_time_output_tokens=p.on_time_output_tokens).to_dict()}
                  for p in self.metrics.phases]  # fmt: skip
        return {
            "per_hour": spec.per_hour,
            "currency": spec.currency,
            "described": spec.describe(),
            "run": whole.to_dict(),
            "sentence": whole.sentence(),
            "phases": phases,
        }

    def _prompt_tokens(self) -> dict[str, Any]:
        """The sizing and, over every phase, the intended prompt counts against the server's own (None when
        no answer carried ``usage.prompt_tokens``)."""
        pooled = merge_phases(self.metrics.phases) if self.metrics.phases else None
        error = _prompt_errors(pooled).get("prompt_tokens_error") if pooled is not None else None
        return {**self.prompt_sizing.to_dict(), "error": error}


def scenario_summary(scenario: Scenario) -> dict[str, Any]:
    """What a result document says of its scenario: name, description, content hash, seed and SLO."""
    return {
        "name": scenario.name,
        "description": scenario.description,
        "content_hash": scenario.content_hash,
        "seed": scenario.seed,
        "slo": {
            "ttft_ms": scenario.slo.ttft_ms,
            "tpot_ms": scenario.slo.tpot_ms,
            "e2e_ms": scenario.slo.e2e_ms,
            "timeout_ms": scenario.slo.timeout_ms,
        },
    }


def _scenario_dict(scenario: Scenario) -> dict[str, Any]:
    return {
        **scenario_summary(scenario),
        "threshold": scenario.score.threshold,
        "classes": [c.describe() for c in scenario.classes],
        "sessions": None if scenario.shared.sessions is None else scenario.shared.sessions.describe(),
        "prefix": None if scenario.shared.prefix is None else scenario.shared.prefix.describe(),
        "phases": [
            {
                "name": p.name,
                "role": p.role.value,
                "duration_s": p.duration_s,
                "arrival": p.arrival.describe(),
                "retry": scenario.retry_for(i).describe(),
                "faults": [f.describe() for f in p.faults],
            }
            for i, p in enumerate(scenario.phases)
        ],
    }


def _class_second(second: SecondStats) -> dict[str, Any]:
    """A class's share of one second's row: its requests offered then, how they ended, their p99 latencies."""
    row: dict[str, Any] = {"offered": second.offered, "on_time_completions": second.on_time_completions,
                           "output_tokens": round(second.output_tokens, 2)}  # fmt: skip
    row.update({o.value: second.outcomes[o] for o in Outcome})
    for name, hist in (("ttft", second.ttft), ("e2e", second.e2e)):
        value = hist.quantile(0.99)
        row[f"{name}_p99_ms"] = None if value is None else round(value, 3)
    return row


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _ratio(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _phase_dict(stats: PhaseStats, timing: PhaseTiming | None, server: ServerView | None) -> dict[str, Any]:
    window = stats.window
    extra: dict[str, Any] = {}
    if server is not None:
        start, end = window.start_ns / NS_PER_S, window.end_ns / NS_PER_S
        if timing is not None:
            start, end = timing.began_ns / NS_PER_S, timing.ended_ns / NS_PER_S
        summaries = {s.name: server.window(s.name, start, end) for s in server.series}
        extra["server"] = {name: w.to_dict() for name, w in summaries.items() if w is not None}
    return {
        "name": window.name,
        "role": window.role.value,
        "planned_start_s": window.start_ns / NS_PER_S,
        "planned_end_s": window.end_ns / NS_PER_S,
        "actual_start_s": None if timing is None else round(timing.began_ns / NS_PER_S, 3),
        "actual_end_s": None if timing is None else round(timing.ended_ns / NS_PER_S, 3),
        "offered": stats.offered,
        "sent": stats.sent,
        "outcomes": outcome_counts(stats.outcomes),
        "on_time_ratio": _ratio(stats.on_time_ratio),
        "offered_rps": round(stats.offered_rps, 3),
        "goodput_rps": round(stats.goodput_rps, 3),
        "completions_per_s": round(stats.completions / window.duration_s, 3),
        "output_tokens_per_s": round(stats.tokens_per_s, 2),
        "attempts": stats.attempts,
        "retries": stats.retries,
        "amplification": _ratio(stats.amplification),
        "fast_shed": stats.fast_shed,
        "capped": stats.capped,
        "token_count_source": dict(stats.token_sources),
        **_token_split(stats),
        **_prompt_errors(stats),
        "output_shortfall": output_shortfall_summary(stats.output_shortfall),
        "latency_ms": {name: hist.summary() for name, hist in stats.latency.items()},
        "distributions": {name: stats.latency[name].to_dict() for name in DISTRIBUTIONS},  # what compare tests
        **state_headers_summary(stats),
        **extra,
    }


def state_headers_summary(stats: PhaseStats) -> dict[str, Any]:
    """``state_headers`` when some answer carried server state (domain.server.state_headers): per reading, its unit,
    how many answers carried it, and its spread; nothing otherwise."""
    if not stats.state_headers:
        return {}
    summaries = {}
    for name, histogram in sorted(stats.state_headers.items()):
        p50, p90 = histogram.quantile(0.5), histogram.quantile(0.9)
        summaries[name] = {
            "unit": unit_of(name),
            "responses": histogram.count,
            "min": round(histogram.min, 3),
            "p50": None if p50 is None else round(p50, 3),
            "p90": None if p90 is None else round(p90, 3),
            "max": round(histogram.max, 3),
        }
    return {"state_headers": summaries}


def _token_split(stats: PhaseStats) -> dict[str, Any]:
    """``output_tokens_split`` when some answer's split was known (a reasoning model, or usage's
    reasoning_tokens): reasoning and answer tokens over the answers it covers; nothing otherwise."""
    if not stats.split_answers:
        return {}
    split = {"reasoning": stats.reasoning_tokens, "answer": stats.answer_tokens, "answers": stats.split_answers}
    return {"output_tokens_split": split}


def _prompt_errors(stats: PhaseStats) -> dict[str, Any]:
    """``prompt_tokens_error`` when the server reported prompt counts: the intended count against the
    server's, in percent of the intended (mean signed, mean and p99 absolute), over ``answers``."""
    errors = stats.prompt_error
    if not errors.count:
        return {}
    return {"prompt_tokens_error": prompt_error_summary(errors, stats.prompt_error_signed)}


def prompt_error_summary(errors: Histogram, signed: float) -> dict[str, Any]:
    p99 = errors.quantile(0.99)
    return {
        "answers": errors.count,
        "mean_pct": round(signed / errors.count, 3),
        "mean_abs_pct": round(errors.total / errors.count, 3),
        "p99_abs_pct": None if p99 is None else round(p99, 3),
        "max_abs_pct": round(errors.max, 3),
    }


def _second_dict(second: SecondStats) -> dict[str, Any]:
    row: dict[str, Any] = {
        "t": second.t,
        "offered": second.offered,
        "attempts": second.attempts,
        "retries": second.retries,
        "in_flight": round(second.in_flight, 3),
        "completions": second.completions,
        "on_time_completions": second.on_time_completions,
        "output_tokens": round(second.output_tokens, 2),
    }
    row.update({o.value: second.outcomes[o] for o in Outcome})
    for name, hist in (("ttft", second.ttft), ("e2e", second.e2e)):
        for q in (0.5, 0.9, 0.99):
            value = hist.quantile(q)
            row[f"{name}_p{q * 100:g}_ms"] = None if value is None else round(value, 3)
    return row


def _fault_dict(event: FaultEvent) -> dict[str, Any]:
    return {
        "phase": event.phase,
        "action": event.action,
        "at_s": round(event.at_ns / NS_PER_S, 3),
        "fault": event.fault.describe(),
        "ok": event.ok,
        "detail": event.detail,
    }
