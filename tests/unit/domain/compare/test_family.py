"""A comparison's figures judged together: Holm's correction, the margin, and each figure's change."""

from __future__ import annotations

import pytest

from cliffwatch.domain.compare.family import Better, Change, Figure, Margins, judge, overall
from cliffwatch.domain.compare.quantiles import Finding


def figure(name: str, p: float, difference: float, *, better: Better = Better.LOWER, margin: float = 0.0,
           scope: str = "phase x", same_test_as: str | None = None) -> Figure:  # fmt: skip
    return Figure(scope=scope, name=name, unit="ms", better=better, a=100.0, b=100.0 + difference, margin=margin,
                  tested=Finding(difference=difference, p_value=p, spread=1.0), same_test_as=same_test_as)  # fmt: skip


def test_holm_corrects_the_family_step_by_step() -> None:
    judged = judge([figure("a", 0.01, 5), figure("b", 0.02, 5), figure("c", 0.04, 5), figure("d", 0.5, 5)])
    assert [f.p_adjusted for f in judged] == pytest.approx([0.04, 0.06, 0.08, 0.5])
    assert [f.change for f in judged] == [Change.REGRESSED, *[Change.NO_DIFFERENCE] * 3]
    # four figures: what could be detected is told at 0.05 / 4, two-sided, with 80 % power (z 2.50 + 0.84)
    assert judged[0].detectable == pytest.approx(3.34, abs=0.01)


def test_direction_margin_and_figures_without_a_test() -> None:
    higher = figure("share", 0.001, -0.2, better=Better.HIGHER, margin=0.01)
    faster = figure("latency", 0.001, -8.0, margin=5.0)
    small = figure("tiny", 0.001, 2.0, margin=5.0)
    untested = Figure(scope="run", name="score", unit="points", better=Better.HIGHER, a=90.0, b=40.0)
    judged = judge([higher, faster, small, untested])
    assert [f.change for f in judged] == [Change.REGRESSED, Change.IMPROVED, Change.WITHIN_MARGIN, Change.NOT_TESTED]
    assert judged[3].p_adjusted is None
    assert overall(judged) is Change.REGRESSED
    assert overall(judged[1:]) is Change.IMPROVED
    assert overall(judged[2:]) is Change.NO_DIFFERENCE


def test_a_figure_judged_by_anothers_test_is_not_counted_twice() -> None:
    share = figure("on_time_share", 0.01, -0.1, better=Better.HIGHER)
    goodput = figure("goodput_rps", 0.01, -1.0, better=Better.HIGHER, same_test_as="on_time_share")
    other = figure("e2e", 0.01, 3.0)
    judged = judge([share, goodput, other])
    assert judged[0].p_adjusted == pytest.approx(0.02)  # a family of two, not three
    assert judged[1].p_adjusted == judged[0].p_adjusted
    assert judged[1].change is Change.REGRESSED


def test_margins_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="margin"):
        Margins(share=1.5)
    assert Margins().to_dict() == {"share": 0.01, "latency": 0.05}
