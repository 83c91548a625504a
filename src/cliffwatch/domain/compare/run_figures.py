"""The figures two run documents are compared on, before judging: per phase and per class's phase, the on-time
share and goodput, the shed and timeout shares, p50 and p99 of end-to-end latency and of time to first
token; and the score.

Latency is tested from the distributions a result document keeps per phase (``distributions``: its e2e and
TTFT histograms); a document written before they were kept shows its percentiles untested and says so.
End-to-end latency is that of the successful answers (as the phase's own percentiles are): a run that sheds
more can look faster, which is why the shares stand first.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from cliffwatch.domain.capacity.capacity_stats import wilson
from cliffwatch.domain.compare.family import Better, Figure, Margins
from cliffwatch.domain.compare.quantiles import Finding, answers_needed, compare_quantiles
from cliffwatch.domain.compare.shares import compare_shares
from cliffwatch.domain.histogram import Histogram

_SHARES = (("on_time", Better.HIGHER), ("shed", Better.LOWER), ("timeout", Better.LOWER))
_LATENCIES = (("e2e", 0.5), ("e2e", 0.99), ("ttft", 0.5), ("ttft", 0.99))
UNTESTED_LATENCY = "not tested: the document keeps only its percentiles (written before cliffwatch kept distributions)"


def run_figures(a: Mapping[str, Any], b: Mapping[str, Any], *, rng: random.Random, margins: Margins) -> list[Figure]:
    """Every figure of A and B (two alike run documents), untested figures included, in reading order."""
    figures: list[Figure] = []
    for phase_a, phase_b in zip(a.get("phases") or [], b.get("phases") or [], strict=False):
        figures += _phase_figures(f"phase {phase_a['name']}", phase_a, phase_b, rng=rng, margins=margins)
    classes_b = {c["name"]: c for c in b.get("classes") or []}
    for class_a in a.get("classes") or []:
        class_b = classes_b.get(class_a["name"])
        if class_b is None:
            continue
        for phase_a, phase_b in zip(class_a["phases"], class_b["phases"], strict=False):
            scope = f"class {class_a['name']} · phase {phase_a['name']}"
            figures += _phase_figures(scope, phase_a, phase_b, rng=rng, margins=margins)
    figures.append(_score(a, b))
    return figures


def _phase_figures(scope: str, a: Mapping[str, Any], b: Mapping[str, Any], *, rng: random.Random,
                   margins: Margins) -> Iterator[Figure]:  # fmt: skip
    offered_a, offered_b = int(a["offered"]), int(b["offered"])
    for outcome, better in _SHARES:
        count_a, count_b = int(a["outcomes"].get(outcome, 0)), int(b["outcomes"].get(outcome, 0))
        name = f"{outcome}_share"
        if not offered_a or not offered_b:
            yield Figure(scope=scope, name=name, unit="share", better=better, a=None, b=None,
                         note="not tested: a run offered no request in this phase")  # fmt: skip
            continue
        tested = compare_shares(count_a, offered_a, count_b, offered_b)
        yield Figure(scope=scope, name=name, unit="share", better=better, a=count_a / offered_a,
                     b=count_b / offered_b, tested=tested, margin=margins.share, a_interval=wilson(count_a, offered_a),
                     b_interval=wilson(count_b, offered_b))  # fmt: skip
        if outcome == "on_time":
            yield _goodput(scope, a, b, tested, margins)
    for metric, q in _LATENCIES:
        figure = _latency(scope, a, b, metric, q, rng=rng, margins=margins)
        if figure is not None:
            yield figure


def _goodput(scope: str, a: Mapping[str, Any], b: Mapping[str, Any], share: Finding, margins: Margins) -> Figure:
    """Goodput (on-time requests a second) is the on-time share times the offered rate, which alike runs share:
    it is judged by the on-time share's test, its difference and spread told in requests a second."""
    rate = (float(a["offered_rps"]) + float(b["offered_rps"])) / 2
    goodput_a, goodput_b = float(a["goodput_rps"]), float(b["goodput_rps"])
    tested = Finding(difference=goodput_b - goodput_a, p_value=share.p_value, spread=share.spread * rate)
    return Figure(scope=scope, name="goodput_rps", unit="req/s", better=Better.HIGHER, a=goodput_a, b=goodput_b,
                  tested=tested, margin=margins.share * rate, same_test_as="on_time_share",
                  note="judged by the on-time share's test (the same offered load)")  # fmt: skip


def _latency(scope: str, a: Mapping[str, Any], b: Mapping[str, Any], metric: str, q: float, *, rng: random.Random,
             margins: Margins) -> Figure | None:  # fmt: skip
    """B's latency percentile against A's; None when neither run measured the metric (TTFT of whole answers)."""
    label = f"p{q * 100:g}"
    name = f"{metric}_{label}_ms"
    shown_a = (a.get("latency_ms") or {}).get(metric) or {}
    shown_b = (b.get("latency_ms") or {}).get(metric) or {}
    if not shown_a.get("count") and not shown_b.get("count"):
        return None
    value_a, value_b = shown_a.get(label), shown_b.get(label)
    margin = None if value_a is None else margins.latency * value_a
    figure = Figure(scope=scope, name=name, unit="ms", better=Better.LOWER, a=value_a, b=value_b, margin=margin)
    histograms = [_distribution(side, metric) for side in (a, b)]
    if histograms[0] is None or histograms[1] is None:
        return replace(figure, note=UNTESTED_LATENCY)
    if value_a is None or value_b is None:
        return replace(figure, note="not tested: one run has no answer to time")
    tested = compare_quantiles(histograms[0], histograms[1], q, rng=rng)
    if tested is None:
        counts = f"{histograms[0].count} and {histograms[1].count}"
        return replace(figure, note=f"not tested: {counts} answers, and a {label} needs {answers_needed(q)} in each "
                       "run to be bootstrapped")  # fmt: skip
    return replace(figure, tested=tested)


def _distribution(phase: Mapping[str, Any], metric: str) -> Histogram | None:
    stored = (phase.get("distributions") or {}).get(metric)
    return None if stored is None else Histogram.from_dict(stored)


def _score(a: Mapping[str, Any], b: Mapping[str, Any]) -> Figure:
    score_a, score_b = (a.get("score") or {}).get("value"), (b.get("score") or {}).get("value")
    return Figure(scope="run", name="score", unit="points", better=Better.HIGHER,
                  a=None if score_a is None else float(score_a), b=None if score_b is None else float(score_b),
                  note="not tested: one value per run; the figures above are its parts")  # fmt: skip


def scopes(figures: Sequence[Figure]) -> list[str]:
    """The scopes in the order first seen, for tables."""
    return list(dict.fromkeys(f.scope for f in figures))
