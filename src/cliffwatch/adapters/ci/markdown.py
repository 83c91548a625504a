"""A run's or a sweep's scorecard in GitHub-flavoured Markdown, for a job summary: the headline, the figures
(phases and score components of a run; each variant's usable capacity of a sweep), the verdicts and the checks'
count.

Every text that came from the run (a summary sentence, a target's error, a scenario's name) is escaped
(``_text``): it shows as written, never as markup, a link or HTML.
"""

from __future__ import annotations

from collections.abc import Sequence

from cliffwatch.domain.capacity.capacity_result import num
from cliffwatch.domain.ci.checks import CheckStatus, CiReport
from cliffwatch.domain.results.result import RunResult
from cliffwatch.services.sweep import SweepOutcome

# What makes inline markup in a line (a heading or a list needs the line's start, which the texts never are):
# emphasis, code, links, strike-through, a table's cell border, and HTML.
_MARKUP = str.maketrans({c: "\\" + c for c in "\\`*_[]|~"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;"})


def run_summary(result: RunResult, report: CiReport) -> str:
    """The run's scorecard: verdict and score, its phases, its score components, its verdicts and checks."""
    score = result.score
    value = "no score" if score.value is None else f"score {score.value:g}"
    mark = "✅ passed" if result.passed else "❌ failed"
    lines = [
        f"### {mark}: {_text(result.scenario.name)}, {value} (pass mark {score.threshold:g})",
        "",
        _text(score.summary),
        "",
        f"Target {_text(result.target_url)}, run {_text(result.run_id)}, {result.status.value}, "
        f"{result.duration_s:.0f} s.",
        "",
        _table(("phase", "role", "offered", "sent", "on time", "goodput req/s", "p99 e2e ms"),
               [(p.window.name, p.window.role.value, str(p.offered), str(p.sent), _share(p.on_time_ratio),
                 f"{p.goodput_rps:.2f}", _ms(p.latency["e2e"].quantile(0.99))) for p in result.metrics.phases]),
        "",
        _table(("component", "value", "weight", "summary"),
               [(c.name, "n/a" if c.value is None else f"{c.value * 100:.1f}", f"{c.weight:g}", c.summary)
                for c in score.components]),
    ]  # fmt: skip
    verdicts = result.verdicts()
    if verdicts:
        lines += ["", "**Verdicts**", ""] + [f"- **{_text(v.name)}**: {_text(v.summary)}" for v in verdicts]
    return "\n".join([*lines, "", _checks_line(report), ""])


def sweep_summary(outcome: SweepOutcome, report: CiReport) -> str:
    """The sweep's headline and each variant's usable capacity and verdict, with its warnings and checks."""
    status = outcome.status.value + ("" if outcome.reason is None else f": {outcome.reason}")
    where = f"Target {_text(outcome.target_url)}, sweep {_text(outcome.sweep_id)}, {outcome.duration_s:.0f} s."
    lines = [f"### {_text(outcome.scenario.name)} capacity sweep: {_text(status)}", "", where]
    if outcome.workload_mismatch is not None:
        lines += ["", f"⚠️ **workload_mismatch**: {_text(outcome.workload_mismatch)}"]
    rows = []
    for variant in outcome.reports:
        result = variant.result
        usable = "none" if result.usable_rps is None else f"{num(result.usable_rps)} {result.unit}"
        first_bad = "–" if result.first_bad_rps is None else f"{num(result.first_bad_rps)} {result.unit}"
        drift = "drifted" if result.target_drift is not None else "steady"
        rows.append((variant.variant, usable, first_bad, drift, result.verdict))
    lines += ["", _table(("variant", "usable capacity", "first failing", "target speed", "verdict"), rows)]
    if not outcome.reports:
        lines += ["", "No step was measured."]
    return "\n".join([*lines, "", _checks_line(report), ""])


def _checks_line(report: CiReport) -> str:
    counts = dict.fromkeys(CheckStatus, 0)
    for suite in report.suites:
        for check in suite.checks:
            counts[check.status] += 1
    said = ", ".join(f"{counts[s]} {s.value}" for s in CheckStatus)
    problems = [f"- {a.level}: **{_text(a.title)}**: {_text(a.message)}" for a in report.annotations()]
    return "\n".join([f"Checks: {said}.", *(["", *problems] if problems else [])])


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(_text(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_text(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _text(text: str) -> str:
    """``text`` on one line, as written: Markdown's punctuation escaped, HTML's characters as entities."""
    return " ".join(text.split()).translate(_MARKUP)


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"
