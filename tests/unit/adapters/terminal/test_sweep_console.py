"""What ``cliffwatch sweep`` prints: each variant's step table, its capacity lines and verdict, the side-by-side
comparison of retry variants, the live step notes, and plain (uncoloured, unwrapped) text when not a TTY."""

from __future__ import annotations

import io
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console, RenderableType

from cliffwatch.adapters.terminal.sweep_console import (
    SweepConsoleObserver,
    capacity_lines,
    comparison,
    step_table,
    sweep_report,
)
from cliffwatch.cli import main
from cliffwatch.cli import sweep as cli_sweep
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.arrival_luck import ReferenceReading
from cliffwatch.domain.capacity.capacity import StepStats, StepVerdict, summarize
from cliffwatch.domain.capacity.capacity_stats import ClassStep
from cliffwatch.domain.capacity.growth import Growth, GrowthSignal, Trend
from cliffwatch.domain.capacity.sweep_spec import SweepSpec, parse_sweep_spec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from cliffwatch.services.memory import CollectingObserver
from cliffwatch.services.sweep import SweepOutcome, SweepReport

SCENARIO = parse_scenario(
    {
        "name": "console-sweep",
        "target": {"url": "http://127.0.0.1:9", "request": {"model": "m", "max_tokens": 8}},
        "slo": {"e2e_ms": 4000, "timeout_ms": 8000},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 5, "arrival": {"process": "poisson", "rate": 1}}],
    }
)
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ANSI = re.compile(r"\x1b\[")


def step(
    rate: float,
    trial: int = 1,
    *,
    offered: int = 2000,
    on_time: int | None = None,
    timeout: int = 0,
    shed: int = 0,
    tokens: float = 1000.0,
    p99_e2e_ms: float = 1500.0,
    amplification: float = 1.0,
    limited: bool = False,
) -> StepStats:
    on_time = offered if on_time is None else on_time
    late = offered - on_time - timeout - shed
    return StepStats(
        rate=rate,
        trial=trial,
        duration_s=10.0,
        offered=offered,
        on_time=on_time,
        late=late,
        shed=shed,
        fast_shed=0,
        timeout=timeout,
        error=0,
        not_sent=0,
        sent_rate=offered / 10,
        goodput_rps=on_time / 10,
        completions_per_s=(on_time + late) / 10,
        tokens_per_s=tokens,
        amplification=amplification,
        ttft_ms={"p50": 90.0, "p90": 150.0, "p99": 240.0},
        itl_ms={"p50": 10.0, "p90": 20.0, "p99": 30.0},
        e2e_ms={"p50": 800.0, "p90": 1200.0, "p99": p99_e2e_ms},
        generator_limited=limited,
        generator_reasons=("schedule lag p99 12 ms",) if limited else (),
    )


def as_written_steps() -> list[StepStats]:
    """10 good, 14 bad (latency), 12 straddling then good on the point estimate, 13 clearly good."""
    return [
        step(10.0, tokens=1000.0),
        step(14.0, on_time=1700, tokens=1455.0, p99_e2e_ms=4500.0),
        step(12.0, 1, offered=400, on_time=398, tokens=1200.0),
        step(12.0, 2, offered=400, on_time=397, tokens=1210.0),
        step(13.0, offered=5000, on_time=4990, tokens=1300.0, p99_e2e_ms=3000.0),
        step(21.0, on_time=200, tokens=1500.0, p99_e2e_ms=9000.0),
    ]


def immediate_steps() -> list[StepStats]:
    """Retries amplify load: the cliff comes at 8, with 1.8 attempts a request there; 16 could not be sent."""
    return [
        step(4.0, amplification=1.0, tokens=400.0),
        step(8.0, on_time=1500, timeout=300, amplification=1.8, tokens=700.0, p99_e2e_ms=7000.0),
        step(16.0, limited=True, tokens=900.0),
    ]


def report(variant: str, policy: str, steps: list[StepStats], *, unit: str = "req/s") -> SweepReport:
    result = summarize(steps, target=0.99, e2e_slo_ms=4000.0, finished_because="bracketed within 5 %", unit=unit)
    return SweepReport(variant=variant, policy_description=policy, result=result)


def outcome(
    *reports: SweepReport, spec: SweepSpec | None = None, status: RunStatus = RunStatus.SUCCEEDED
) -> SweepOutcome:
    return SweepOutcome(
        sweep_id="s-1",
        scenario=SCENARIO,
        spec=spec or parse_sweep_spec({"start": 10, "stop": 21, "variants": ["as-written", "immediate:3"]}),
        status=status,
        reason=None if status is RunStatus.SUCCEEDED else "the sweep was stopped before its end",
        reports=reports,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=95),
        target_url="http://127.0.0.1:9",
    )


def text(renderable: RenderableType, width: int = 200) -> str:
    console = Console(file=io.StringIO(), width=width, highlight=False, color_system=None)
    console.print(renderable)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(output, str)
    return output


def rows(table_text: str) -> dict[str, list[str]]:
    """The table's body rows by their first cell plus trial ("12#1"), each a list of the cells' texts."""
    found = {}
    for line in table_text.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", line)]
        if len(cells) > 2 and re.fullmatch(r"[\d.]+", cells[0]) and cells[1].isdigit():
            found[f"{cells[0]}#{cells[1]}"] = cells
    return found


def test_the_step_table_shows_every_step_in_order_with_its_figures_and_settled_verdict() -> None:
    table = text(step_table(report("as-written", "no retries", as_written_steps())))

    assert table.splitlines()[0].strip() == "as-written (retry: no retries)"
    header = next(line for line in table.splitlines() if "sent/s" in line)
    for column in ("req/s", "#", "n", "sent/s", "good/s", "on time", "95% CI", "tokens/s", "done/s"):
        assert column in header
    for column in ("p99 TTFT", "p99 e2e", "shed", "tmo", "hollow", "err", "3xx", "amp", "queue", "verdict"):
        assert column in header
    found = rows(table)
    assert list(found) == ["10#1", "14#1", "12#1", "12#2", "13#1", "21#1"]  # as measured, not sorted
    assert found["10#1"][2:] == [
        "2000", "200", "200", "100.0%", "99.8–100.0", "1,000", "200", "240 ms", "1.50 s", "0%", "0%", "0%", "0%",
        "0%", "1.00", "–", "good",
    ]  # fmt: skip
    assert found["14#1"][5] == "85.0%"
    assert found["14#1"][10] == "4.50 s"
    assert found["14#1"][-1] == "bad"
    assert found["12#1"][-1] == "unsure: again"  # measured again: the verdict is on the last trial
    assert found["12#2"][-1] == "good*"  # 795 of 800 straddles 99 % and no third trial could clear it
    assert found["13#1"][-1] == "good"
    assert "* settled on the point estimate" in table


def test_a_generator_limited_step_reads_invalid_and_timeouts_and_amplification_show() -> None:
    found = rows(text(step_table(report("immediate:3", "up to 3 immediate retries", immediate_steps()))))

    assert found["16#1"][-1] == "invalid (generator)"
    assert found["8#1"][12] == "15%"  # timeouts: 300 of 2000
    assert found["8#1"][-3] == "1.80"
    assert found["8#1"][-1] == "bad"


def test_a_step_whose_queue_grew_shows_its_overload_and_its_rate_why_it_is_bad() -> None:
    trend = Trend(signal=GrowthSignal.LATENCY_TREND, slope=0.062, overload=0.062, t_stat=9.0, rise=0.62,
                  emptied=False, points=10, growing=True)  # fmt: skip
    flat = replace(trend, slope=0.0, overload=0.0, growing=False, emptied=True)
    steps = [
        replace(step(10.0), growth=Growth(latency=flat, queue=None)),
        replace(step(12.0), growth=Growth(latency=trend, queue=None)),
        replace(step(12.0, 2, offered=6000), growth=Growth(latency=trend, queue=None), extended=True),
    ]
    found = rows(text(step_table(report("as-written", "no retries", steps))))
    assert found["10#1"][-2:] == ["flat", "good"]
    assert found["12#1"][-2:] == ["+6.2%", "unsure: again"]
    assert found["12#2"][-2:] == ["+6.2% ext", "bad (queue grew)"]
    notes: list[str] = []

    class Notes:
        def note(self, message: str) -> None:
            notes.append(message)

        def progress(self, progress: object) -> None:
            pass

    SweepConsoleObserver(Notes()).step_finished("as-written", steps[1], StepVerdict.UNSURE)  # type: ignore[arg-type]
    assert notes[0].endswith("queue growing (wait +62 ms/s, 6.2 % overload): measuring it again over a longer window")


def test_the_capacity_lines_give_usable_capacity_peaks_cliff_ratio_and_the_verdict_sentence() -> None:
    result = report("as-written", "no retries", as_written_steps()).result
    lines = text(capacity_lines(result)[0]) + "".join(text(line) for line in capacity_lines(result)[1:])

    assert "usable capacity at 99.0% on time: 13 req/s (on time, 95% CI 99.6%–99.9%); first failing 14 req/s" in lines
    assert "peak tokens/s 1,500 at 21 req/s; peak completions/s 500; cliff ratio (usable / peak-tokens rate) 62%" in (
        lines
    )
    assert f"verdict: {result.verdict}" in " ".join(lines.split())
    assert result.verdict.startswith("p99 e2e crossed the 4000 ms SLO at 14 req/s")
    assert "search ended: bracketed within 5 %" in lines


def test_a_rate_judged_on_its_luck_corrected_attainment_shows_it_and_the_correction_is_explained() -> None:
    def luck(rate: float, missed: int, reference_late: int, expected: float) -> StepStats:
        reading = ReferenceReading(service_s=0.32, busy_s=0.32, budget_s=1.28, queued=40, overlapped=0,
                                   requests=400, missed=missed,
                                   reference_late=reference_late, both=min(missed, reference_late),
                                   expected_share=expected)  # fmt: skip
        return replace(step(rate, offered=400, on_time=400 - missed), reference=reading)

    # the server is late exactly when its reference is: 1.5 and 1.75 drew no queue; at 2 their long-run share shows
    steps = [luck(1.5, 0, 0, 0.002), luck(1.75, 0, 0, 0.008), luck(2.0, 12, 12, 0.03), luck(2.25, 20, 20, 0.05)]
    result = report("as-written", "no retries", steps).result
    table = text(step_table(report("as-written", "no retries", steps)))
    found = rows(table)
    assert "luck-corr." in table
    assert found["1.75#1"][5:8] == ["100.0%", "99.0–100.0", "99.2%"]  # 3.2 of 400 expected late: still good
    assert found["2#1"][7] == "97.0%"
    assert "corrected for the luck of its Poisson draws; its verdict is judged on it" in " ".join(table.split())
    lines = "".join(text(line) for line in capacity_lines(result))
    assert result.luck is not None
    assert result.luck.applied
    assert "arrival luck: corrected: a 320-ms single-slot reference fits the steps (correlation 1.00" in lines
    assert "(attainment 99.2 % corrected for the luck of its Poisson draws" in result.verdict


def test_without_a_usable_rate_the_capacity_line_says_none() -> None:
    result = report("none", "no retries", [step(2.0, on_time=1000, p99_e2e_ms=9000.0)]).result

    assert "usable capacity at 99.0% on time: none; first failing 2 req/s" in text(capacity_lines(result)[0])


def test_several_variants_are_compared_side_by_side() -> None:
    table = text(
        comparison(
            [
                report("as-written", "no retries", as_written_steps()),
                report("immediate:3", "up to 3 immediate retries", immediate_steps()),
            ]
        )
    )

    cells = [[c.strip() for c in line.strip().strip("│").split("│")] for line in table.splitlines() if "│" in line]
    lines = {row[0]: row[1:] for row in cells}
    assert "retry variants side by side" in table
    assert lines["retry policy"] == ["no retries", "up to 3 immediate retries"]
    assert lines["usable capacity (req/s)"] == ["13", "4"]
    assert lines["vs as-written"] == ["+0%", "-69%"]
    assert lines["first failing (req/s)"] == ["14", "8"]
    assert lines["peak tokens/s"] == ["1,500", "700"]
    assert lines["cliff ratio"] == ["62%", "50%"]  # 4 usable / 8, the peak of the valid rates (16 was invalid)
    assert lines["capacity-constrained"] == ["yes", "yes"]
    assert lines["max attempts/request"] == ["1.00", "1.80"]


def test_the_whole_report_has_a_headline_each_variant_and_the_comparison() -> None:
    whole = text(
        sweep_report(
            outcome(
                report("as-written", "no retries", as_written_steps()),
                report("immediate:3", "up to 3 immediate retries", immediate_steps()),
            )
        )
    )

    headline = whole.splitlines()[0]
    assert headline.startswith("console-sweep capacity sweep  succeeded, 95s, target http://127.0.0.1:9")
    assert "poisson arrivals, steps of 10s after 4s warm-up" in headline
    assert whole.index("as-written (retry: no retries)") < whole.index("immediate:3 (retry: up to 3 immediate")
    # 4 + 10 s steps against a 4-s e2e SLO: a slowly growing queue could pass unseen, and the report says so
    assert whole.splitlines()[1].startswith("warning: steps of 14 s (warm-up + window) are shorter than 10 × the 4000")
    assert whole.count("usable capacity at 99.0% on time") == 2
    assert whole.count("verdict: ") == 2
    assert "retry variants side by side" in whole


def test_one_variant_has_no_comparison_and_a_concurrency_sweep_speaks_of_clients() -> None:
    spec = parse_sweep_spec({"mode": "concurrency", "start": 1, "stop": 16})
    steps = [step(2.0), step(4.0, on_time=1000, p99_e2e_ms=9000.0), step(3.0)]
    whole = text(sweep_report(outcome(report("as-written", "no retries", steps, unit="clients"), spec=spec)))

    assert "closed-loop clients, steps of 10s" in whole.splitlines()[0]
    assert "warning" not in whole
    assert "arrivals" not in whole.splitlines()[0]
    assert "side by side" not in whole
    assert "usable capacity at 99.0% on time: 3 clients" in whole
    assert "clients" in next(line for line in whole.splitlines() if "sent/s" in line)


def test_a_sweep_stopped_before_its_first_step_says_so() -> None:
    whole = text(sweep_report(outcome(status=RunStatus.INTERRUPTED)))

    assert "interrupted: the sweep was stopped before its end" in whole.splitlines()[0]
    assert "no step was measured" in whole


def test_the_live_notes_name_each_step_and_how_it_went() -> None:
    progress = CollectingObserver()
    observer = SweepConsoleObserver(progress, unit="req/s")

    observer.step_started("as-written", 12.0, 2)
    observer.step_finished("as-written", step(12.0, 2, offered=400, on_time=397), StepVerdict.UNSURE)
    observer.step_started("none", 16.0, 1)
    observer.step_finished("none", step(16.0, limited=True), StepVerdict.INVALID)

    assert progress.notes[0] == "as-written: step at 12 req/s, trial 2"
    assert progress.notes[1] == (
        "as-written: 12 req/s → on time 99.2% [97.8%–99.7%], goodput 39.7/s, tokens 1,000/s, p99 e2e 1.50 s: "
        "unsure: again"
    )
    assert progress.notes[2] == "none: step at 16 req/s"
    assert progress.notes[3].endswith("invalid (generator)  generator limited: schedule lag p99 12 ms")


def test_the_cli_prints_plain_unwrapped_text_when_not_a_tty(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    done = outcome(
        report("as-written", "no retries", as_written_steps()),
        report("immediate:3", "up to 3 immediate retries", immediate_steps()),
    )

    async def execute(*args: Any) -> SweepOutcome:
        return done

    monkeypatch.setattr("cliffwatch.cli.sweep._execute", execute)
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)

    assert main(["sweep", "burst-storm", "--from", "10", "--to", "21"]) == 0

    out = capsys.readouterr().out
    assert not ANSI.search(out), "colour codes in piped output"
    assert max(len(line) for line in out.splitlines()) <= 170
    assert len(rows(out)) == len(as_written_steps()) + len(immediate_steps())
    # the verdict sentence is not cut into pieces at 80 columns
    sentence = done.reports[0].result.verdict
    assert any(sentence[:150] in line for line in out.splitlines())
    assert "retry variants side by side" in out


async def test_the_cli_warns_before_a_sweep_whose_steps_are_too_short(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The warning comes first, on the progress stream, before any step is measured."""
    said: list[str] = []
    done = outcome()

    class Handle:
        sweep_id = "s-1"
        target_url = "http://127.0.0.1:9"

        async def run(self) -> SweepOutcome:
            said.append("<sweep ran>")
            return done

        def interrupt(self) -> None:
            pass

    @asynccontextmanager
    async def prepare(*args: Any, **kwargs: Any) -> AsyncIterator[Handle]:
        yield Handle()

    class Progress(CollectingObserver):
        def __enter__(self) -> Progress:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def note(self, message: str) -> None:
            said.append(message)

    monkeypatch.setattr(cli_sweep, "prepare_sweep", prepare)
    monkeypatch.setattr(cli_sweep, "ConsoleProgress", Progress)
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    spec = parse_sweep_spec({"start": 1, "stop": 8, "step_s": 2, "warmup_s": 1})

    assert await cli_sweep._execute(SCENARIO, spec, Settings(allowlist=allowlist, state_dir=tmp_path)) is done

    warnings = [i for i, line in enumerate(said) if line.startswith("warning: ")]
    assert len(warnings) == 1
    assert said[warnings[0]].startswith(
        "warning: steps of 3 s (warm-up + window) are shorter than 10 × the 4000 ms e2e SLO (40 s)"
    )
    assert warnings[0] < said.index("<sweep ran>")


def test_a_sweep_with_traffic_classes_shows_each_classs_share_on_time() -> None:
    steps = [
        replace(step(10.0, offered=100), classes={"chat": ClassStep(offered=40, on_time=40),
                                                   "batch": ClassStep(offered=60, on_time=60)}),
        replace(step(14.0, offered=100, on_time=70), classes={"chat": ClassStep(offered=40, on_time=10),
                                                               "batch": ClassStep(offered=60, on_time=60)}),
    ]  # fmt: skip
    table = text(step_table(report("as-written", "no retries", steps)))
    assert "by class" in table
    found = rows(table)
    assert "chat 25% batch 100%" in found["14#1"]
    assert "by class" not in text(step_table(report("as-written", "no retries", as_written_steps())))


def test_the_recheck_has_its_own_line_and_a_drifting_target_is_shown_with_how_far_its_trials_were_apart() -> None:
    steps = [
        replace(step(10.0), started_s=0.0),
        step(12.0),
        step(14.0, on_time=1700, p99_e2e_ms=4500.0),
        replace(step(10.0, 2, on_time=1500, p99_e2e_ms=9000.0), started_s=61.0, recheck=True,
                e2e_ms={"p50": 1100.0, "p90": 4000.0, "p99": 9000.0}),
    ]  # fmt: skip
    result = report("as-written", "no retries", steps).result
    table = text(step_table(report("as-written", "no retries", steps)))
    found = rows(table)

    assert found["10#1"][-1] == "bad (on trial 2: drifted)"  # its first reading was good: the slower trial rules
    assert "recheck: drifted" in table
    assert "recheck: the first rate measured again at the end" in " ".join(table.split())
    lines = "".join(text(line) for line in capacity_lines(result))
    assert ("target drift: 10 req/s: trial 1 (step 1, at 0 s) 100.0% on time, the recheck (step 4, at 61 s) 75.0%: "
            "-25.0 points, median e2e +300 ms") in " ".join(lines.split())  # fmt: skip
    assert result.verdict.startswith("the target's speed drifted during the sweep (10 req/s: 100.0 % on time at 0 s")


def test_a_recheck_whose_median_latency_moved_is_drift_shown_with_both_medians() -> None:
    # light steps (at most a third of a request in flight): the target's own time, 100 ms, then 160 ms
    def light(rate: float, trial: int, median: float, offered: int) -> StepStats:
        return replace(step(rate, trial, offered=offered), e2e_ms={"p50": median, "p90": median * 1.05,
                                                                   "p99": median * 1.1})  # fmt: skip

    steps = [replace(light(0.5, 1, 100.0, 10), started_s=0.0), light(1.0, 1, 100.0, 20), light(2.0, 1, 100.0, 40),
             step(14.0, on_time=1700, p99_e2e_ms=4500.0),
             replace(light(0.5, 2, 160.0, 10), started_s=61.0, recheck=True)]  # fmt: skip
    result = report("as-written", "no retries", steps).result
    table = text(step_table(report("as-written", "no retries", steps)))

    assert result.target_drift is not None
    assert "recheck: drifted" in table
    assert "its median latency moved from the first reading's" in " ".join(table.split())
    lines = " ".join("".join(text(line) for line in capacity_lines(result)).split())
    assert ("target drift: 0.5 req/s: median e2e 100 ms in trial 1 (step 1, at 0 s), 160 ms in the recheck "
            "(step 5, at 61 s): +60 %") in lines  # fmt: skip


def test_a_recheck_that_agrees_says_so_and_leaves_the_rates_verdict_on_its_search_trial() -> None:
    steps = [step(10.0), step(12.0), step(14.0, on_time=1700, p99_e2e_ms=4500.0), replace(step(10.0, 2), recheck=True)]
    found = rows(text(step_table(report("as-written", "no retries", steps))))

    assert found["10#1"][-1] == "good"
    assert found["12#1"][-1] == "good"
    notes: list[str] = []

    class Notes:
        def note(self, message: str) -> None:
            notes.append(message)

        def progress(self, progress: object) -> None:
            pass

    SweepConsoleObserver(Notes()).step_finished("as-written", steps[-1], StepVerdict.GOOD)  # type: ignore[arg-type]
    assert notes[0].startswith("as-written: 10 req/s (the recheck) → on time 100.0%")
