"""A sweep report's text: what was swept, the usable capacity per retry variant with its verdict and evidence,
the settled rates, every trial, the comparison of variants and the sweep's parameters.

Values from the document are escaped (``esc`` and the formatters of ``markup``); missing fields show as "–",
so the report of an interrupted or failed sweep shows what it had measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cliffwatch.adapters.report.markup import DASH, as_list, as_map, esc, ms, num, table
from cliffwatch.adapters.report.readable import duration, when
from cliffwatch.adapters.report.sections import evidence
from cliffwatch.domain.outcomes import FAILED, OUTCOME_TEXT


def pct1(value: Any) -> str:
    """A share as a percentage with one decimal (two where one would round a shortfall up to 100)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return DASH
    text = f"{value * 100:.1f}"
    return f"{value * 100:.2f} %" if text == "100.0" and value < 1 else f"{text} %"


def _share(step: Mapping[str, Any], outcome: str) -> float | None:
    """The share of a step's offered requests that ended in ``outcome``; None where the document has no count
    (a step stored before that class existed)."""
    count, offered = step.get(outcome), step.get("offered")
    if not isinstance(count, int) or not isinstance(offered, int) or offered <= 0:
        return None
    return count / offered


def interval(value: Any) -> str:
    bounds = as_map(value)
    if not bounds:
        return DASH
    return f"{pct1(bounds.get('low')).removesuffix(' %')}–{pct1(bounds.get('high'))}"


def _rate(value: Any, unit: str) -> str:
    return DASH if value is None else f"{num(value)} {esc(unit)}"


def _unit(result: Mapping[str, Any]) -> str:
    return str(result.get("unit") or "req/s")


def rule_outcome(result: Mapping[str, Any]) -> str:
    """The decision rule's outcome in words."""
    constrained = result.get("constrained")
    if constrained is True:
        return "capacity-constrained: latency or timeouts crossed while tokens/s held up; size for completions"
    if constrained is False:
        return "throughput-bound: tokens/s had already fallen where latency or timeouts crossed"
    return "not applicable: no crossing of the SLO or the timeout budget was seen"


def header(doc: Mapping[str, Any]) -> str:
    scenario, target, spec = as_map(doc.get("scenario")), as_map(doc.get("target")), as_map(doc.get("spec"))
    facts = [
        ("sweep", doc.get("sweep_id")), ("status", doc.get("status")), ("target", target.get("url")),
        ("API", target.get("api")), ("mode", spec.get("mode")), ("started", when(doc.get("started_at"))),
        ("finished", when(doc.get("finished_at"))), ("duration", duration(doc.get("duration_s"))),
        ("cliffwatch", doc.get("cliffwatch_version")),
    ]  # fmt: skip
    listed = "".join(f"<div><dt>{esc(k)}</dt><dd>{esc(DASH if v is None else v)}</dd></div>" for k, v in facts)
    return (
        f'<header><h1>{esc(scenario.get("name", "sweep"))} <span class="muted">capacity sweep</span></h1>'
        f'<dl class="facts">{listed}</dl></header>'
    )


def headline(doc: Mapping[str, Any]) -> str:
    """The answer first: each variant's usable capacity and its verdict sentence."""
    variants = [as_map(v) for v in as_list(doc.get("variants"))]
    lines = ['<section class="verdict sweep" id="verdict">']
    if not variants:
        lines.append('<h2><span class="badge">NO RESULT</span> no retry variant finished its search</h2>')
    for variant in variants:
        result = as_map(variant.get("result"))
        usable, unit = result.get("usable_rps"), _unit(result)
        badge = f"usable {num(usable)} {esc(unit)}" if usable is not None else "no usable rate"
        estimate = ", on the point estimate" if result.get("usable_on_point_estimate") else ""
        lines.append(
            f'<h2><span class="badge">{badge}</span> <span class="muted">retry policy '
            f"{esc(variant.get('variant', DASH))}: attainment CI {interval(result.get('usable_interval'))}"
            f"{estimate}</span></h2><p>{esc(result.get('verdict', ''))}</p>"
        )
        cost = as_map(variant.get("cost"))
        if cost:
            lines.append(
                f'<p class="sweep-cost">Cost: {esc(cost.get("sentence"))}, at {esc(cost.get("described"))}.</p>'
            )
    lines.append(warnings(doc))
    if doc.get("provisional") is True:
        lines.append(provisional_note(doc))
    elif doc.get("status") not in (None, "succeeded"):
        reason = doc.get("reason") or "no reason recorded"
        lines.append(f'<p class="warn">The sweep {esc(doc.get("status"))}: {esc(reason)}. What it measured before '
                     "is below.</p>")  # fmt: skip
    lines.append("</section>")
    return "".join(lines)


def warnings(doc: Mapping[str, Any]) -> str:
    """What the sweep as asked was warned about (``sweep_plan.sweep_warnings``: steps too short for its SLO,
    say), as ``cliffwatch sweep`` warns under its headline; nothing for a document without any."""
    found = "".join(f'<p class="warn sweep-warning">Warning: {esc(w)}</p>' for w in as_list(doc.get("warnings")))
    if doc.get("workload_mismatch") is True:
        found += ('<p class="warn" id="workload-mismatch">Workload mismatch: the prompts sent are not the sizes the '
                  "scenario asks for, so this capacity is another workload's: "
                  f"{esc(doc.get('workload_mismatch_reason'))}.</p>")  # fmt: skip
    return found


def provisional_note(doc: Mapping[str, Any]) -> str:
    """What a provisional document (a running sweep's steps so far) is, and what it is not yet."""
    steps = sum(len(as_list(as_map(as_map(v).get("result")).get("steps"))) for v in as_list(doc.get("variants")))
    status = str(doc.get("status") or "running")
    if status == "running":
        return (
            f'<p class="warn provisional" id="provisional-note">Provisional: the sweep is still running. '
            f"{steps} step(s) measured so far; the capacity, verdict, charts and tables below are those of these "
            "steps and change as the search goes on.</p>"
        )
    reason = doc.get("reason") or "no reason recorded"
    return (
        f'<p class="warn provisional" id="provisional-note">The sweep {esc(status)}: {esc(reason)}. Below are the '
        f"{steps} step(s) recorded while it ran; its final summary was never written.</p>"
    )


def figures(charts: Sequence[Mapping[str, Any]]) -> str:
    return "".join(
        f'<figure class="chart" id="chart-{esc(c["id"])}"><h3>{esc(c["title"])}</h3>'
        f'<div class="plot" data-chart="{esc(c["id"])}"></div>'
        f"<figcaption>{esc(c['caption'])}</figcaption></figure>"
        for c in charts
    )


def variant_facts(result: Mapping[str, Any]) -> str:
    unit = _unit(result)
    usable = _rate(result.get("usable_rps"), unit)
    if result.get("usable_rps") is not None:
        usable += f" (attainment CI {interval(result.get('usable_interval'))}"
        usable += ", on the point estimate)" if result.get("usable_on_point_estimate") else ")"
    peak_rate = result.get("peak_tokens_rate")
    facts = [
        ("usable capacity", usable),
        ("cliff (first bad rate)", _rate(result.get("first_bad_rps"), unit)),
        ("peak output tokens/s", f"{num(result.get('peak_tokens_per_s'))}"
         + (f" at {_rate(peak_rate, unit)}" if peak_rate is not None else "")),
        ("peak completions/s", num(result.get("peak_completions_per_s"))),
        ("cliff ratio (usable ÷ peak-tokens rate)", num(result.get("cliff_ratio"))),
        ("attainment target", pct1(result.get("target"))),
        ("decision rule", esc(rule_outcome(result))),
        ("finished because", esc(result.get("finished_because", DASH))),
    ]  # fmt: skip
    luck = as_map(result.get("luck_correction"))
    if luck.get("steps"):
        applied = "corrected" if luck.get("applied") else "not corrected"
        facts.append(("arrival luck", esc(f"{applied}: {luck.get('reason', DASH)}")))
    for pair in map(as_map, as_list(as_map(result.get("target_drift")).get("disagreements"))):
        facts.append(("target drift", f'<span class="flag">{esc(drift_text(pair, unit))}</span>'))
    for shift in map(as_map, as_list(as_map(result.get("target_drift")).get("latency"))):
        facts.append(("target drift", f'<span class="flag">{esc(shift_text(shift, unit))}</span>'))
    listed = "".join(f"<div><dt>{esc(k)}</dt><dd>{v}</dd></div>" for k, v in facts)
    return f'<dl class="facts sweep-facts">{listed}</dl>'


def _which(trial: Mapping[str, Any]) -> str:
    """A drift reading's trial, its step and when it ran: "the recheck (step 3, at 12.5 s)"."""
    what = "the recheck" if trial.get("recheck") else f"trial {num(trial.get('trial'))}"
    started = trial.get("started_s")
    when = f", at {num(started)} s" if isinstance(started, int | float) else ""
    step = trial.get("step_index")
    where = f"step {step + 1}" if isinstance(step, int) else DASH
    return f"{what} ({where}{when})"


def drift_text(pair: Mapping[str, Any], unit: str) -> str:
    """Two disagreeing trials (``target_drift.disagreements[]``), when they ran and how far apart, unescaped."""
    readings = [f"{_which(trial)} {pct1(trial.get('on_time_share'))} on time"
                for trial in map(as_map, as_list(pair.get("trials")))]  # fmt: skip
    change, median = pair.get("share_change"), pair.get("median_e2e_change_ms")
    apart = f"{change * 100:+.1f} points" if isinstance(change, int | float) else DASH
    if isinstance(median, int | float):
        apart += f", median e2e {median:+,.0f} ms"
    return f"{num(pair.get('rate'))} {unit}: {', '.join(readings)}: {apart}"


def shift_text(shift: Mapping[str, Any], unit: str) -> str:
    """A recheck whose median latency moved (``target_drift.latency[]``): both medians, when, how far apart,
    unescaped."""
    readings = [f"{num(trial.get('median_ms'))} ms in {_which(trial)}"
                for trial in map(as_map, as_list(shift.get("trials")))]  # fmt: skip
    change = shift.get("change")
    apart = f"{change * 100:+.0f} %" if isinstance(change, int | float) else DASH
    name = "TTFT" if shift.get("signal") == "ttft" else str(shift.get("signal") or DASH)
    return f"{num(shift.get('rate'))} {unit}: median {name} {', '.join(readings)}: {apart}"


def _verdict_cell(rate: Mapping[str, Any]) -> str:
    verdict = str(rate.get("verdict") or DASH)
    text = "invalid (generator)" if verdict == "invalid" else verdict
    flag = ' <span class="flag">on point estimate</span>' if rate.get("on_point_estimate") else ""
    if rate.get("on_growth"):
        flag += ' <span class="flag">queue kept growing</span>'
    slowest = as_map(rate.get("slowest"))
    if slowest:
        flag += f' <span class="flag">target drifted: judged on trial {num(slowest.get("trial"))}</span>'
    return f'<span class="v-{esc(verdict)}">{esc(text)}</span>{flag}'


def _queue_cell(step: Mapping[str, Any]) -> str:
    """What the growth check saw in a step: the overload when its queue grew, "flat" when it did not, and
    whether it was measured over the extended window; "–" when not checked."""
    growth = as_map(step.get("growth"))
    extended = " (extended)" if step.get("extended") else ""
    if not growth:
        return DASH
    for key in ("queue", "latency"):
        trend = as_map(growth.get(key))
        if trend.get("growing") is True:
            what = "server queue" if key == "queue" else "wait"
            overload = trend.get("overload")
            shown = pct1(overload) if isinstance(overload, int | float) else DASH
            return f'<span class="flag">{what} grew: {shown} overload</span>{extended}'
    return f"flat{extended}"


def _server_queue_cell(step: Mapping[str, Any]) -> str:
    waiting = as_map(as_map(step.get("server")).get("waiting"))
    if not waiting:
        return DASH
    return f"{num(waiting.get('first'), 1)} → {num(waiting.get('max'), 1)}"


def _classes_cell(step: Mapping[str, Any]) -> str:
    """Each traffic class's attainment in the step against its own SLO: "chat 98.0 % · batch 71.2 %"."""
    classes = as_map(step.get("classes"))
    return " · ".join(f"{esc(name)} {pct1(as_map(c).get('attainment'))}" for name, c in classes.items()) or DASH


def rates_table(result: Mapping[str, Any]) -> str:
    unit = _unit(result)
    rows = []
    rates = sorted(map(as_map, as_list(result.get("rates"))), key=lambda r: r.get("rate") or 0)
    corrected = any(as_map(r.get("pooled")).get("corrected_attainment") is not None for r in rates)
    for rate in rates:
        pooled = as_map(rate.get("pooled"))
        rows.append((
            f"{num(rate.get('rate'))}", num(pooled.get("trials")), num(pooled.get("offered")),
            pct1(pooled.get("attainment")), *((pct1(pooled.get("corrected_attainment")),) if corrected else ()),
            interval(pooled.get("interval")), num(pooled.get("tokens_per_s"), 1),
            num(pooled.get("completions_per_s"), 2), pct1(pooled.get("timeout_share")),
            ms(pooled.get("p99_e2e_ms")), _verdict_cell(rate),
        ))  # fmt: skip
    head = (f"rate ({esc(unit)})", "trials", "offered", "attainment", *(("luck-corrected",) if corrected else ()),
            "CI", "tokens/s", "completions/s", "timeouts", "p99 e2e (worst)", "verdict")  # fmt: skip
    note = ("<p class='muted'><em>luck-corrected</em>: the attainment corrected for the luck of the rate's Poisson "
            "draws by a reference queue fed the same arrivals; the CI and the verdict are of it (docs/sweep.md, "
            "\"Arrival luck\").</p>") if corrected else ""  # fmt: skip
    return f"<h3>Rates, trials pooled</h3>{table(head, rows, cls='numbers rates')}{note}"


def _drain_cell(step: Mapping[str, Any]) -> str:
    """How long the target took to be idle after the step, and how that was judged (a flag when it was not)."""
    drain = as_map(step.get("drain"))
    if not drain:
        return "–"
    seconds = f"{num(drain.get('seconds'), 1)} s ({esc(drain.get('by'))})"
    if drain.get("drained") is False:
        return f'<span class="flag">not drained</span> {seconds}: {esc(drain.get("detail"))}'
    return seconds


def steps_table(result: Mapping[str, Any]) -> str:
    """Every trial in the order measured, with its own figures and the flags that qualify it."""
    unit = _unit(result)
    settled = {r.get("rate"): r for r in map(as_map, as_list(result.get("rates")))}
    rows = []
    steps = list(map(as_map, as_list(result.get("steps"))))
    by_class = any(step.get("classes") for step in steps)
    for step in steps:
        ttft, e2e = as_map(step.get("ttft_ms")), as_map(step.get("e2e_ms"))
        limited = step.get("generator_limited") is True
        reasons = esc("; ".join(map(str, as_list(step.get("generator_reasons")))))
        generator = f'<span class="flag">invalid (generator)</span> {reasons}' if limited else "ok"
        trial = num(step.get("trial")) + (' <span class="flag">recheck</span>' if step.get("recheck") else "")
        rows.append((
            num(step.get("rate")), trial, num(step.get("offered")), num(step.get("sent_rate"), 2),
            num(step.get("goodput_rps"), 2), pct1(step.get("attainment")), interval(step.get("interval")),
            num(step.get("tokens_per_s"), 1), num(step.get("completions_per_s"), 2), ms(ttft.get("p50")),
            ms(ttft.get("p99")), ms(e2e.get("p50")), ms(e2e.get("p99")),
            *(pct1(_share(step, o.value)) for o in FAILED), num(step.get("amplification"), 2),
            generator, _queue_cell(step), _server_queue_cell(step), _drain_cell(step),
            *((_classes_cell(step),) if by_class else ()),
            _verdict_cell(as_map(settled.get(step.get("rate")))),
        ))  # fmt: skip
    head = (f"rate ({esc(unit)})", "trial", "offered", "sent/s", "goodput/s", "attainment", "CI", "tokens/s",
            "completions/s", "TTFT p50", "TTFT p99", "e2e p50", "e2e p99", *(OUTCOME_TEXT[o].label for o in FAILED),
            "attempts per request", "generator", "queue in the step", "server queue (first → max)",
            "drained after", *(("on time by class",) if by_class else ()), "rate verdict")  # fmt: skip
    return (
        "<h3>Steps: every trial</h3><p class='muted'>A rate's verdict is settled on its pooled trials; "
        "<em>on point estimate</em>: no further trial could clear the interval, so the pooled attainment was "
        "compared with the target directly; <em>invalid (generator)</em>: the load generator could not keep "
        "its schedule, so the step says nothing about the target; <em>queue in the step</em>: whether the queue "
        "grew within the step (docs/sweep.md), and by what overload; a step whose queue grew is measured again "
        "over the <em>extended</em> window, and a rate whose queue still grows there is bad, <em>queue kept "
        "growing</em>, whatever its attainment; <em>recheck</em>: the first rate measured again at the end, to "
        "see whether the target's speed drifted (its on-time share and its median latency against the first "
        "reading's); <em>target drifted</em>: trials at the rate disagreed beyond their intervals, so it is judged "
        "on its slower trial alone."
        + (
            " <em>On time by class</em>: each traffic class's own attainment against its own SLO; the step is "
            "judged on all of them together, at the scenario's traffic mix."
            if by_class
            else ""
        )
        + f"</p>{table(head, rows, cls='numbers steps')}"
    )


def variant_section(index: int, variant: Mapping[str, Any], charts: Sequence[Mapping[str, Any]]) -> str:
    result = as_map(variant.get("result"))
    return (
        f'<section class="variant" id="variant-{index}"><h2>Retry policy {esc(variant.get("variant", DASH))} '
        f'<span class="muted">{esc(variant.get("retry", ""))}</span></h2>'
        f"<p>{esc(result.get('verdict', ''))}</p>{variant_facts(result)}"
        f"{evidence(as_map(result.get('evidence')))}{figures(charts)}{rates_table(result)}{steps_table(result)}"
        "</section>"
    )


def comparison(doc: Mapping[str, Any], charts: Sequence[Mapping[str, Any]]) -> str:
    """How each retry policy moved the cliff (only with several variants)."""
    variants = [as_map(v) for v in as_list(doc.get("variants"))]
    if len(variants) < 2:
        return ""
    rows = []
    for variant in variants:
        result = as_map(variant.get("result"))
        unit = _unit(result)
        rows.append((
            f"<strong>{esc(variant.get('variant'))}</strong>", esc(variant.get("retry", DASH)),
            _rate(result.get("usable_rps"), unit), interval(result.get("usable_interval")),
            _rate(result.get("first_bad_rps"), unit), num(result.get("peak_tokens_per_s"), 1),
            num(result.get("cliff_ratio")), esc(rule_outcome(result).split(":")[0]), esc(result.get("verdict", "")),
        ))  # fmt: skip
    head = ("variant", "retry policy", "usable", "attainment CI", "cliff (first bad)", "peak tokens/s", "cliff ratio",
            "decision rule", "verdict")  # fmt: skip
    return (
        f'<section id="comparison"><h2>Retry policies compared</h2>{table(head, rows, cls="comparison")}'
        f"{figures(charts)}</section>"
    )


def parameters(doc: Mapping[str, Any]) -> str:
    spec, scenario = as_map(doc.get("spec")), as_map(doc.get("scenario"))
    slo = as_map(scenario.get("slo"))
    slo_text = ", ".join(
        f"{label} ≤ {ms(slo.get(key))}"
        for key, label in (
            ("ttft_ms", "TTFT"),
            ("tpot_ms", "TPOT"),
            ("e2e_ms", "end-to-end"),
            ("timeout_ms", "timeout"),
        )
        if slo.get(key) is not None
    )
    facts = {
        **{k: v for k, v in spec.items() if k != "variants"},
        "variants": ", ".join(map(str, as_list(spec.get("variants")))),
    }
    return (
        f'<section id="parameters"><h2>Sweep parameters</h2><p>{esc(scenario.get("description", "")).strip()}</p>'
        f'<dl class="facts"><div><dt>SLO</dt><dd>{esc(slo_text or DASH)}</dd></div>'
        f"<div><dt>seed</dt><dd>{esc(scenario.get('seed', DASH))}</dd></div>"
        f"<div><dt>scenario hash</dt><dd><code>{esc(str(scenario.get('content_hash', DASH))[:12])}</code></dd></div>"
        f"</dl>{evidence(facts)}</section>"
    )
