"""Generator fidelity: up to which request rate does cliffwatch's open-loop generator keep its schedule?

Against a fixed-latency loopback server (``fixed_latency_server.py``, in its own process), at increasing
constant rates, two generators are measured in the same run, one after the other at each rate:

- ``cliffwatch``: ``OpenLoopGenerator`` over ``HttpExecutor``, exactly as a run drives them (plan, retries
  off, records, self-watch), with a listener that only keeps lag and latency;
- ``peer``: a minimal open-loop generator written directly on aiohttp (same connector limits; sleep until
  each scheduled time, ``create_task`` a request, keep only lag and latency);

and, as the floor under both, ``timer``: the same schedule kept by ``asyncio.sleep`` with no requests.

Per rate and generator it reports the achieved/intended rate, schedule lag p50/p99/max (first send minus
scheduled time), latency overhead over the server's known latency, and client CPU seconds per 1,000
requests. A generator is *faithful* at a rate when achieved >= 99 % of intended and p99 lag <= 2 ms, and
*saturated* when it is short of the rate or its p99 lag passes 20 ms. The highest faithful rate of each,
the highest rate before saturation, and cliffwatch's figures as ratios against the peer's are what compare
across machines. ``--json`` writes everything; ``--quick`` is a short smoke run; ``--profile`` profiles
cliffwatch's passes. See docs/performance.md.

    .venv/bin/python bench/generator_fidelity.py --mode http --json http.json
    .venv/bin/python bench/generator_fidelity.py --mode sse --json sse.json
    .venv/bin/python bench/generator_fidelity.py --mode sse --tokenizer DIR   # token-exact prompts
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import http.client
import json
import os
import platform
import pstats
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from cliffwatch import __version__
from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.loadgen.token_prompts import TokenExactPrompts, load_counter
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.traffic.plan import PlannedRequest, iter_plan
from fidelity_figures import (
    GENERATORS,
    MAX_P99_LAG_MS,
    MIN_ACHIEVED,
    NS_PER_S,
    TIMER,
    Config,
    Row,
    Samples,
    header,
    line,
    print_summary,
    ratios,
    summarise,
)
from fidelity_peer import POOL_SIZE, PROMPT_WORDS, START_LEAD_S, run_peer, run_timer_floor

SERVER_SCRIPT = Path(__file__).with_name("fixed_latency_server.py")
DEFAULT_RATES = (50, 100, 200, 400, 800, 1200, 1600, 2000, 2400, 2800, 3200, 4000, 4800, 5600, 6400, 8000)
QUICK_RATES = (50, 100)
GIVE_UP_AFTER = 2  # a generator saturated at this many rates in a row is not run at higher ones


# --- cliffwatch ------------------------------------------------------------------------------------------


class _Collector:
    """A ``GeneratorListener`` that keeps only what the peer keeps."""

    def __init__(self, samples: Samples) -> None:
        self.samples = samples

    def dispatched(self, request: PlannedRequest, at_ns: int) -> None:
        return None

    def finished(self, record: RequestRecord) -> None:
        samples = self.samples
        samples.planned += 1
        samples.last_scheduled_ns = max(samples.last_scheduled_ns, record.scheduled_ns)
        if not record.attempts:
            samples.not_sent += 1
            return
        first, last = record.attempts[0], record.attempts[-1]
        samples.lag_ns.append(first.sent_ns - record.scheduled_ns)
        samples.last_sent_ns = max(samples.last_sent_ns, first.sent_ns)
        if last.succeeded:
            samples.latency_ns.append(last.end_ns - first.sent_ns)
        else:
            samples.failed += 1


def cliffwatch_scenario(config: Config, base_url: str, rate: float, duration_s: float) -> Scenario:
    """A one-phase constant-rate scenario; the SLO is loose so nothing times out at these latencies."""
    if config.mode == "sse":
        target: dict[str, Any] = {
            "url": base_url,
            "api": "openai-chat",
            "request": {"model": "bench", "prompt_tokens": PROMPT_WORDS, "max_tokens": config.chunks},
        }
    else:
        target = {"url": base_url, "api": "http", "request": {"method": "GET", "path": "/"}}
    document = {
        "name": "bench-generator-fidelity",
        "seed": 1,
        "slo": {"e2e_ms": 10_000, "timeout_ms": 10_000},
        "target": target,
        "client": {"pool_size": POOL_SIZE, "max_in_flight": 100_000},
        "phases": [
            {
                "name": "load",
                "role": "baseline",
                "duration_s": duration_s,
                "arrival": {"process": "constant", "rate": rate},
            }
        ],
    }
    return parse_scenario(document, source="bench")


async def run_cliffwatch(config: Config, base_url: str, rate: float) -> Samples:
    """cliffwatch at ``rate``: preflight, a warm-up pass, then the measured one, on one executor."""
    measured = cliffwatch_scenario(config, base_url, rate, config.duration_s)
    prompts = None
    if config.tokenizer is not None and config.mode == "sse":  # prepared here, before any rate is measured
        # The tokenizer given on the command line is the reader's own: its folder is the data directory.
        where = (Path(config.tokenizer).parent,)
        prompts = TokenExactPrompts(load_counter(config.tokenizer, chat=True, data_dirs=where), path=config.tokenizer)
    async with HttpExecutor(measured, base_url, prompts=prompts) as executor:
        await executor.preflight()
        if config.warmup_s > 0:
            await _cliffwatch_pass(cliffwatch_scenario(config, base_url, rate, config.warmup_s), executor)
        gc.collect()
        return await _cliffwatch_pass(measured, executor)


async def _cliffwatch_pass(scenario: Scenario, executor: HttpExecutor) -> Samples:
    clock = MonotonicClock()
    samples = Samples()
    generator = OpenLoopGenerator(scenario, executor, clock)
    cpu_start = time.process_time()
    start = clock.now_ns() + round(START_LEAD_S * NS_PER_S)
    report = await generator.run(iter_plan(scenario), start_ns=start, listener=_Collector(samples))
    samples.cpu_s = time.process_time() - cpu_start
    samples.wall_s = (clock.now_ns() - start) / NS_PER_S + START_LEAD_S
    samples.limited, samples.reasons = report.limited, report.reasons
    return samples


# --- running ---------------------------------------------------------------------------------------------


class FixedLatencyServer:
    """The loopback target in its own process; ``with`` starts it and ends it."""

    def __init__(self, config: Config) -> None:
        self.args = [
            sys.executable,
            str(SERVER_SCRIPT),
            "--latency-ms",
            str(config.latency_ms),
            "--chunks",
            str(config.chunks),
            "--chunk-interval-ms",
            str(config.chunk_interval_ms),
        ]
        self.process: subprocess.Popen[str] | None = None
        self.port = 0

    def __enter__(self) -> FixedLatencyServer:
        self.process = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        said = self.process.stdout.readline()
        if not said.startswith("PORT "):
            self.__exit__()
            raise RuntimeError(f"the fixed-latency server did not start (said {said!r})")
        self.port = int(said.split()[1])
        return self

    def __exit__(self, *exc: object) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.close()  # the server stops at the end of its input
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu_s(self) -> float:
        """The server process's CPU seconds so far (asked over a plain blocking connection)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            connection.request("GET", "/__stats")
            return float(json.loads(connection.getresponse().read())["cpu_s"])
        finally:
            connection.close()


def measure(
    config: Config, server: FixedLatencyServer, generator: str, rate: float, profiler: cProfile.Profile | None
) -> Row:
    """One generator at one rate, in a fresh event loop, with the server's CPU share over the same time;
    cliffwatch's passes run under ``profiler`` when one is given."""
    runner = {"cliffwatch": run_cliffwatch, "peer": run_peer, TIMER: run_timer_floor}[generator]
    profiler = profiler if generator == "cliffwatch" else None
    server_cpu, wall = server.cpu_s(), time.perf_counter()
    if profiler is not None:
        profiler.enable()
    try:
        samples = asyncio.run(runner(config, server.base_url, rate))
    finally:
        if profiler is not None:
            profiler.disable()
    server_busy = (server.cpu_s() - server_cpu) / (time.perf_counter() - wall)
    return summarise(generator, rate, samples, config, server_busy)


def run(config: Config, out: TextIO = sys.stdout, profiler: cProfile.Profile | None = None) -> dict[str, Any]:
    """The timer floor and both generators at every rate, until both generators are saturated (short of the
    rate, or far behind schedule) at two rates in a row; prints the table; returns the results."""
    load_before = os.getloadavg()
    rows: list[Row] = []
    misses = dict.fromkeys(GENERATORS, 0)
    print(header(), file=out, flush=True)
    with FixedLatencyServer(config) as server:
        for index, rate in enumerate(config.rates):
            rows.append(measure(config, server, TIMER, rate, None))
            print(line(rows[-1]), file=out, flush=True)
            # Alternate who goes first, so neither always runs on the other's leftovers (TIME_WAIT, caches).
            order = GENERATORS if index % 2 == 0 else GENERATORS[::-1]
            for generator in order:
                if misses[generator] >= GIVE_UP_AFTER:
                    continue
                row = measure(config, server, generator, rate, profiler)
                rows.append(row)
                misses[generator] = misses[generator] + 1 if row.saturated else 0
                print(line(row), file=out, flush=True)
            if all(count >= GIVE_UP_AFTER for count in misses.values()):
                break
    result = {
        "config": asdict(config) | {"server_time_ms": config.server_time_ms},
        "criteria": {"min_achieved_ratio": MIN_ACHIEVED, "max_lag_p99_ms": config.max_lag_p99_ms},
        "machine": _machine(load_before),
        "rows": [asdict(row) for row in rows],
        "ratios": ratios(rows, [r for r in config.rates if any(row.rate == r for row in rows)]),
    }
    print_summary(result, out)
    return result


def _machine(load_before: tuple[float, float, float]) -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")), model)
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "cliffwatch": __version__,
        "load_before": list(load_before),
        "load_after": list(os.getloadavg()),
    }


def parse_args(argv: Sequence[str] | None = None) -> tuple[Config, Path | None, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mode", choices=("http", "sse"), default="http", help="plain JSON or an OpenAI stream")
    parser.add_argument("--rates", help="comma-separated rates (req/s), tried in increasing order")
    parser.add_argument("--duration", type=float, help="measured seconds per rate (default 3, quick 0.75)")
    parser.add_argument("--warmup", type=float, help="warm-up seconds per rate, not measured (default 0.5, quick 0.1)")
    parser.add_argument("--server-latency-ms", type=float, default=20.0, help="server delay before answering")
    parser.add_argument("--chunks", type=int, default=16, help="sse: token chunks per answer")
    parser.add_argument("--chunk-interval-ms", type=float, default=2.0, help="sse: gap between token chunks")
    parser.add_argument(
        "--max-lag-p99-ms", type=float, default=MAX_P99_LAG_MS, help="faithful: p99 schedule lag at most this"
    )
    parser.add_argument(
        "--tokenizer", help="sse: build token-exact prompts with this Hugging Face tokenizer (request.tokenizer)"
    )
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--quick", action="store_true", help="a short smoke run: rates 50,100 for 0.75 s each")
    parser.add_argument(
        "--profile", type=Path, help="profile cliffwatch's passes (cProfile) into this file; inflates its CPU figures"
    )
    args = parser.parse_args(argv)
    try:
        rates = tuple(sorted(float(r) for r in args.rates.split(","))) if args.rates else None
    except ValueError:
        parser.error(f"--rates must be comma-separated numbers, got {args.rates!r}")
    if rates is not None and min(rates) <= 0:
        parser.error("--rates must be positive numbers")
    if args.chunks < 1:
        parser.error("--chunks must be >= 1")
    config = Config(
        mode=args.mode,
        rates=rates or (QUICK_RATES if args.quick else DEFAULT_RATES),
        duration_s=args.duration if args.duration is not None else (0.75 if args.quick else 3.0),
        warmup_s=args.warmup if args.warmup is not None else (0.1 if args.quick else 0.5),
        latency_ms=args.server_latency_ms,
        chunks=args.chunks,
        chunk_interval_ms=args.chunk_interval_ms,
        max_lag_p99_ms=args.max_lag_p99_ms,
        tokenizer=args.tokenizer,
    )
    return config, args.json, args.profile


def main(argv: Sequence[str] | None = None) -> int:
    config, json_path, profile_path = parse_args(argv)
    profiler = cProfile.Profile() if profile_path is not None else None
    result = run(config, profiler=profiler)
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if profiler is not None and profile_path is not None:
        profiler.dump_stats(profile_path)
        print(f"\ncliffwatch's passes, by own time (figures above are inflated by the profiler; {profile_path}):")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
