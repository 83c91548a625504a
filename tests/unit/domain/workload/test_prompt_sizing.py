"""The calibration fit: tokens ≈ a + b × words from the server's own counts of probe prompts."""

from __future__ import annotations

import pytest

from cliffwatch.domain.workload.prompt_sizing import PROBE_WORDS, PromptSizing, PromptSource, fit_calibration


def test_an_exact_line_is_recovered_and_sizes_prompts_by_it() -> None:
    """A chat template of 9 tokens and 1.6 tokens a word: 100 tokens are (100 − 9) / 1.6 ≈ 57 words."""
    fit = fit_calibration([(w, round(9 + 1.6 * w)) for w in PROBE_WORDS])
    assert fit is not None
    assert (fit.intercept, fit.slope) == (pytest.approx(9, abs=0.3), pytest.approx(1.6, abs=0.002))
    assert fit.words_for(100) == 57
    assert fit.words_for(1) == 1  # never fewer than one word: the tag
    assert fit.max_error < 0.01


def test_noisy_counts_give_the_least_squares_line_and_its_worst_miss() -> None:
    fit = fit_calibration([(8, 20), (32, 50), (128, 200), (512, 760)])
    assert fit is not None
    assert (fit.intercept, fit.slope) == (pytest.approx(7.313, abs=1e-3), pytest.approx(1.4717, abs=1e-4))
    assert fit.max_error == pytest.approx(0.0881, abs=1e-4)  # the 8-word probe: 19.09 fitted for 20


@pytest.mark.parametrize(
    "samples",
    [[(8, 10)], [(8, 10), (8, 12)], [(8, 50), (32, 50), (128, 50)], [(8, 90), (512, 10)]],
    ids=["one", "one-word-count", "flat", "falling"],
)
def test_probes_that_cannot_size_prompts_give_no_fit(samples: list[tuple[int, int]]) -> None:
    assert fit_calibration(samples) is None


def test_a_sizing_says_its_source_and_fit() -> None:
    fit = fit_calibration([(8, 17), (32, 41)])
    sizing = PromptSizing(source=PromptSource.CALIBRATED, calibration=fit, context_tokens=2048, closed_loop=True)
    assert sizing.to_dict() == {
        "source": "calibrated",
        "calibration": {"intercept": 9.0, "slope": 1.0, "samples": [[8, 17], [32, 41]], "max_error": 0.0},
        "detail": None,
        "probes": 0,
        "failure": None,
        "context_tokens": 2048,
        "closed_loop": True,
    }
