"""Can a short sweep step tell that the target's queue is growing? Raw data for docs/sweep.md's answer.

Runs single sweep steps (``step_scenario`` through ``RunService``, exactly as ``HttpStepRunner`` does)
against the built-in target at fractions of its saturation rate, and keeps every request's scheduled,
sent and end times. ``--analyse`` then computes candidate "backlog growing" statistics from those files
and prints, per statistic and threshold, how often it fires below capacity (false positives) and above
it (detection). Nothing here is used by cliffwatch itself.

    .venv/bin/python bench/sweep_backlog.py --out /tmp/fixed.jsonl                     # about 22 min
    .venv/bin/python bench/sweep_backlog.py --out /tmp/varied.jsonl --shape varied --trials-default 2
    .venv/bin/python bench/sweep_backlog.py --analyse /tmp/fixed.jsonl
    .venv/bin/python bench/sweep_backlog.py --analyse /tmp/varied.jsonl

The figures and the conclusion (no in-step signal is robust; the step's length is the remedy) are in
docs/sweep.md, "Step length".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.runtime.builtin_target import BuiltinTarget
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.capacity.sweep_plan import step_scenario
from cliffwatch.domain.capacity.sweep_spec import SweepArrival, SweepSpec
from cliffwatch.domain.outcomes import NS_PER_S, RequestRecord
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.scenario.target_model import TargetModel
from cliffwatch.services.memory import CollectingObserver, NoFaultInjector
from cliffwatch.services.runner import RunService

# The sharp, small target of tests/integration/test_sweep_cli.py: it saturates at 13.1 req/s, and its 1-s
# e2e SLO does not bind before that (docs/capacity-model.md: saturation-bound).
MODEL = TargetModel(max_batch=4, decode_base_ms=10, decode_per_seq_ms=2)
PROMPT, OUTPUT = 16, 16
SATURATION = MODEL.saturation_rps(PROMPT, OUTPUT)
SHAPES: dict[str, dict[str, Any]] = {
    "fixed": {"prompt_tokens": PROMPT, "max_tokens": OUTPUT},
    # Same means, but answers from 4 to 28 tokens: each request's e2e now depends on its own length.
    "varied": {
        "prompt_tokens": {"dist": "uniform", "min": 8, "max": 24},
        "max_tokens": {"dist": "uniform", "min": 4, "max": 28},
    },
}


def scenario(shape: str) -> Scenario:
    return parse_scenario(
        {
            "name": "backlog",
            "seed": 7,
            "target": {"url": "builtin", "builtin": MODEL.to_dict(), "request": {"model": "sim-llm", **SHAPES[shape]}},
            "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
            "client": {"retry": {"policy": "none"}},
            "phases": [
                {"name": "p", "role": "baseline", "duration_s": 2, "arrival": {"process": "poisson", "rate": 2}}
            ],
        },
        source="sweep_backlog",
    )


FRACTIONS = (0.3, 0.5, 0.7, 0.9, 1.05, 1.1, 1.2, 1.3)
LENGTHS = {"default": (4.0, 10.0), "short": (1.0, 2.0)}  # (warm-up, window) seconds


class Keep:
    """A record sink keeping (scheduled, first sent, end, outcome) of every request, in seconds."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, float | None, float | None, str, float | None]] = []

    def add(self, record: RequestRecord) -> None:
        first, final = (record.attempts[0], record.attempts[-1]) if record.attempts else (None, None)
        token = None if final is None or final.first_token_ns is None else final.first_token_ns / NS_PER_S
        self.rows.append(
            (
                record.scheduled_ns / NS_PER_S,
                None if first is None else first.sent_ns / NS_PER_S,
                None if final is None else final.end_ns / NS_PER_S,
                record.outcome.value,
                token,
            )
        )

    async def flush(self) -> None:
        return None


async def measure(out: Path, trials: dict[str, int], arrivals: Sequence[str], shape: str) -> None:
    clock = MonotonicClock()
    base = scenario(shape)
    assert base.target.builtin is not None
    async with BuiltinTarget(base.target.builtin) as url, HttpExecutor(base, url) as executor:
        await executor.preflight()
        with out.open("a", encoding="utf-8") as sink:
            for length, (warmup_s, step_s) in LENGTHS.items():
                for arrival in arrivals:
                    for trial in range(1, trials[length] + 1):
                        for fraction in FRACTIONS:
                            rate = round(fraction * SATURATION, 3)
                            spec = SweepSpec(
                                start=1, stop=2, step_s=step_s, warmup_s=warmup_s, arrival=SweepArrival(arrival)
                            )
                            row = await one_step(base, executor, clock, url, spec, rate, trial)
                            row.update(length=length, arrival=arrival, fraction=fraction, trial=trial, shape=shape)
                            sink.write(json.dumps(row) + "\n")
                            sink.flush()
                            print(f"{length} {arrival} {fraction:.2f}×sat trial {trial}: {summary(row)}", flush=True)


async def one_step(
    base: Scenario, executor: HttpExecutor, clock: MonotonicClock, url: str, spec: SweepSpec, rate: float, trial: int
) -> dict[str, Any]:
    step = step_scenario(base, rate, spec, None, variant="bench", trial=trial)
    keep = Keep()
    service = RunService(
        clock=clock,
        generator=OpenLoopGenerator(step, executor, clock),
        faults=NoFaultInjector("none"),
        sink=keep,
        observer=CollectingObserver(),
    )
    result = await service.execute(step, run_id="bench", target_url=url)
    while executor.in_flight:  # noqa: ASYNC110 - the executor keeps a count, not an event
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)
    measured = result.metrics.phases[-1]
    return {
        "rate": rate,
        "warmup_s": spec.warmup_s,
        "step_s": spec.step_s,
        "offered": measured.offered,
        "on_time": measured.on_time,
        "generator_limited": result.generator.limited,
        "requests": keep.rows,
    }


def summary(row: dict[str, Any]) -> str:
    stats = statistics_of(row)
    return (
        f"{row['on_time']}/{row['offered']} on time; e2e slope {stats['e2e_slope']:.0f} ms/s, "
        f"in-flight slope {stats['inflight_slope'] / row['rate']:.1%} of rate, done/sent {stats['done_ratio']:.3f}"
    )


# -- analysis -------------------------------------------------------------------------------------


def ols_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    if len(xs) < 3:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def in_flight_at(rows: Iterable[Sequence[Any]], t: float) -> int:
    return sum(1 for r in rows if r[1] is not None and r[2] is not None and r[1] <= t < r[2])


def statistics_of(row: dict[str, Any]) -> dict[str, float]:
    """Candidate statistics, each over the whole step after its first second (warm-up included: a short step
    needs every second), and over the measured window alone."""
    warmup, window = row["warmup_s"], row["step_s"]
    end = warmup + window
    skip = min(1.0, warmup / 2)  # the batch filling from empty is not a trend
    rows = row["requests"]
    sent = [r for r in rows if r[1] is not None and r[2] is not None]
    in_step = [r for r in sent if skip <= r[0] < end]
    e2e = [(r[0], (r[2] - r[0]) * 1000) for r in in_step]
    slope = ols_slope([x for x, _ in e2e], [y for _, y in e2e])
    ttft = [(r[0], (r[4] - r[0]) * 1000) for r in in_step if len(r) > 4 and r[4] is not None]
    ttft_slope = ols_slope([x for x, _ in ttft], [y for _, y in ttft]) if len(ttft) == len(in_step) else math.nan
    quarter = max(1, len(e2e) // 4)
    first, last = [y for _, y in e2e[:quarter]], [y for _, y in e2e[-quarter:]]
    growth = statistics.median(last) - statistics.median(first) if first and last else 0.0
    times = [skip + i * 0.05 for i in range(int((end - skip) / 0.05) + 1)]
    inflight = [in_flight_at(sent, t) for t in times]
    window_sent = sum(1 for r in sent if warmup <= r[1] < end)
    window_done = sum(1 for r in sent if warmup <= r[2] < end)
    return {
        "e2e_slope": slope,  # ms of e2e per second of schedule
        "ttft_slope": ttft_slope,  # the same for the wait to the first token (nan when not streamed)
        "e2e_growth": growth,  # median e2e of the last quarter minus the first quarter, ms
        "inflight_slope": ols_slope(times, inflight),  # requests per second
        "inflight_delta": statistics.fmean(inflight[-10:]) - statistics.fmean(inflight[:10]),
        "done_ratio": window_done / window_sent if window_sent else 1.0,
    }


def analyse(paths: Sequence[Path]) -> None:
    groups: dict[tuple[str, str, float], list[dict[str, float]]] = defaultdict(list)
    shapes = set()
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            stats = statistics_of(row)
            stats["rel_inflight_slope"] = stats["inflight_slope"] / row["rate"]
            stats["rel_e2e_slope"] = stats["e2e_slope"] / 1000  # seconds of wait per second: (λ − μ)/μ when over
            stats["rel_ttft_slope"] = stats["ttft_slope"] / 1000
            shapes.add(row.get("shape", "fixed"))
            stats["attainment"] = row["on_time"] / row["offered"] if row["offered"] else math.nan
            groups[(row["length"], row["arrival"], row["fraction"])].append(stats)
    names = ("attainment", "rel_e2e_slope", "rel_ttft_slope", "rel_inflight_slope", "inflight_delta", "done_ratio")
    print(f"{'/'.join(sorted(shapes))}: saturation {SATURATION:.2f} req/s; values are min / median / max over trials")
    for key in sorted(groups):
        length, arrival, fraction = key
        cells = []
        for name in names:
            values = [s[name] for s in groups[key]]
            cells.append(f"{name} {min(values):.3g}/{statistics.median(values):.3g}/{max(values):.3g}")
        print(f"{length:7} {arrival:8} {fraction:4.2f}× n={len(groups[key])}: " + "; ".join(cells))
    print()
    thresholds = {
        "rel_e2e_slope": (0.02, 0.03, 0.05, 0.1),
        "rel_ttft_slope": (0.02, 0.03, 0.05, 0.1),
        "rel_inflight_slope": (0.02, 0.03, 0.05, 0.1),
        "done_ratio": (0.98, 0.97, 0.95, 0.9),
    }
    for name, levels in thresholds.items():
        for level in levels:
            for length in LENGTHS:
                for arrival in ("constant", "poisson"):
                    below = [
                        fires(name, s, level)
                        for (le, ar, fr), ss in groups.items()
                        if le == length and ar == arrival and fr < 1
                        for s in ss
                    ]
                    above = {
                        fr: [fires(name, s, level) for s in ss]
                        for (le, ar, fr), ss in groups.items()
                        if le == length and ar == arrival and fr > 1
                    }
                    if not below:
                        continue
                    detected = ", ".join(f"{fr:.2f}× {sum(v)}/{len(v)}" for fr, v in sorted(above.items()))
                    print(
                        f"{name} {'<' if name == 'done_ratio' else '>'} {level}: {length} {arrival}: "
                        f"false positives {sum(below)}/{len(below)} at 0.3–0.9×; detected {detected}"
                    )


def fires(name: str, stats: dict[str, float], level: float) -> bool:
    return stats[name] < level if name == "done_ratio" else stats[name] > level


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="append measured steps (JSON lines) here")
    parser.add_argument("--analyse", type=Path, nargs="*", help="analyse these files")
    parser.add_argument("--trials-default", type=int, default=3)
    parser.add_argument("--trials-short", type=int, default=6)
    parser.add_argument("--arrivals", default="constant,poisson")
    parser.add_argument("--lengths", default="short,default")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="fixed", help="request lengths: fixed or varied")
    args = parser.parse_args(argv)
    if args.analyse:
        analyse(args.analyse)
        return 0
    if args.out is None:
        parser.error("--out or --analyse")
    chosen = set(args.lengths.split(","))
    for name in list(LENGTHS):
        if name not in chosen:
            del LENGTHS[name]
    asyncio.run(
        measure(
            args.out,
            {"default": args.trials_default, "short": args.trials_short},
            args.arrivals.split(","),
            args.shape,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
