"""The report's text: verdict, score with its components and evidence, scenario, phases and faults.

Every value from the document is escaped here (``_e``); markup is only ever built from our own strings.
Missing fields show as "–" rather than failing: a report of an interrupted or older run is still a report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cliffwatch.adapters.report.markup import DASH
from cliffwatch.adapters.report.markup import as_list as _list
from cliffwatch.adapters.report.markup import as_map as _map
from cliffwatch.adapters.report.markup import esc as _e
from cliffwatch.adapters.report.markup import ms as _ms
from cliffwatch.adapters.report.markup import num as _num
from cliffwatch.adapters.report.markup import pct as _pct
from cliffwatch.adapters.report.markup import table as _table
from cliffwatch.adapters.report.readable import duration, when
from cliffwatch.domain.outcomes import NOT_ON_TIME, OUTCOME_TEXT


def evidence(items: Mapping[str, Any]) -> str:
    """The facts a component or flag was computed from, as a compact definition list."""
    if not items:
        return ""
    pairs = "".join(f"<div><dt>{_e(k)}</dt><dd>{_num(v)}</dd></div>" for k, v in items.items())
    return f'<dl class="evidence">{pairs}</dl>'


def header(doc: Mapping[str, Any]) -> str:
    scenario, target = _map(doc.get("scenario")), _map(doc.get("target"))
    facts = [
        ("run", doc.get("run_id")), ("status", doc.get("status")), ("target", target.get("url")),
        ("API", target.get("api")), ("started", when(doc.get("started_at"))),
        ("finished", when(doc.get("finished_at"))), ("duration", duration(doc.get("duration_s"))),
        ("cliffwatch", doc.get("cliffwatch_version")),
    ]  # fmt: skip
    listed = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(DASH if v is None else v)}</dd></div>" for k, v in facts)
    return f'<header><h1>{_e(scenario.get("name", "run"))}</h1><dl class="facts">{listed}</dl></header>'


def verdict(doc: Mapping[str, Any]) -> str:
    score = _map(doc.get("score"))
    passed = doc.get("passed") is True
    value = score.get("value")
    shown = DASH if value is None else f"{_num(value, 1)}"
    threshold = _num(score.get("threshold"), 1)
    version = doc.get("score_version", score.get("version", DASH))
    cls, word = ("pass", "PASS") if passed else ("fail", "FAIL")
    lines = [
        f'<section class="verdict {cls}" id="verdict"><h2><span class="badge">{word}</span> '
        f'score <span class="score">{shown}</span>/100 <span class="muted">(pass ≥ {threshold}, '
        f"score formulas v{_e(version)})</span></h2>",
        f"<p>{_e(score.get('summary', ''))}</p>",
    ]
    if doc.get("abort_reason"):
        lines.append(f'<p class="warn">Stopped early: {_e(doc["abort_reason"])}</p>')
    verdicts = [_map(v) for v in _list(doc.get("verdicts"))]
    if verdicts:
        items = "".join(f"<li><strong>{_e(v.get('name'))}</strong>: {_e(v.get('summary'))}</li>" for v in verdicts)
        lines.append(f'<ul class="verdicts">{items}</ul>')
    lines.append("</section>")
    return "".join(lines)


def components(doc: Mapping[str, Any]) -> str:
    score = _map(doc.get("score"))
    rows = []
    for comp in map(_map, _list(score.get("components"))):
        value = comp.get("value")
        rows.append((
            f"<strong>{_e(comp.get('name'))}</strong>", DASH if value is None else f"{_num(value)}",
            _num(comp.get("weight")), _e(comp.get("summary", "")), evidence(_map(comp.get("evidence"))),
        ))  # fmt: skip
    for flag in map(_map, _list(score.get("flags"))):
        raised = flag.get("raised") is True
        rows.append((
            f"<strong>{_e(flag.get('name'))}</strong> (flag)", "raised" if raised else "not raised", DASH,
            _e(flag.get("summary", "")), evidence(_map(flag.get("evidence"))),
        ))  # fmt: skip
    table = _table(("component", "value (0–1)", "weight", "what it means", "evidence"), rows, cls="components")
    return f'<section id="score"><h2>Score components</h2>{table}</section>'


def scenario(doc: Mapping[str, Any]) -> str:
    spec = _map(doc.get("scenario"))
    slo = _map(spec.get("slo"))
    slo_text = ", ".join(
        f"{label} ≤ {_ms(slo.get(key))}"
        for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "end-to-end"))
        if slo.get(key) is not None
    )
    facts = (
        f"<p>{_e(spec.get('description', '')).strip()}</p>"
        f'<dl class="facts"><div><dt>SLO</dt><dd>{_e(slo_text or DASH)}</dd></div>'
        f"<div><dt>timeout</dt><dd>{_ms(slo.get('timeout_ms'))}</dd></div>"
        f"<div><dt>seed</dt><dd>{_e(spec.get('seed', DASH))}</dd></div>"
        f"<div><dt>scenario hash</dt><dd><code>{_e(str(spec.get('content_hash', DASH))[:12])}</code></dd></div></dl>"
    )
    rows = [
        (_e(p.get("name")), _e(p.get("role")), f"{_num(p.get('duration_s'), 1)} s", _e(p.get("arrival", DASH)),
         _e(p.get("retry", DASH)), _e(", ".join(map(str, _list(p.get("faults")))) or DASH))
        for p in map(_map, _list(spec.get("phases")))
    ]  # fmt: skip
    table = _table(("phase", "role", "duration", "arrivals", "retries", "faults"), rows)
    return f'<section id="scenario"><h2>Scenario</h2>{facts}{table}</section>'


def _share_of(total: Any) -> Callable[[Any], str]:
    def share(count: Any) -> str:
        if isinstance(count, int) and isinstance(total, int) and total > 0:
            return _pct(count / total)
        return DASH

    return share


SIZE_HEADERS = ("prompt off the asked size (server count)", "output short of max_tokens")


def phase_results(doc: Mapping[str, Any]) -> str:
    phases = [_map(p) for p in _list(doc.get("phases"))]
    counted = any(p.get("prompt_tokens_error") or p.get("output_shortfall") for p in phases)
    rows = []
    for phase in phases:
        outcomes, latency = _map(phase.get("outcomes")), _map(phase.get("latency_ms"))
        offered = phase.get("offered")
        share = _share_of(offered)
        sizes: tuple[str, ...] = ()
        if counted:
            prompt, output = _map(phase.get("prompt_tokens_error")), _map(phase.get("output_shortfall"))
            sizes = (_percent(prompt.get("mean_abs_pct")), _percent(output.get("mean_pct")))
        rows.append((
            f"{_e(phase.get('name'))} <span class='muted'>({_e(phase.get('role'))})</span>",
            _num(phase.get("offered_rps"), 1), _pct(phase.get("on_time_ratio")), _num(phase.get("goodput_rps"), 2),
            _num(phase.get("output_tokens_per_s"), 0), _ms(_map(latency.get("ttft")).get("p99")),
            _ms(_map(latency.get("e2e")).get("p99")), *(share(outcomes.get(o.value)) for o in NOT_ON_TIME),
            _num(phase.get("amplification"), 2), *sizes,
        ))  # fmt: skip
    head = ("phase", "offered/s", "on time", "goodput/s", "tokens/s", "p99 TTFT", "p99 e2e",
            *(OUTCOME_TEXT[o].label for o in NOT_ON_TIME), "attempts per request",
            *(SIZE_HEADERS if counted else ()))  # fmt: skip
    table = _table(head, rows, cls="numbers")
    return f'<section id="phases"><h2>Phases</h2>{table}{_prompt_sizing(doc)}{_cost(doc)}</section>'


def _cost(doc: Mapping[str, Any]) -> str:
    """What the run's on-time work cost (``target.cost``), in one line; nothing without a cost."""
    cost = _map(doc.get("cost"))
    if not cost:
        return ""
    return f'<p id="cost">Cost: {_e(cost.get("sentence"))}, at {_e(cost.get("described"))}.</p>'


def _percent(value: Any) -> str:
    return f"{value:.1f} %" if isinstance(value, int | float) else DASH


def _prompt_sizing(doc: Mapping[str, Any]) -> str:
    """How the prompts were sized and how far the server counted them from the sizes asked, in one line; in
    the warning style when the run cannot vouch for its workload (``workload_mismatch``)."""
    sizing = _map(doc.get("prompt_tokens"))
    if not sizing:
        return ""
    error = _map(sizing.get("error"))
    text = f"Prompts sized by {sizing.get('source')}"
    if sizing.get("detail"):
        text += f" ({sizing.get('detail')})"
    if error:
        text += (f"; the server counted them {_percent(error.get('mean_abs_pct'))} off the sizes asked on average "
                 f"(p99 {_percent(error.get('p99_abs_pct'))}, {error.get('answers')} answers)")  # fmt: skip
    mismatch = doc.get("workload_mismatch") is True
    if mismatch:
        text += f". Workload mismatch: {doc.get('workload_mismatch_reason')}"
    return f'<p class="{"warn" if mismatch else "muted"}" id="prompt-sizing">{_e(text)}.</p>'


def generator(doc: Mapping[str, Any]) -> str:
    gen = _map(doc.get("generator"))
    if not gen:
        return ""
    limited = gen.get("generator_limited") is True
    text = "could not keep its schedule: " + "; ".join(map(str, _list(gen.get("reasons")))) if limited else (
        "kept its schedule")  # fmt: skip
    lag = _map(gen.get("schedule_lag_ms"))
    facts = {
        "schedule lag p99 (ms)": lag.get("p99"),
        "schedule lag max (ms)": lag.get("max"),
        "longest event-loop stall (ms)": gen.get("max_event_loop_stall_ms"),
        "CPU (share of a core)": gen.get("cpu_busy"),
        "not sent (in-flight cap)": gen.get("overflow_not_sent"),
        "attempts out of time before leaving the client": gen.get("attempts_not_sent"),
        "… of them waiting for a pooled connection": gen.get("attempts_not_sent_pool_full"),
    }
    collector = _map(gen.get("gc"))  # absent from results stored before it was measured
    if collector:
        counts = _list(collector.get("collections"))
        facts["garbage collections (young / middle / full)"] = " / ".join(map(str, counts)) or None
        facts["longest garbage-collection pause (ms)"] = collector.get("max_pause_ms")
    if gen.get("coordinator_cpu_busy") is not None:
        facts["coordinator CPU (share of a core)"] = gen.get("coordinator_cpu_busy")
    cls = "warn" if limited else ""
    return (
        f'<section id="generator"><h2>Load generator</h2><p class="{cls}">The generator {_e(text)}.</p>'
        f"{evidence(facts)}{_workers(_list(gen.get('workers')), _list(gen.get('nodes')))}</section>"
    )


def _workers(workers: Sequence[Any], nodes: Sequence[Any]) -> str:
    """What each worker process sent (``client.workers``), and each node when they ran on a cluster's (Ray);
    nothing for a run sent from its own process."""
    if not workers:
        return ""
    remote = any(_map(w).get("node") for w in workers)
    rows = []
    for worker in map(_map, workers):
        index = worker.get("index")
        where = (_e(worker.get("node") or DASH), _num(worker.get("clock_skew_ms"), 2)) if remote else ()
        rows.append((
            _num(index + 1 if isinstance(index, int) else None), *where, _e(worker.get("pid") or DASH),
            _num(worker.get("planned")), _num(worker.get("finished")), _num(worker.get("lost")),
            _num(worker.get("cpu_busy"), 2), _num(worker.get("max_event_loop_stall_ms"), 1),
            _num(worker.get("niceness")), _e(worker.get("failure") or "finished"),
        ))  # fmt: skip
    where_head = ("node", "clock skew (ms)") if remote else ()
    head = ("worker", *where_head, "pid", "planned", "reported", "lost", "CPU (core)", "longest stall (ms)", "nice",
            "ended")  # fmt: skip
    table = f"<h3>Worker processes</h3>{_table(head, rows, cls='numbers')}"
    if not nodes:
        return table
    node_rows = [
        (_e(n.get("node") or DASH), _num(n.get("processes")), _num(n.get("planned")), _num(n.get("finished")),
         _num(n.get("lost")), _num(n.get("max_cpu_busy"), 2), _num(n.get("max_event_loop_stall_ms"), 1),
         _num(n.get("clock_skew_ms"), 2), _num(n.get("failed")))
        for n in map(_map, nodes)
    ]  # fmt: skip
    node_head = ("node", "processes", "planned", "reported", "lost", "busiest CPU (core)", "longest stall (ms)",
                 "clock skew (ms)", "ended early")  # fmt: skip
    return f"{table}<h3>Nodes</h3>{_table(node_head, node_rows, cls='numbers')}"


def faults(doc: Mapping[str, Any]) -> str:
    events = [_map(e) for e in _list(doc.get("faults"))]
    if not events:
        return ""
    rows = [
        (f"{_num(e.get('at_s'), 3)} s", _e(e.get("phase")), _e(e.get("action")), _e(e.get("fault")),
         "ok" if e.get("ok", True) else "<strong>failed</strong>", _e(e.get("detail") or ""))
        for e in events
    ]  # fmt: skip
    table = _table(("at", "phase", "action", "fault", "confirmed", "detail"), rows)
    return f'<section id="faults"><h2>Fault timeline</h2>{table}</section>'


def server(doc: Mapping[str, Any]) -> str:
    """The server's own view (``target.metrics``): what was scraped, how it went, and each phase's readings."""
    view = _map(doc.get("server_metrics"))
    if not view:
        return ""
    failures = _map(view.get("failures"))
    failed = ", ".join(f"{_e(reason)} ({_num(count)})" for reason, count in failures.items())
    facts = {
        "page": view.get("url"), "engine profile": view.get("engine"), "interval (ms)": view.get("interval_ms"),
        "scrapes": view.get("scrapes"), "failed": view.get("failed"),
    }  # fmt: skip
    notes = "".join(f"<li>{_e(n)}</li>" for n in _list(view.get("notes")))
    series = [_map(s) for s in _list(view.get("series"))]
    listed = _table(("series", "expression", "unit"),
                    [(_e(s.get("name")), f"<code>{_e(s.get('expr'))}</code>", _e(s.get("unit") or DASH))
                     for s in series])  # fmt: skip
    names = [str(s.get("name")) for s in series]
    rows = []
    for phase in map(_map, _list(doc.get("phases"))):
        readings = _map(phase.get("server"))
        cells = []
        for name in names:
            stats = _map(readings.get(name))
            cells.append(DASH if not stats else f"{_num(stats.get('mean'), 2)} / {_num(stats.get('max'), 2)}")
        rows.append((f"{_e(phase.get('name'))} <span class='muted'>({_e(phase.get('role'))})</span>", *cells))
    per_phase = _table(("phase", *(_e(n) for n in names)), rows, cls="numbers")
    return (
        '<section id="server"><h2>The server\'s own view</h2>'
        "<p>Scraped from the target's Prometheus page during the run (target.metrics). A failed scrape never "
        "failed the run: it is counted here and leaves a gap in the charts.</p>"
        f"{evidence(facts)}" + (f'<p class="warn">Failed scrapes: {failed}.</p>' if failed else "")
        + (f'<ul class="notes">{notes}</ul>' if notes else "") + listed
        + f"<h3>Each phase: mean / highest reading</h3>{per_phase}</section>"
    )  # fmt: skip


def state_headers(doc: Mapping[str, Any]) -> str:
    """What the answers' own headers said of the server's state (queue time, rate limits, back-off), per phase."""
    phases = [_map(p) for p in _list(doc.get("phases"))]
    names = sorted({str(name) for p in phases for name in _map(p.get("state_headers"))})
    if not names:
        return ""
    rows = []
    for name in names:
        cells, unit = [], ""
        for phase in phases:
            reading = _map(_map(phase.get("state_headers")).get(name))
            unit = str(reading.get("unit") or unit)
            cells.append(DASH if not reading else f"{_num(reading.get('p50'), 2)} <span class='muted'>"
                         f"({_num(reading.get('min'), 2)}–{_num(reading.get('max'), 2)}, "
                         f"{_num(reading.get('responses'))} answers)</span>")  # fmt: skip
        rows.append((f"<code>{_e(name)}</code>", _e(unit), *cells))
    head = ("header", "unit", *(_e(p.get("name")) for p in phases))
    return (
        '<section id="state-headers"><h2>Server state in the answers\' headers</h2>'
        "<p>Queue and processing times, rate limits and back-off as the server or a gateway in front of it "
        "sent them with each answer: the median, with the range and how many answers carried it. Streamed answers "
        "carry no timing headers (they leave before the answer is known).</p>"
        f"{_table(head, rows, cls='numbers')}</section>"
    )


def classes(doc: Mapping[str, Any]) -> str:
    """Each traffic class in each phase, with its own score and how much of its goodput another's stress left."""
    listed = [_map(c) for c in _list(doc.get("classes"))]
    if not listed:
        return ""
    scores = {str(_map(c).get("name")): _map(c) for c in _list(_map(doc.get("score")).get("classes"))}
    rows = []
    for traffic_class in listed:
        name = str(traffic_class.get("name"))
        own = scores.get(name, {})
        value = own.get("value")
        label = f"<strong>{_e(name)}</strong>" + (
            "" if value is None else f" <span class='muted'>{_num(value, 1)}/100</span>"
        )
        for phase in map(_map, _list(traffic_class.get("phases"))):
            outcomes, latency = _map(phase.get("outcomes")), _map(phase.get("latency_ms"))
            share = _share_of(phase.get("offered"))
            rows.append((
                label, f"{_e(phase.get('name'))} <span class='muted'>({_e(phase.get('role'))})</span>",
                _num(phase.get("offered_rps"), 1), _pct(phase.get("on_time_ratio")), _num(phase.get("goodput_rps"), 2),
                _ms(_map(latency.get("ttft")).get("p99")), _ms(_map(latency.get("e2e")).get("p99")),
                share(outcomes.get("timeout")), share(outcomes.get("shed")), share(outcomes.get("late")),
            ))  # fmt: skip
            label = ""
    head = ("class", "phase", "offered/s", "on time", "goodput/s", "p99 TTFT", "p99 e2e", "timeout", "shed", "late")
    views = "".join(f"<li>{_e(_map(c).get('summary', ''))}</li>" for c in scores.values())
    isolation = next((_map(c) for c in _list(_map(doc.get("score")).get("components"))
                      if _map(c).get("name") == "isolation"), {})  # fmt: skip
    said = f"<p>{_e(isolation.get('summary'))}</p>" if isolation.get("value") is not None else ""
    return (
        '<section id="classes"><h2>Traffic classes</h2><p>Every figure by the class whose requests it counts: who '
        "lost when the pool was shared. Each class is scored on its own requests against its own SLO.</p>"
        f"{said}{_table(head, rows, cls='numbers')}<ul class='class-scores'>{views}</ul></section>"
    )


def conversations(doc: Mapping[str, Any]) -> str:
    """The conversations each phase started and how they ended (a run with ``sessions``)."""
    found = _map(doc.get("conversations"))
    if not found:
        return ""
    rows = []
    for phase in [*map(_map, _list(found.get("phases"))), {"name": "all", **_map(found.get("total"))}]:
        rows.append((
            _e(phase.get("name")), _num(phase.get("started")), _num(phase.get("completed")),
            _pct(phase.get("on_time_ratio")), _num(phase.get("failed")), _num(phase.get("cut")),
            _num(phase.get("turns_per_conversation"), 2),
        ))  # fmt: skip
    head = ("started in", "conversations", "completed", "every turn on time", "failed", "cut by the run's end",
            "turns each")  # fmt: skip
    return (
        '<section id="conversations"><h2>Conversations</h2><p>Each arrival started a conversation; its turns '
        "followed the answers after a think time. Goodput above counts turns; here a conversation counts as on "
        "time only when every one of its turns was, out of those that ended on their own (one cut by the run's "
        f"end is left out, and counted apart).</p>{_table(head, rows, cls='numbers')}</section>"
    )
