"""Terminal output of a capacity sweep: a line per step while it runs, then a table per retry variant,
the capacity summary and verdict, and (with several variants) how each moved the cliff."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from cliffwatch.domain.capacity.capacity import CapacityResult, SettledRate, StepStats, StepVerdict
from cliffwatch.domain.capacity.drift import Disagreement, DriftReading
from cliffwatch.domain.capacity.speed_drift import LatencyReading, SpeedShift
from cliffwatch.domain.capacity.sweep_plan import short_step_warning
from cliffwatch.domain.capacity.sweep_spec import SweepMode
from cliffwatch.domain.outcomes import FAILED, OUTCOME_TEXT
from cliffwatch.domain.ports import ProgressObserver
from cliffwatch.domain.results.cost import usable_cost
from cliffwatch.services.sweep import SweepOutcome, SweepReport

_VERDICT_STYLE = {
    StepVerdict.GOOD: "green",
    StepVerdict.BAD: "red",
    StepVerdict.INVALID: "yellow",
    StepVerdict.UNSURE: "dim",
}


def _num(value: float | None) -> str:
    """Three significant digits, without an exponent for the sizes a sweep meets."""
    if value is None:
        return "–"
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _pct(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:.{digits}%}"


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def verdict_text(verdict: StepVerdict, *, on_point_estimate: bool = False) -> str:
    if verdict is StepVerdict.INVALID:
        return "invalid (generator)"
    if verdict is StepVerdict.UNSURE:
        return "unsure: again"
    return f"{verdict.value} (on point estimate)" if on_point_estimate else verdict.value


def attainment_text(step: StepStats) -> str:
    if step.attainment is None:
        return "–"
    interval = step.interval()
    return f"{step.attainment:.1%} [{interval.low:.1%}–{interval.high:.1%}]"


class SweepConsoleObserver:
    """A ``SweepObserver`` that notes each step as it starts and ends on the progress display."""

    def __init__(self, progress: ProgressObserver, *, unit: str = "req/s") -> None:
        self.progress = progress
        self.unit = unit

    def step_started(self, variant: str, rate: float, trial: int) -> None:
        again = f", trial {trial}" if trial > 1 else ""
        self.progress.note(f"{variant}: step at {_num(rate)} {self.unit}{again}")

    def step_finished(self, variant: str, step: StepStats, verdict: StepVerdict) -> None:
        limited = f"  generator limited: {'; '.join(step.generator_reasons)}" if step.generator_limited else ""
        grew = growth_text(step)
        again = ": measuring it again over a longer window" if grew and not step.extended else ""
        recheck = " (the recheck)" if step.recheck else ""
        self.progress.note(
            f"{variant}: {_num(step.rate)} {self.unit}{recheck} → on time {attainment_text(step)}, "
            f"goodput {_num(step.goodput_rps)}/s, tokens {_num(step.tokens_per_s)}/s, "
            f"p99 e2e {_ms(step.e2e_ms.get('p99'))}: {verdict_text(verdict)}{limited}"
            + (f"  queue growing ({grew}){again}" if grew else "")
            + drain_text(step)
        )


def drain_text(step: StepStats) -> str:
    """After the step, how long the target took to be idle again: "  drained in 3.2 s (server metrics)"."""
    drain = step.drain
    if drain is None:
        return ""
    if not drain.drained:
        return (
            f"  NOT drained after {drain.seconds:.1f} s ({drain.by.value}: {drain.detail}): the next step inherits it"
        )
    return f"  drained in {drain.seconds:.1f} s ({drain.by.value})"


def growth_text(step: StepStats) -> str:
    """What the growth check saw, when the queue grew: "wait +62 ms/s, 6.2 % overload"; empty otherwise."""
    trend = None if step.growth is None else step.growth.evidence
    if trend is None:
        return ""
    if trend.signal.value == "server_queue":
        return f"server queue +{trend.slope:,.2f}/s, {trend.overload * 100:.1f} % overload"
    return f"wait +{trend.slope * 1000:,.0f} ms/s, {trend.overload * 100:.1f} % overload"


def step_table(report: SweepReport) -> Table:
    """Every step of one variant, in the order measured, with its rate's settled verdict on its last trial
    (``*``: settled on the point estimate). The JSON has every figure; this is the readable subset."""
    result = report.result
    title = f"{report.variant} (retry: {report.policy_description})"
    table = Table(title=title, title_justify="left", show_edge=False, caption_justify="left")
    by_class = any(step.classes for step in result.steps)
    corrected = any(r.pooled.corrected_on_time is not None for r in result.rates)
    headers = (
        *(result.unit, "#", "n", "sent/s", "good/s", "on time", "95% CI", *(("luck-corr.",) if corrected else ())),
        *("tokens/s", "done/s"),
        *("p99 TTFT", "p99 e2e", *(OUTCOME_TEXT[o].short for o in FAILED), "amp", "queue"),
        *(("by class",) if by_class else ()),
        "verdict",
    )
    for header in headers:
        table.add_column(header, justify="left" if header == "verdict" else "right", no_wrap=True)
    settled = {s.rate: s for s in result.rates}
    # the search's last trial at each rate carries the rate's verdict; the recheck has a line of its own
    last_trial = {step.rate: step.trial for step in result.steps if not step.recheck}
    drift = result.target_drift
    estimated = False
    for step in result.steps:
        rate = settled.get(step.rate)
        luck = "–"
        if step.recheck:
            verdict = "[red]recheck: drifted[/]" if drift is not None and drift.rechecked else "[dim]recheck: agrees[/]"
        elif step.trial < last_trial[step.rate] or rate is None:
            verdict = "[dim]unsure: again[/]" if step.trial < last_trial[step.rate] else "–"
        else:
            luck = _pct(rate.pooled.judged_attainment, 1) if rate.pooled.corrected_on_time is not None else "–"
            style = _VERDICT_STYLE.get(rate.verdict, "")
            grew = " (queue grew)" if rate.on_growth else ""
            slower = f" (on trial {rate.slowest_trial}: drifted)" if rate.slowest_trial is not None else ""
            verdict = f"[{style}]{verdict_text(rate.verdict)}{grew}{slower}{'*' if rate.on_point_estimate else ''}[/]"
            estimated = estimated or rate.on_point_estimate
        interval = step.interval()
        table.add_row(
            _num(step.rate),
            f"{step.trial} recheck" if step.recheck else str(step.trial),
            str(step.offered),
            _num(step.sent_rate),
            _num(step.goodput_rps),
            _pct(step.attainment, 1),
            f"{interval.low * 100:.1f}–{interval.high * 100:.1f}",
            *((luck,) if corrected else ()),
            _num(step.tokens_per_s),
            _num(step.completions_per_s),
            _ms(step.ttft_ms.get("p99")),
            _ms(step.e2e_ms.get("p99")),
            *(_pct(step.share_of(outcome.value)) for outcome in FAILED),
            "–" if step.amplification is None else f"{step.amplification:.2f}",
            _queue_cell(step),
            *((" ".join(f"{name} {_pct(c.attainment)}" for name, c in step.classes.items()),) if by_class else ()),
            verdict,
        )
    notes = ["queue: the overload the growth check saw when the queue grew within the step; ext: measured over the "
             "extended window"]  # fmt: skip
    if by_class:
        notes.append("by class: each traffic class's share on time against its own SLO (the step is judged on all)")
    if corrected:
        notes.append("luck-corr.: the rate's attainment over all its trials, corrected for the luck of its Poisson "
                     "draws; its verdict is judged on it (docs/sweep.md, \"Arrival luck\")")  # fmt: skip
    if estimated:
        notes.append("* settled on the point estimate: no further trial could clear the 95% interval (docs/sweep.md)")
    if any(step.recheck for step in result.steps):
        notes.append("recheck: the first rate measured again at the end, to see whether the target's speed drifted")
    if drift is not None and drift.disagreements:
        notes.append("drifted: trials at the rate disagreed beyond their intervals; it is judged on its slower trial "
                     '(docs/sweep.md, "A target whose speed drifts")')  # fmt: skip
    if drift is not None and drift.latency:
        notes.append("recheck: drifted: its median latency moved from the first reading's beyond their spread (the "
                     'target\'s own speed, docs/sweep.md, "A target whose speed drifts")')  # fmt: skip
    table.caption = "\n".join(notes)
    return table


def _queue_cell(step: StepStats) -> str:
    """The growth check's reading of a step: "+6.2%" when its queue grew (with "ext" for an extended window),
    "flat" when it did not, "–" when unchecked."""
    if step.growth is None:
        return "–"
    extended = " ext" if step.extended else ""
    trend = step.growth.evidence
    return f"[red]+{trend.overload * 100:.1f}%{extended}[/]" if trend is not None else f"flat{extended}"


def capacity_lines(result: CapacityResult) -> list[RenderableType]:
    """The headline figures of one variant and its verdict sentence."""
    unit = result.unit
    if result.usable_rps is None:
        usable = "[bold red]none[/]"
    else:
        usable = f"[bold]{_num(result.usable_rps)} {unit}[/]"
        if result.usable_interval is not None:
            interval = result.usable_interval
            usable += f" (on time, 95% CI {_pct(interval.low, 1)}–{_pct(interval.high, 1)})"
        if result.usable_on_point_estimate:
            usable += " [yellow]on point estimate[/]"
    peak_at = "" if result.peak_tokens_rate is None else f" at {_num(result.peak_tokens_rate)} {unit}"
    lines: list[RenderableType] = [
        Text.from_markup(
            f"usable capacity at {result.target:.1%} on time: {usable}"
            + ("" if result.first_bad_rps is None else f"; first failing {_num(result.first_bad_rps)} {unit}")
        ),
        Text(
            f"peak tokens/s {_num(result.peak_tokens_per_s)}{peak_at}; peak completions/s "
            f"{_num(result.peak_completions_per_s)}; cliff ratio (usable / peak-tokens rate) "
            f"{_pct(result.cliff_ratio)}"
        ),
        Text.from_markup(f"[bold]verdict:[/] {result.verdict}"),
        Text(f"search ended: {result.finished_because}", style="dim"),
    ]
    if result.luck is not None and result.luck.steps:
        applied = "corrected" if result.luck.applied else "not corrected"
        lines.append(Text(f"arrival luck: {applied}: {result.luck.reason}", style="dim"))
    if result.target_drift is not None:
        lines.extend(Text(f"target drift: {drift_text(pair, unit)}", style="yellow")
                     for pair in result.target_drift.disagreements)  # fmt: skip
        lines.extend(Text(f"target drift: {shift_text(shift, unit)}", style="yellow")
                     for shift in result.target_drift.latency)  # fmt: skip
    return lines


def shift_text(shift: SpeedShift, unit: str) -> str:
    """A recheck whose median latency moved: "0.5 req/s: median e2e 107 ms in trial 1 (step 1, at 0 s), 173 ms in
    the recheck (step 14, at 240 s): +62 %"."""

    def reading(r: LatencyReading) -> str:
        when = "" if r.started_s is None else f", at {r.started_s:.0f} s"
        what = "the recheck" if r.recheck else f"trial {r.trial}"
        return f"{_num(r.median_ms)} ms in {what} (step {r.step_index + 1}{when})"

    name = "TTFT" if shift.signal == "ttft" else shift.signal
    return (f"{_num(shift.rate)} {unit}: median {name} {reading(shift.earlier)}, {reading(shift.later)}: "
            f"{shift.change * 100:+.0f} %")  # fmt: skip


def drift_text(pair: Disagreement, unit: str) -> str:
    """Two disagreeing trials, when they ran and how far apart: "8 req/s: trial 1 (step 5, at 62 s) 100.0 % on
    time, trial 2 (step 9, at 240 s) 29.0 %: −71.0 points, median e2e +66 ms"."""

    def reading(r: DriftReading) -> str:
        when = "" if r.started_s is None else f", at {r.started_s:.0f} s"
        what = "the recheck" if r.recheck else f"trial {r.trial}"
        return f"{what} (step {r.step_index + 1}{when}) {r.on_time_share:.1%}"

    apart = f"{pair.share_change * 100:+.1f} points"
    if pair.median_e2e_change_ms is not None:
        apart += f", median e2e {pair.median_e2e_change_ms:+,.0f} ms"
    return f"{_num(pair.rate)} {unit}: {reading(pair.earlier)} on time, {reading(pair.later)}: {apart}"


def comparison(reports: Sequence[SweepReport]) -> Table:
    """Several retry variants side by side: where each put the usable capacity and the cliff."""
    table = Table(title="retry variants side by side", title_justify="left")
    table.add_column("")
    for report in reports:
        table.add_column(report.variant, justify="right")
    first = reports[0].result.usable_rps if reports else None

    def row(label: str, values: Sequence[str]) -> None:
        table.add_row(label, *values)

    unit = reports[0].result.unit if reports else "req/s"
    row("retry policy", [r.policy_description for r in reports])
    row(f"usable capacity ({unit})", [_num(r.result.usable_rps) for r in reports])
    row(f"vs {reports[0].variant}" if reports else "vs first", [_moved(first, r.result.usable_rps) for r in reports])
    row(f"first failing ({unit})", [_num(r.result.first_bad_rps) for r in reports])
    row("peak tokens/s", [_num(r.result.peak_tokens_per_s) for r in reports])
    row("cliff ratio", [_pct(r.result.cliff_ratio) for r in reports])
    row("capacity-constrained", [_constrained(r.result.constrained) for r in reports])
    row("max attempts/request", [_max_amplification(r.result.rates) for r in reports])
    return table


def _moved(first: float | None, value: float | None) -> str:
    if first is None or value is None or first == 0:
        return "–"
    return f"{value / first - 1:+.0%}"


def _constrained(value: bool | None) -> str:
    return "–" if value is None else ("yes" if value else "no")


def _max_amplification(rates: Sequence[SettledRate]) -> str:
    values = [s.amplification for r in rates for s in r.pooled.trials if s.amplification is not None]
    return f"{max(values):.2f}" if values else "–"


def sweep_report(outcome: SweepOutcome) -> RenderableType:
    """The whole sweep: a headline, each variant's table and summary, and the comparison."""
    status = outcome.status.value + ("" if outcome.reason is None else f": {outcome.reason}")
    load = (
        "closed-loop clients"
        if outcome.spec.mode is SweepMode.CONCURRENCY
        else f"{outcome.spec.arrival.value} arrivals"
    )
    lines: list[RenderableType] = [
        Text.from_markup(
            f"[bold]{outcome.scenario.name}[/] capacity sweep  [dim]{status}, {outcome.duration_s:.0f}s, "
            f"target {outcome.target_url}, {load}, steps of "
            f"{outcome.spec.step_s:g}s after {outcome.spec.warmup_s:g}s warm-up[/]"
        )
    ]
    warning = short_step_warning(outcome.scenario, outcome.spec)
    if warning is not None:
        lines.append(Text(f"warning: {warning}", style="yellow"))
    mismatch = outcome.workload_mismatch
    if mismatch is not None:
        said = f": the prompts sent are not the sizes the scenario asks for, so this capacity is another's: {mismatch}"
        lines.append(Text.assemble(("⚠ workload_mismatch", "bold yellow"), said))  # the reason is not markup
    spec = outcome.scenario.target.cost
    for report in outcome.reports:
        lines.append(step_table(report))
        lines.extend(capacity_lines(report.result))
        cost = None if spec is None else usable_cost(spec, report.result.usable_rps, report.result.steps)
        if cost is not None and spec is not None:
            lines.append(Text(f"cost: {cost['sentence']}, at {spec.describe()}"))
    if len(outcome.reports) > 1:
        lines.append(comparison(outcome.reports))
    if not outcome.reports:
        lines.append(Text("no step was measured", style="yellow"))
    return Group(*lines)
