"""How often does the drift rule flag a steady target, and how often does it catch one whose speed drifts? The
figures of docs/sweep.md, "A target whose speed drifts".

Runs the default ``--auto`` sweep (the end-of-sweep recheck included) on the simulated servers of
``bench/sweep_accuracy.py`` (Lindley's recursion for every request's exact wait, no HTTP), ``--reps`` times per
configuration, and counts the sweeps in which ``domain/capacity/drift.find_drift`` found two trials at one rate
that disagree (the whole rule: the guards included), at each interval level of ``--levels``:

- **steady**: the server keeps its speed; every flag is a false alarm;
- **drifting** (``--drift-factor``, 1.5 by default): from each ``--drift-after`` second into the sweep (steps that
  start then or later) every service time is that many times longer; a flag is a detection. The usable rate found
  (the drift rule applied) is compared with the slow period's truth: the sweep should size for it.

A step's start counts its warm-up, window and cool-down, not the tail of its in-flight requests.

    .venv/bin/python bench/sweep_drift.py --reps 200
    .venv/bin/python bench/sweep_drift.py --reps 200 --service-ms 10 --arrivals poisson
    .venv/bin/python bench/sweep_drift.py --reps 200 --slots 4 --service-ms 1280 --service-cv 0.3
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from cliffwatch.domain.capacity.arrival_luck import ReferenceSlot
from cliffwatch.domain.capacity.capacity import CapacitySearch, SearchConfig, StepStats, summarize
from cliffwatch.domain.capacity.capacity_steps import fit_luck
from cliffwatch.domain.capacity.drift import DRIFT_CONFIDENCE, find_drift
from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from sweep_accuracy import TARGET, Server, simulated_step, truth


def one_sweep(
    server: Server, *, slo_s: float, poisson: bool, rep: int, drift_after_s: float | None, factor: float
) -> tuple[list[StepStats], float | None]:
    """The steps of one default auto sweep (each with when it started) and the usable rate it found, the drift rule
    applied."""
    spec = SweepSpec(auto=True)
    search = CapacitySearch(SearchConfig.from_spec(spec))
    reference = ReferenceSlot()
    slow = server._replace(service_s=server.service_s * factor)
    seconds = 0.0
    while (asked := search.next_rate()) is not None:
        window = spec.extended_s if asked.extended else spec.step_s
        now = slow if drift_after_s is not None and seconds >= drift_after_s else server
        step = simulated_step(asked.rate, asked.trial, server=now, slo_s=slo_s, window_s=window,
                              warmup_s=spec.warmup_s, poisson=poisson, seed=f"{rep}:{asked.rate}:{asked.trial}",
                              reference=reference)  # fmt: skip
        search.record(replace(step, extended=asked.extended, recheck=asked.recheck, started_s=seconds))
        seconds += spec.warmup_s + window + spec.cooldown_s
    result = summarize(search.steps, target=TARGET, e2e_slo_ms=slo_s * 1000, finished_because="")
    return list(search.steps), result.usable_rps


def flagged(steps: list[StepStats], *, slo_s: float, confidence: float) -> bool:
    luck = fit_luck(steps)
    return find_drift(steps, e2e_slo_ms=slo_s * 1000, luck=luck, confidence=confidence) is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--service-ms", type=float, default=320.0)
    parser.add_argument("--slots", type=int, default=1)
    parser.add_argument("--service-cv", type=float, default=0.0)
    parser.add_argument("--slo-factors", default="5,10")
    parser.add_argument("--arrivals", default="constant,poisson")
    parser.add_argument("--levels", default=f"0.99,{DRIFT_CONFIDENCE},0.9999")
    parser.add_argument("--drift-factor", type=float, default=1.5, help="the slow period's service time, × the fast")
    parser.add_argument("--drift-after", default="120,180", help="when the slow period starts (s into the sweep)")
    args = parser.parse_args()
    server = Server(args.service_ms / 1000, args.slots, args.service_cv)
    levels = [float(level) for level in args.levels.split(",")]
    afters = [float(after) for after in args.drift_after.split(",")]
    exact = server.slots == 1 and server.cv == 0
    print(f"({server.slots} slot(s), {args.service_ms:g} ms, CV {server.cv:g}; default auto sweeps with the "
          f"recheck; drifting: service × {args.drift_factor:g} from then on; {args.reps} sweeps each)")  # fmt: skip
    print("| SLO | arrivals | target | steps (median) | " + " | ".join(f"flagged at {lv:g}" for lv in levels)
          + " | usable found (median) | truth (the slow period's) |")  # fmt: skip
    print("|---|---|---|---:|" + "---:|" * len(levels) + "---:|---:|")
    for factor in (float(f) for f in args.slo_factors.split(",")):
        slo_s = factor * server.service_s
        for arrival in args.arrivals.split(","):
            for after in (None, *afters):
                counts, found, hits = [], [], dict.fromkeys(levels, 0)
                for rep in range(args.reps):
                    steps, usable = one_sweep(server, slo_s=slo_s, poisson=arrival == "poisson", rep=rep,
                                              drift_after_s=after, factor=args.drift_factor)  # fmt: skip
                    counts.append(len(steps))
                    found.append(usable or 0.0)
                    for level in levels:
                        hits[level] += flagged(steps, slo_s=slo_s, confidence=level)
                slow_s = server.service_s * (1 if after is None else args.drift_factor)
                expected = f"{truth(arrival, slo_s / slow_s, slow_s):.3f}" if exact else "–"
                kind = "steady" if after is None else f"× {args.drift_factor:g} from {after:g} s"
                shown = " | ".join(f"{hits[lv]}/{args.reps}" for lv in levels)
                print(f"| {factor:g} × S | {arrival} | {kind} | {statistics.median(counts):g} | {shown} | "
                      f"{statistics.median(found):.3g} | {expected} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
