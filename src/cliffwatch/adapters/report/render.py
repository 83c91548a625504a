"""One self-contained HTML page from a run's result document: scripts, styles and data all inlined.

The data travels as JSON in ``<script type="application/json">``, escaped so that no string in it — a
scenario description, a fault detail — can close the element or open another (``<``, ``>`` and ``&`` are
written as ``\\u003c``-style escapes, which JSON.parse reads back unchanged). The page makes no request:
no CDN, no font, no image, so it opens from a file, an e-mail attachment or an air-gapped laptop.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cliffwatch import __version__
from cliffwatch.adapters.report import sections, sweep_sections
from cliffwatch.adapters.report.assets import UPLOT_VERSION, load_assets
from cliffwatch.adapters.report.charts import run_charts
from cliffwatch.adapters.report.readable import when
from cliffwatch.adapters.report.sweep_charts import comparison_frame, variant_frame
from cliffwatch.domain.errors import CliffwatchError

_JSON_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


class ReportInvalid(CliffwatchError):
    """The document cannot be made into a report (it is not a run result)."""

    def __init__(self, reason: str, *, source: str | None = None, kind: str = "run") -> None:
        self.reason = reason
        self.source = source
        self.kind = kind  # what the document claimed to be: "run" or "sweep"
        super().__init__(f"{source + ': ' if source else ''}not a cliffwatch {kind} result: {reason}")


def script_json(value: Any) -> str:
    """``value`` as JSON that is safe inside a ``<script>`` element (non-finite numbers become null)."""
    return json.dumps(_finite(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False).translate(
        _JSON_ESCAPES
    )


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def check_document(document: Any) -> None:
    """Raises ``ReportInvalid`` unless the document has the shape of ``RunResult.to_dict()``."""
    if not isinstance(document, Mapping):
        raise ReportInvalid(f"expected a JSON object, got {type(document).__name__}")
    missing = [key for key in ("run_id", "scenario", "score", "phases") if key not in document]
    if missing:
        raise ReportInvalid("missing " + ", ".join(missing))
    for key, kind in (("scenario", Mapping), ("score", Mapping), ("phases", list)):
        if not isinstance(document[key], kind):
            raise ReportInvalid(f"{key} has the wrong type ({type(document[key]).__name__})")


def is_sweep(document: Any) -> bool:
    """Whether the document is a sweep result (``SweepOutcome.to_dict()``), by its ``kind``."""
    return isinstance(document, Mapping) and document.get("kind") == "sweep"


def check_sweep_document(document: Any) -> None:
    """Raises ``ReportInvalid`` unless the document has the shape of ``SweepOutcome.to_dict()``."""
    if not isinstance(document, Mapping):
        raise ReportInvalid(f"expected a JSON object, got {type(document).__name__}", kind="sweep")
    missing = [key for key in ("kind", "scenario", "spec", "variants") if key not in document]
    if missing:
        raise ReportInvalid("missing " + ", ".join(missing), kind="sweep")
    for key, kind in (("scenario", Mapping), ("spec", Mapping), ("variants", list)):
        if not isinstance(document[key], kind):
            raise ReportInvalid(f"{key} has the wrong type ({type(document[key]).__name__})", kind="sweep")
    for index, variant in enumerate(document["variants"]):
        if not isinstance(variant, Mapping) or not isinstance(variant.get("result"), Mapping):
            raise ReportInvalid(f"variants[{index}] has no result object", kind="sweep")


def check_report_document(document: Any) -> None:
    """Raises ``ReportInvalid`` unless the document is a run result or a sweep result."""
    (check_sweep_document if is_sweep(document) else check_document)(document)


def render_report(document: Mapping[str, Any], timeseries: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The report of a run or a sweep, chosen by the document's ``kind``."""
    return render_sweep_report(document) if is_sweep(document) else render_run_report(document, timeseries)


@dataclass(frozen=True, kw_only=True)
class SweepParts:
    """A sweep report's content without its page: the markup below the header (verdict, comparison, each
    variant's facts, figures, rates and steps, parameters) and the data ``CliffwatchCharts.renderSweep``
    draws into that markup's figures. The report and the dashboard's run page both show exactly these."""

    body: str  # trusted markup: every value from the document escaped
    data: dict[str, Any]


def sweep_parts(document: Mapping[str, Any]) -> SweepParts:
    """The sections and chart data of a sweep's report. Raises ``ReportInvalid`` when it is not a sweep
    result (``SweepOutcome.to_dict()``)."""
    check_sweep_document(document)
    scenario = document["scenario"]
    slo = scenario.get("slo") if isinstance(scenario.get("slo"), Mapping) else {}
    variants = [v for v in document["variants"] if isinstance(v, Mapping)]
    frames = [variant_frame(i, v["result"], slo=slo) for i, v in enumerate(variants)]
    compared = comparison_frame(variants)
    every = frames + ([compared] if compared is not None else [])
    data = {"kind": "sweep", "sweep_id": document.get("sweep_id"), "frames": [f.to_dict() for f in every]}
    body = "".join((
        sweep_sections.headline(document), _marker_note(),
        sweep_sections.comparison(document, [c.to_dict() for c in compared.charts] if compared else []),
        *(sweep_sections.variant_section(i, v, [c.to_dict() for c in f.charts])
          for i, (v, f) in enumerate(zip(variants, frames, strict=True))),
        sweep_sections.parameters(document),
    ))  # fmt: skip
    return SweepParts(body=body, data=data)


def render_sweep_report(document: Mapping[str, Any]) -> str:
    """The HTML report of one sweep: ``document`` is ``SweepOutcome.to_dict()`` (what ``cliffwatch sweep
    --json`` writes, or a stored sweep run's ``result``). Raises ``ReportInvalid`` when it is not one."""
    parts = sweep_parts(document)
    name = str(document["scenario"].get("name", "sweep"))
    return page(title=f"{name} — cliffwatch sweep {document.get('sweep_id', '')}",
                body=sweep_sections.header(document) + parts.body, data=parts.data)  # fmt: skip


def render_status_report(run: Mapping[str, Any]) -> str:
    """The page of a run or sweep that has no result yet (queued or running) or ended without one: what is
    known so far. ``run`` is the API's view of the stored run (its id, kind, scenario, status, times)."""
    facts = [(key, when(run.get(key)) if key.endswith("_at") and run.get(key) else run.get(key))
             for key in ("id", "kind", "scenario", "status", "target_url", "created_at", "started_at", "finished_at",
                         "triggered_by", "reason")]  # fmt: skip
    listed = "".join(
        f"<div><dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd></div>" for k, v in facts if v is not None
    )
    kind = "sweep" if run.get("kind") == "sweep" else "run"
    status = str(run.get("status", ""))
    waiting = status in ("queued", "running")
    note = (
        f"This {kind} is {html.escape(status)}: its report is made from its result, which is recorded when it "
        "ends. Reload this page then."
        if waiting else f"This {kind} ended ({html.escape(status)}) without a result, so there is nothing to chart."
    )  # fmt: skip
    body = (
        f'<header><h1>{html.escape(str(run.get("scenario", kind)))} <span class="muted">{kind}</span></h1>'
        f'<dl class="facts">{listed}</dl></header><section class="verdict sweep" id="verdict">'
        f'<h2><span class="badge">{html.escape(status.upper() or "NO RESULT")}</span> no result yet</h2>'
        f"<p>{note}</p></section>"
    )
    data: dict[str, Any] = {"kind": "run", "run_id": run.get("id"), "x": [], "x_label": "", "bands": [], "charts": []}
    return page(title=f"{run.get('scenario', kind)} — cliffwatch {kind} {run.get('id', '')}", body=body, data=data)


def _marker_note() -> str:
    return (
        '<p class="muted bands-key"><span class="key usable"></span> usable capacity; '
        '<span class="key cliff"></span> the cliff: the first rate that failed the target; '
        '<span class="key fault"></span> hatched: rates where the load generator could not keep its schedule. '
        "Hover a chart to read every series at that rate.</p>"
    )


def render_run_report(document: Mapping[str, Any], timeseries: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The HTML report of one run.

    ``document`` is ``RunResult.to_dict()`` (what ``cliffwatch run --json`` writes, or a stored run's
    ``result``); ``timeseries`` the per-second rows when they are kept apart from it (the service's store),
    else the document's own ``timeseries``. Raises ``ReportInvalid`` when the document is not a run result.
    """
    check_document(document)
    rows = list(timeseries if timeseries is not None else document.get("timeseries") or [])
    scenario = document["scenario"]
    slo = scenario.get("slo") if isinstance(scenario.get("slo"), Mapping) else {}
    duration = document.get("duration_s")
    chart_set = run_charts(
        rows, slo=slo, phases=document["phases"], faults=list(document.get("faults") or []),
        duration_s=float(duration) if isinstance(duration, int | float) else None,
    )  # fmt: skip
    data = {"kind": "run", "run_id": document.get("run_id"), **chart_set.to_dict()}
    figures = "".join(
        f'<figure class="chart" id="chart-{html.escape(c.id)}"><h3>{html.escape(c.title)}</h3>'
        f'<div class="plot" data-chart="{html.escape(c.id)}"></div>'
        f"<figcaption>{html.escape(c.caption)}</figcaption></figure>"
        for c in chart_set.charts
    )
    empty = "" if rows else '<p class="warn">This result has no per-second time series: no charts to draw.</p>'
    body = "".join((
        sections.header(document), sections.verdict(document), sections.components(document),
        f'<section id="charts"><h2>Over time</h2>{_legend_note()}{empty}{figures}</section>',
        sections.phase_results(document), sections.classes(document), sections.conversations(document),
        sections.server(document),
        sections.state_headers(document),
        sections.faults(document),
        sections.scenario(document),
        sections.generator(document),
    ))  # fmt: skip
    name = str(scenario.get("name", "run"))
    return page(title=f"{name} — cliffwatch run {document.get('run_id', '')}", body=body, data=data)


def _legend_note() -> str:
    return (
        '<p class="muted bands-key"><span class="key phase"></span> phases, shaded alternately and named at '
        'the top; <span class="key fault"></span> hatched: a fault was on (from Toxiproxy\'s confirmations). '
        "Hover a chart to read every series at that second.</p>"
    )


def page(*, title: str, body: str, data: Mapping[str, Any]) -> str:
    """The whole document around ``body`` (trusted markup), with every asset and the data inlined."""
    assets = load_assets()
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="cliffwatch {html.escape(__version__)}; uPlot {UPLOT_VERSION}">'
        f"<title>{html.escape(title)}</title>"
        f"<style>{assets.uplot_css}</style><style>{assets.report_css}</style></head>"
        f'<body><main class="report">{body}</main>'
        f"<footer>Made by cliffwatch {html.escape(__version__)} · charts by uPlot {UPLOT_VERSION} (MIT) · "
        "self-contained: no network access needed.</footer>"
        f'<script type="application/json" id="report-data">{script_json(data)}</script>'
        f"<script>{assets.uplot_js}</script><script>{assets.report_js}</script>"
        "</body></html>\n"
    )
