"""Terminal output: live progress while a run goes, and scorecards when it is done.

On a terminal progress is one line redrawn in place; otherwise (CI logs, pipes) a plain line every
few seconds, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cliffwatch.domain.outcomes import FAILED, NS_PER_S, OUTCOME_TEXT, Outcome
from cliffwatch.domain.ports import Progress
from cliffwatch.domain.results.result import RunResult
from cliffwatch.domain.results.run_metrics import PhaseStats, merge_phases
from cliffwatch.domain.results.scoring import HIDDEN_OVERLOAD, PRESERVATION
from cliffwatch.domain.scenario.conversations import pooled
from cliffwatch.domain.scenario.scenario import PhaseRole

PLAIN_EVERY_S = 5.0


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _ms(value: float | int | str | None) -> str:
    if not isinstance(value, int | float):
        return "–"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


class ConsoleProgress:
    """A ``ProgressObserver`` for the terminal."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.console = Console(file=stream or sys.stderr, highlight=False)
        if not self.console.is_terminal:  # log files: one line per update, not wrapped at 80 columns
            self.console = Console(file=stream or sys.stderr, highlight=False, width=200)
        self.live: Live | None = None
        self._last_plain = 0.0

    def __enter__(self) -> ConsoleProgress:
        if self.console.is_terminal:
            self.live = Live(Text(""), console=self.console, refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def note(self, message: str) -> None:
        self.console.print(f"[dim]·[/dim] {message}")

    def progress(self, progress: Progress) -> None:
        line = (
            f"{progress.elapsed_s:5.0f}/{progress.total_s:.0f}s  {progress.phase} ({progress.role})  "
            f"offered {progress.offered_per_s:5.1f}/s  on time {_pct(progress.on_time_ratio):>4}  "
            f"tokens {progress.tokens_per_s:6.0f}/s  in flight {progress.in_flight}"
        )
        if self.live is not None:
            self.live.update(Text(line))
            return
        now = time.monotonic()
        if now - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = now
            self.console.print(line)


# The shares a phase row shows: late, then every way an answer failed (not_sent is the generator's own column).
_SHARES = (Outcome.LATE, *FAILED)


def phase_table(result: RunResult) -> Table:
    """Each phase's figures; when the server counted the prompts or the outputs, beside them how far the
    prompts were from the sizes asked (mean absolute) and how far the answers fell short of max_tokens."""
    phases = result.metrics.phases
    sizing = any(p.prompt_error.count or p.output_shortfall.count for p in phases)
    table = Table(title=f"{result.scenario.name}: phases", title_justify="left", show_edge=False)
    for header in ("phase", "offered/s", "on time", "goodput/s", "tokens/s", "p99 TTFT", "p99 e2e",
                   *(OUTCOME_TEXT[o].label for o in _SHARES), "att/req",
                   *(("prompt off", "output short") if sizing else ())):  # fmt: skip
        table.add_column(header, justify="left" if header == "phase" else "right")
    for stats in phases:
        row = _phase_row(stats)
        if sizing:
            prompt, output = stats.prompt_error, stats.output_shortfall
            row.append(f"{prompt.total / prompt.count:.1f}%" if prompt.count else "–")
            row.append(f"{output.total / output.count:.1f}%" if output.count else "–")
        table.add_row(*row)
    return table


def class_table(result: RunResult) -> Table:
    """Each traffic class in each phase, its score beside its name: who lost when the pool was shared."""
    table = Table(title=f"{result.scenario.name}: classes", title_justify="left", show_edge=False)
    for header in ("class", "phase", "offered/s", "on time", "goodput/s", "p99 TTFT", "p99 e2e", "timeout", "shed"):
        table.add_column(header, justify="left" if header in ("class", "phase") else "right")
    scores = {c.name: c for c in result.score.classes}
    for name, metrics in result.metrics.classes:
        own = scores.get(name)
        label = name if own is None or own.value is None else f"{name} ({own.value:.0f}/100)"
        for stats in metrics.phases:
            offered = stats.offered or 1
            table.add_row(
                label, stats.window.name, f"{stats.offered_rps:.1f}", _pct(stats.on_time_ratio),
                f"{stats.goodput_rps:.1f}", _ms(stats.latency["ttft"].quantile(0.99)),
                _ms(stats.latency["e2e"].quantile(0.99)),
                f"{stats.outcomes[Outcome.TIMEOUT] / offered:.0%}" if stats.offered else "–",
                f"{stats.outcomes[Outcome.SHED] / offered:.0%}" if stats.offered else "–",
            )  # fmt: skip
            label = ""
    return table


def _phase_row(stats: PhaseStats) -> list[str]:
    offered = stats.offered or 1

    def share(outcome: Outcome) -> str:
        return f"{stats.outcomes[outcome] / offered:.0%}" if stats.offered else "–"

    return [
        f"{stats.window.name} ({stats.window.role.value})",
        f"{stats.offered_rps:.1f}",
        _pct(stats.on_time_ratio),
        f"{stats.goodput_rps:.1f}",
        f"{stats.tokens_per_s:,.0f}",
        _ms(stats.latency["ttft"].quantile(0.99)),
        _ms(stats.latency["e2e"].quantile(0.99)),
        *(share(outcome) for outcome in _SHARES),
        "–" if stats.amplification is None else f"{stats.amplification:.2f}",
    ]


def scorecard(result: RunResult) -> RenderableType:
    """One run's scorecard: headline, phases, score components and verdicts."""
    score = result.score
    verdict = "[bold green]PASS[/]" if result.passed else "[bold red]FAIL[/]"
    value = "n/a" if score.value is None else f"{score.value:.0f}/100"
    headline = Text.from_markup(
        f"[bold]{result.scenario.name}[/]  score {value} (pass ≥ {score.threshold:g}, v{score.version})  {verdict}"
        f"  [dim]status {result.status.value}, {result.duration_s:.0f}s, target {result.target_url}[/]"
    )
    components = Table(show_edge=False, title="score components", title_justify="left")
    components.add_column("component")
    components.add_column("score", justify="right")
    components.add_column("weight", justify="right")
    components.add_column("evidence", overflow="fold")
    for component in score.components:
        shown = "n/a" if component.value is None else f"{component.value:.2f}"
        components.add_row(component.name, shown, f"{component.weight:.2f}", component.summary)
    lines: list[RenderableType] = [headline, phase_table(result)]
    if result.metrics.classes:
        lines.append(class_table(result))
    if result.metrics.conversations:
        lines.append(conversation_table(result))
    lines.append(components)
    if result.fault_events:
        lines.append(fault_timeline(result))
    for item in result.verdicts():
        lines.append(Text.assemble((f"⚠ {item.name}", "bold yellow"), f": {item.summary}"))  # a reason is not markup
    price, spec = result.price(), result.scenario.target.cost
    if price is not None and spec is not None:
        lines.append(Text(f"cost: {price.sentence()}, at {spec.describe()}"))
    lines.extend(Text(f"note: {note}", style="yellow") for note in result.notes)
    lag = result.generator.lag
    collector = result.generator.collector
    pauses = "" if collector is None else f"longest GC pause {_ms(collector.max_pause_ms)}; "
    workers = result.generator.workers
    busiest = " (the busiest worker)" if workers else ""
    sent_from = ""
    if workers:
        coordinator = result.generator.coordinator_cpu_busy or 0.0
        nodes = {w.node for w in workers if w.node is not None}
        on = f" on {len(nodes)} node{'s' if len(nodes) > 1 else ''}" if nodes else ""
        sent_from = f"{len(workers)} worker process{'es' if len(workers) > 1 else ''}{on} sent it (coordinator CPU "
        sent_from += f"{coordinator:.0%}); "
    lines.append(
        Text(
            f"generator: schedule lag p99 {_ms(lag.get('p99'))}, max {_ms(lag.get('max'))}; "
            f"CPU {result.generator.cpu_busy:.0%} of a core{busiest}; {pauses}{sent_from}"
            + ("LIMITED" if result.generator.limited else "kept its schedule"),
            style="dim",
        )
    )
    return Group(*lines)


def conversation_table(result: RunResult) -> Table:
    """The conversations each phase started and how they ended; goodput above counts their turns."""
    table = Table(show_edge=False, title="conversations (by the phase they started in)", title_justify="left",
                  caption="all on time: every turn on time, of those that ended on their own (cut ones excluded)",
                  caption_justify="left")  # fmt: skip
    for header in ("phase", "started", "completed", "all on time", "failed", "cut by the end", "turns/conv"):
        table.add_column(header, justify="left" if header == "phase" else "right")
    rows = [(p.window.name, c) for p, c in zip(result.metrics.phases, result.metrics.conversations, strict=True)]
    for name, stats in [*rows, ("all", pooled([c for _, c in rows]))]:
        per = f"{stats.turns / stats.started:.2f}" if stats.started else "–"
        table.add_row(name, str(stats.started), str(stats.completed), _pct(stats.on_time_ratio), str(stats.failed),
                      str(stats.cut), per)  # fmt: skip
    return table


def fault_timeline(result: RunResult) -> Table:
    """When each fault went on and off (seconds from the run's start), and whether Toxiproxy confirmed it."""
    table = Table(show_edge=False, title="fault timeline", title_justify="left")
    for header in ("at", "phase", "fault", "", "toxic / problem"):
        table.add_column(header, justify="right" if header == "at" else "left", overflow="fold")
    names = [p.name for p in result.scenario.phases]
    for event in result.fault_events:
        state = event.action if event.ok else f"[bold red]{event.action} FAILED[/]"
        table.add_row(
            f"{event.at_ns / NS_PER_S:.1f} s", names[event.phase], event.fault.describe(), state, event.detail
        )
    return table


def comparison(results: Sequence[RunResult]) -> Table:
    """Several runs side by side: the score, each component, and the figures that tell them apart."""
    table = Table(title="side by side", title_justify="left")
    table.add_column("")
    for result in results:
        table.add_column(result.scenario.name, justify="right")

    def row(label: str, values: Sequence[str]) -> None:
        table.add_row(label, *values)

    row("score", ["n/a" if r.score.value is None else f"{r.score.value:.0f}/100" for r in results])
    row("result", ["PASS" if r.passed else "FAIL" for r in results])
    names = [c.name for c in results[0].score.components] if results else []
    for name in names:
        row(name.replace("_", " "), [_component_value(r, name) for r in results])
    row("hidden overload", [_flag(r, HIDDEN_OVERLOAD) for r in results])
    row("stress on time", [_pct(_stress(r, lambda p: p.on_time_ratio)) for r in results])
    row("baseline on time (reference)", [_pct(_reference(r)) for r in results])
    row("stress tokens/s vs peak", [_tokens_vs_peak(r) for r in results])
    row("stress attempts/request", [_fmt(_stress(r, lambda p: p.amplification), "{:.2f}") for r in results])
    row("generator", ["limited" if r.generator.limited else "kept schedule" for r in results])
    return table


def _component_value(result: RunResult, name: str) -> str:
    for component in result.score.components:
        if component.name == name:
            return "n/a" if component.value is None else f"{component.value:.2f}"
    return "–"


def _flag(result: RunResult, name: str) -> str:
    return next(("RAISED" if f.raised else "no" for f in result.score.flags if f.name == name), "–")


def _tokens_vs_peak(result: RunResult) -> str:
    for flag in result.score.flags:
        share = flag.evidence.get("tokens_share")
        if flag.name == HIDDEN_OVERLOAD and isinstance(share, int | float):
            return f"{share:.0%}"
    return "–"


def _stress(result: RunResult, pick: Callable[[PhaseStats], float | None]) -> float | None:
    pooled = merge_phases(result.metrics.by_role(PhaseRole.STRESS))
    return None if pooled is None else pick(pooled)


def _reference(result: RunResult) -> float | None:
    """The baseline on-time ratio the score compares with (its spill-over left out: see docs/scoring.md)."""
    for component in result.score.components:
        ratio = component.evidence.get("baseline_ratio")
        if component.name == PRESERVATION and isinstance(ratio, int | float):
            return float(ratio)
    return None


def _fmt(value: float | None, pattern: str) -> str:
    return "–" if value is None else pattern.format(value)
