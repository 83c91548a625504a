"""How close does a default sweep come to a single slot's analytic capacity? The figures of docs/sweep.md.

Runs ``cliffwatch sweep --auto`` (``prepare_sweep``, every default but the arrivals) against two single-slot
servers whose capacity is known exactly (``domain/capacity/queueing.py``, docs/capacity-model.md "A single slot"):

- ``builtin``: the built-in target with ``max_batch: 1`` and 16 steps of 20 ms: 320 ms a request;
- ``slot``: ``bench/single_slot_server.py``, an independent process that serves one request at a time in
  320 ms, FIFO, with llama.cpp's ``/metrics`` names (the sweep scrapes them: ``target.metrics``).

with an end-to-end SLO of 5 × and 10 × the service time, constant and Poisson arrivals, ``--reps`` sweeps
each; every result is a JSON line in ``--out``. ``--analyse`` prints, per configuration, the usable capacity
found against the truth and how often the growth check fired at rates at or below 90 % of the truth.
``--simulate`` runs the same search and judging code on simulated steps of the same queues (Lindley's
recursion, no HTTP), many times over, in seconds: the spread a few real sweeps cannot show.

    .venv/bin/python bench/sweep_accuracy.py --out /tmp/accuracy.jsonl --reps 1      # about 70 min
    .venv/bin/python bench/sweep_accuracy.py --analyse /tmp/accuracy.jsonl
    .venv/bin/python bench/sweep_accuracy.py --simulate --reps 200
    .venv/bin/python bench/sweep_accuracy.py --simulate --reps 100 --step-seconds 60 --trials 5   # what it takes
    .venv/bin/python bench/sweep_accuracy.py --simulate --reps 50 --arrivals poisson --slots 16 --service-ms 2000

Simulated sweeps run with the arrival-luck correction (``domain/capacity/arrival_luck.py``) and without it, on a
server of ``--slots`` slots whose service time varies by ``--service-cv`` (lognormal; its truth bisected on a
long run when it is not one exact slot).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import json
import math
import random
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from cliffwatch.bootstrap.sweep import prepare_sweep
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.arrival_luck import ReferenceSlot, WindowRequest
from cliffwatch.domain.capacity.capacity import CapacitySearch, SearchConfig, StepStats, summarize
from cliffwatch.domain.capacity.growth import Growth, latency_trend
from cliffwatch.domain.capacity.queueing import dd1_usable_rate, md1_usable_rate
from cliffwatch.domain.capacity.sweep_spec import SweepArrival, SweepSpec
from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.services.memory import CollectingObserver
from cliffwatch.services.overrides import with_overrides

SERVICE_S = 0.32
TOKENS = 16
TARGET = 0.99
SERVER = Path(__file__).with_name("single_slot_server.py")


def truth(arrival: str, slo_factor: float, service_s: float = SERVICE_S) -> float:
    slo = slo_factor * service_s
    if arrival == "constant":
        return dd1_usable_rate(service_s=service_s, slo_s=slo)
    return md1_usable_rate(service_s=service_s, slo_s=slo, attainment=TARGET)


def scenario(target: str, url: str | None, slo_factor: float) -> Scenario:
    slo_ms = slo_factor * SERVICE_S * 1000
    if target == "builtin":
        # 16 steps of 19 + 1 ms: a lone request takes exactly 320 ms (no prefill)
        builtin = {"max_batch": 1, "decode_base_ms": 19, "decode_per_seq_ms": 1, "prefill_base_ms": 0,
                   "prefill_per_token_ms": 0}  # fmt: skip
        where: dict[str, Any] = {"url": "builtin", "builtin": builtin, "metrics": {}}
    else:
        where = {"url": url, "metrics": {"engine": "llamacpp"}}
    return parse_scenario({
        "name": f"single-slot-{target}",
        "seed": 1,
        "target": {**where, "request": {"model": "sim-llm", "prompt_tokens": 8, "max_tokens": TOKENS}},
        "slo": {"e2e_ms": slo_ms, "timeout_ms": 3 * slo_ms},
        "client": {"pool_size": 256},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 5, "arrival": {"process": "constant", "rate": 1}}],
    })  # fmt: skip


@contextlib.contextmanager
def slot_server() -> Iterator[str]:
    process = subprocess.Popen([sys.executable, str(SERVER), "--service-ms", str(SERVICE_S * 1000), "--tokens",
                                str(TOKENS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline().split()[1])
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def step_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    steps = document["variants"][0]["result"]["steps"] if document.get("variants") else []
    rows = []
    for s in steps:
        growth = s.get("growth") or {}
        rows.append({"rate": s["rate"], "trial": s["trial"], "extended": s.get("extended", False),
                     "attainment": s["attainment"], "growing": bool(growth.get("growing")),
                     "latency": growth.get("latency"), "queue": growth.get("queue"),
                     "generator_limited": s.get("generator_limited"), "generator_reasons": s.get("generator_reasons"),
                     "offered": s.get("offered"), "on_time": s.get("on_time")})  # fmt: skip
    return rows


async def one_sweep(target: str, url: str | None, slo_factor: float, arrival: str, rep: int) -> dict[str, Any]:
    base = with_overrides(scenario(target, url, slo_factor), seed=1000 + rep)
    spec = SweepSpec(auto=True, arrival=SweepArrival(arrival))
    started = time.monotonic()
    async with prepare_sweep(Settings.from_env({}), base, spec, observer=CollectingObserver()) as sweep:
        outcome = await sweep.run()
    document = outcome.to_dict()
    expected = truth(arrival, slo_factor)
    usable = outcome.usable_rps
    return {"target": target, "slo_factor": slo_factor, "arrival": arrival, "rep": rep, "truth": expected,
            "usable": usable, "error": None if usable is None else usable / expected - 1,
            "status": outcome.status.value, "minutes": (time.monotonic() - started) / 60,
            "verdict": document["variants"][0]["result"]["verdict"] if document.get("variants") else None,
            "luck": document["variants"][0]["result"].get("luck_correction") if document.get("variants") else None,
            "steps": step_rows(document)}  # fmt: skip


async def measure(out: Path, reps: int, targets: list[str], factors: list[float], arrivals: list[str]) -> None:
    with contextlib.ExitStack() as stack, out.open("a", encoding="utf-8") as sink:
        url = stack.enter_context(slot_server()) if "slot" in targets else None
        for rep in range(reps):
            for target in targets:
                for factor in factors:
                    for arrival in arrivals:
                        row = await one_sweep(target, url, factor, arrival, rep)
                        sink.write(json.dumps(row) + "\n")
                        sink.flush()
                        error = "–" if row["error"] is None else f"{row['error'] * 100:+.1f} %"
                        print(
                            f"{target} SLO {factor:g}×S {arrival} rep {rep}: usable {row['usable']} "
                            f"(truth {row['truth']:.3f}, {error}) in {row['minutes']:.1f} min",
                            flush=True,
                        )


def analyse(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    groups: dict[tuple[str, float, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["target"], row["slo_factor"], row["arrival"])].append(row)
    print("| target | SLO | arrivals | truth (req/s) | usable found | error | within ±10 % | growth alarms at ≤ 90 % | "
          "extended steps | luck corrected | minutes |")  # fmt: skip
    print("|---|---|---|---:|---|---|---:|---:|---:|---:|---:|")
    for (target, factor, arrival), members in sorted(groups.items()):
        found = [m["usable"] for m in members]
        errors = [m["error"] for m in members if m["error"] is not None]
        below = [s for m in members for s in m["steps"] if s["rate"] <= 0.9 * m["truth"]
                 and (s["latency"] is not None or s["queue"] is not None)]  # fmt: skip
        alarms = sum(1 for s in below if s["growing"])
        extended = sum(1 for m in members for s in m["steps"] if s["extended"])
        within = sum(1 for e in errors if abs(e) <= 0.10)
        shown = ", ".join("–" if u is None else f"{u:g}" for u in found)
        spread = ", ".join(f"{e * 100:+.0f} %" for e in errors)
        # older rows lack "luck": their verdict says when the usable rate was judged corrected
        corrected = sum(1 for m in members if (m.get("luck") or {}).get("applied")
                        or "corrected for the luck" in (m.get("verdict") or ""))  # fmt: skip
        print(
            f"| {target} | {factor:g} × S | {arrival} | {members[0]['truth']:.3f} | {shown} | {spread} | "
            f"{within}/{len(members)} | {alarms}/{len(below)} | {extended} | {corrected}/{len(members)} | "
            f"{statistics.median(m['minutes'] for m in members):.1f} |"
        )


# -- simulation: the same search on modelled steps -----------------------------------------------------------


class Server(NamedTuple):
    """A simulated FIFO server: ``slots`` requests at once, each served in ``service_s`` on average (lognormal
    with coefficient of variation ``cv``; 0: always exactly)."""

    service_s: float
    slots: int = 1
    cv: float = 0.0

    def services(self, rng: random.Random, count: int) -> list[float]:
        if self.cv == 0:
            return [self.service_s] * count
        sigma2 = math.log(1 + self.cv**2)
        mu = math.log(self.service_s) - sigma2 / 2
        return [rng.lognormvariate(mu, math.sqrt(sigma2)) for _ in range(count)]

    def ends(self, arrivals: list[float], services: list[float]) -> list[tuple[float, float]]:
        """(start of service, end) of each arrival, every slot free at 0, first come first served."""
        free = [0.0] * self.slots
        out = []
        for at, service in zip(arrivals, services, strict=True):
            start = max(at, heapq.heappop(free))
            heapq.heappush(free, start + service)
            out.append((start, start + service))
        return out

    def truth(self, arrival: str, slo_s: float) -> float:
        """The usable rate: analytic for one exact slot (``domain/capacity/queueing.py``), else bisected on a long run
        (400,000 arrivals: the 1 % tail within about 2 %)."""
        if self.slots == 1 and self.cv == 0:
            return truth(arrival, slo_s / self.service_s, self.service_s)
        low, high = 0.05 / self.service_s, self.slots / self.service_s
        for _ in range(16):
            middle = (low + high) / 2
            rng = random.Random(7)
            at, arrivals = 0.0, []
            for _ in range(400_000):
                at += rng.expovariate(middle) if arrival == "poisson" else 1 / middle
                arrivals.append(at)
            spans = self.ends(arrivals, self.services(rng, len(arrivals)))
            late = sum(1 for a, (_, end) in zip(arrivals, spans, strict=True) if end - a > slo_s)
            low, high = (middle, high) if late <= (1 - TARGET) * len(arrivals) else (low, middle)
        return low


def simulated_step(rate: float, trial: int, *, server: Server, slo_s: float, window_s: float, warmup_s: float,
                   poisson: bool, seed: str, reference: ReferenceSlot | None) -> StepStats:  # fmt: skip
    """A step of ``server``, every request's wait exact (Lindley's recursion), read beside the sweep's
    reference slot (``domain/capacity/arrival_luck.py``) when ``reference`` is given and the arrivals are Poisson."""
    rng = random.Random(seed)
    at, arrivals = 0.0, []
    while True:
        at += rng.expovariate(rate) if poisson else 1 / rate
        if at >= warmup_s + window_s:
            break
        arrivals.append(at)
    spans = server.ends(arrivals, server.services(rng, len(arrivals)))
    # the first token comes a little after the request starts
    waits = [(a, start - a + 0.005) for a, (start, _) in zip(arrivals, spans, strict=True)]
    requests = [
        WindowRequest(a, end, a >= warmup_s, end - a <= slo_s) for a, (_, end) in zip(arrivals, spans, strict=True)
    ]
    offered = sum(1 for r in requests if r.measured)
    on_time = sum(1 for r in requests if r.measured and r.on_time)
    floor = min((w for _, w in waits), default=None)
    trend = latency_trend(waits, start_s=warmup_s, end_s=warmup_s + window_s, floor_s=floor)
    reading = reference.read(requests, rate=rate, e2e_slo_s=slo_s) if reference is not None and poisson else None
    none = {"p50": None, "p90": None, "p99": None}
    e2e = Histogram()  # the percentiles a real step reads: the answers at rank floor(q·(n − 1)), to 0.1 %
    for a, (_, end) in zip(arrivals, spans, strict=True):
        if a >= warmup_s:
            e2e.add((end - a) * 1000)
    percentiles = {f"p{q}": e2e.quantile(q / 100) for q in (50, 90, 99)}
    return StepStats(rate=rate, trial=trial, duration_s=window_s, offered=offered, on_time=on_time,
                     late=offered - on_time, shed=0, fast_shed=0, timeout=0, error=0, not_sent=0,
                     sent_rate=offered / window_s, goodput_rps=on_time / window_s, completions_per_s=offered / window_s,
                     tokens_per_s=TOKENS * offered / window_s, amplification=1.0, ttft_ms=none, itl_ms=none,
                     e2e_ms=percentiles, generator_limited=False, growth=Growth(latency=trend, queue=None),
                     reference=reading)  # fmt: skip


def simulate(
    reps: int,
    server: Server,
    *,
    step_s: float | None = None,
    trials: int | None = None,
    warmup_s: float | None = None,
    growth_check: bool = True,
    arrivals: tuple[str, ...] = ("constant", "poisson"),
) -> None:
    """The default sweep (or one with ``step_s`` windows and up to ``trials`` trials a rate) on simulated queues,
    with the arrival-luck correction and without it."""
    spec = SweepSpec(auto=True)
    if step_s is not None:
        spec = replace(spec, step_s=step_s)
    if trials is not None:
        spec = replace(spec, trials=trials)
    if warmup_s is not None:
        spec = replace(spec, warmup_s=warmup_s)
    service_s = server.service_s
    print(f"| SLO | arrivals | luck correction | truth (req/s) | within ±10 % | median error | error range | "
          f"growth alarms at ≤ 90 % | corrected | minutes |  ({server.slots} slot(s), {service_s * 1000:g} ms, "
          f"CV {server.cv:g}; {spec.warmup_s:g} + {spec.step_s:g} s steps, up to {spec.trials} trials, "
          f"growth check {'on' if growth_check else 'off'}, {reps} sweeps each)")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---|---:|---:|---:|")
    for factor in (5.0, 10.0):
        slo_s = factor * service_s
        for arrival in arrivals:
            expected = server.truth(arrival, slo_s)
            for luck in (True, False):
                if arrival == "constant" and not luck:
                    continue  # constant steps carry no reading: the same sweep twice
                errors, alarms, below, corrected, minutes = [], 0, 0, 0, []
                for rep in range(reps):
                    search = CapacitySearch(SearchConfig.from_spec(spec))
                    reference = ReferenceSlot() if luck else None
                    seconds = 0.0
                    while (asked := search.next_rate()) is not None:
                        window = spec.extended_s if asked.extended else spec.step_s
                        seconds += spec.warmup_s + window
                        step = simulated_step(asked.rate, asked.trial, server=server, slo_s=slo_s, window_s=window,
                                              warmup_s=spec.warmup_s, poisson=arrival == "poisson",
                                              seed=f"{rep}:{asked.rate}:{asked.trial}",
                                              reference=reference)  # fmt: skip
                        step = replace(step, extended=asked.extended)
                        if step.rate <= 0.9 * expected and step.growth and step.growth.latency:
                            below += 1
                            alarms += step.growing
                        search.record(step if growth_check else replace(step, growth=None))
                    result = summarize(search.steps, target=TARGET, e2e_slo_ms=slo_s * 1000, finished_because="")
                    corrected += result.luck is not None and result.luck.applied
                    errors.append((result.usable_rps or 0.0) / expected - 1)
                    minutes.append(seconds / 60)
                within = sum(1 for e in errors if abs(e) <= 0.10)
                print(f"| {factor:g} × S | {arrival} | {'on' if luck else 'off'} | {expected:.3f} | "
                      f"{within}/{reps} | {statistics.median(errors) * 100:+.1f} % | "
                      f"{min(errors) * 100:+.0f} … {max(errors) * 100:+.0f} % | "
                      f"{alarms}/{below} | {corrected}/{reps} | {statistics.median(minutes):.1f} |",
                      flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--analyse", type=Path)
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--service-ms", type=float, default=SERVICE_S * 1000, help="--simulate only")
    parser.add_argument("--step-seconds", type=float, help="--simulate only: the measured window (default 10)")
    parser.add_argument("--trials", type=int, help="--simulate only: most trials a rate (default 3)")
    parser.add_argument("--warmup-seconds", type=float, help="--simulate only: the warm-up (default 4)")
    parser.add_argument("--slots", type=int, default=1, help="--simulate only: requests the server serves at once")
    parser.add_argument(
        "--service-cv",
        type=float,
        default=0.0,
        help="--simulate only: the service time's coefficient of variation (lognormal; 0: exact)",
    )
    parser.add_argument("--no-growth-check", action="store_true", help="--simulate only")
    parser.add_argument("--targets", default="builtin,slot")
    parser.add_argument("--slo-factors", default="5,10")
    parser.add_argument("--arrivals", default="constant,poisson")
    args = parser.parse_args()
    if args.analyse:
        analyse(args.analyse)
    elif args.simulate:
        simulate(
            args.reps,
            Server(args.service_ms / 1000, args.slots, args.service_cv),
            step_s=args.step_seconds,
            trials=args.trials,
            warmup_s=args.warmup_seconds,
            growth_check=not args.no_growth_check,
            arrivals=tuple(args.arrivals.split(",")),
        )
    elif args.out:
        asyncio.run(measure(args.out, args.reps, args.targets.split(","),
                            [float(f) for f in args.slo_factors.split(",")], args.arrivals.split(",")))  # fmt: skip
    else:
        parser.error("give --out, --analyse or --simulate")


if __name__ == "__main__":
    main()
