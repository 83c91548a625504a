"""A game day's one HTML page: the summary table on top, each experiment's own report below.

Each experiment's report is the page ``cliffwatch report`` makes of its run, whole (its charts included),
embedded as a sandboxed ``iframe`` (``srcdoc``): the reports stay exactly what a single run's are, each with its
own charts and script, and the page stays one self-contained file with no network access. An experiment that
did not run has its reason instead.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from cliffwatch.adapters.report.render import page, render_run_report

_STATE_CLASS = {"held": "ok", "broken": "warn", "failed": "warn", "stopped": "muted", "not run": "muted"}


def render_gameday_report(document: Mapping[str, Any]) -> str:
    """The page of a ``cliffwatch gameday --json`` document (``kind: gameday``)."""
    experiments = [e for e in document.get("experiments") or [] if isinstance(e, Mapping)]
    name = str(document.get("name", "gameday"))
    rows = "".join(
        f'<tr><td><a href="#experiment-{index}">{_e(e.get("name"))}</a></td><td>{_e(e.get("hypothesis"))}</td>'
        f'<td class="{_STATE_CLASS.get(str(e.get("state")), "")}">{_e(e.get("state"))}</td>'
        f"<td>{_e('; '.join(map(str, e.get('broken_because') or [])) or e.get('error') or '')}</td>"
        f"<td>{_score(e)}</td></tr>"
        for index, e in enumerate(experiments)
    )
    summary = (
        f'<section class="verdict" id="verdict"><h1>{_e(name)}: game day</h1><p>{_e(document.get("summary"))}</p>'
        '<table id="gameday-summary"><thead><tr><th>experiment</th><th>hypothesis</th><th>outcome</th>'
        f"<th>why</th><th>score</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )
    body = summary + "".join(_experiment(index, e) for index, e in enumerate(experiments))
    return page(title=f"{name} — cliffwatch game day", body=body, data={"kind": "gameday", "x": [], "charts": []})


def _experiment(index: int, experiment: Mapping[str, Any]) -> str:
    head = f'<section class="experiment" id="experiment-{index}"><h2>{_e(experiment.get("name"))}</h2>'
    result = experiment.get("result")
    if not isinstance(result, Mapping):
        reason = experiment.get("error") or "not run: the game day stopped before it"
        return f'{head}<p class="warn">{_e(reason)}</p></section>'
    embedded = html.escape(render_run_report(result), quote=True)
    return (f'{head}<iframe class="experiment-report" title="{_e(experiment.get("name"))}: its run\'s report" '
            f'sandbox="allow-scripts" style="width:100%;height:90vh;border:0" srcdoc="{embedded}"></iframe>'
            "</section>")  # fmt: skip


def _score(experiment: Mapping[str, Any]) -> str:
    result = experiment.get("result")
    score = result.get("score") if isinstance(result, Mapping) else None
    value = score.get("value") if isinstance(score, Mapping) else None
    return f"{value:.1f}" if isinstance(value, int | float) else "–"


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))
