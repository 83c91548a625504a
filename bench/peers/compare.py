"""cliffwatch against Vegeta, GuideLLM and AIPerf on one loopback server, measured in the same run.

The peers are installed by the benchmark into ``bench/.build/peers`` (``peers/install.py``, pinned). The
server is ``bench/arrivals_server`` (Go, ``GOMAXPROCS=1``, pinned to core 1): it answers after a fixed delay
(20 ms) and records every arrival on its own clock. Each tool but ``cliffwatch-w2`` runs pinned to core 0.

Three loads, each at rising constant rates (a tool stops rising after two rates in a row it did not hold):

- ``plain``: ``GET /load`` answered with a small JSON body: cliffwatch, ``cliffwatch-w2``, Vegeta, and
  ``asyncio-floor`` (``floor_client.py``: the least an asyncio process does to send it, as a yardstick);
- ``short``: an OpenAI chat stream of 16 token chunks 2 ms apart (≈ 50 ms): cliffwatch, GuideLLM, AIPerf;
- ``long``: 256 chunks (≈ 0.53 s, a real answer's length): the same tools.

Per tool and rate it reports the rate the **server** saw and its share of the intended requests, pacing as
the server saw it (inter-arrival CV, p99 drift from an even schedule), the tool's p99 latency error (p99 e2e
for plain HTTP, p99 TTFT for streams, minus the server's known delay), the tool's CPU per request **while
its load arrived** (its whole process tree, start-up left out and shown apart: see ``process_cpu.py``) and
its own error count. A rate is **held** when the server saw ≥ 99 % of the intended requests and the tool did
not flag itself (only cliffwatch judges its own generator); **faithful (N ms)** when also its p99 latency
error is ≤ N ms.

    .venv/bin/python bench/peers/compare.py --json peers.json
    .venv/bin/python bench/peers/compare.py --loads short --tools cliffwatch,aiperf --rates-short 100,200
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: arrivals and the peers package

from arrivals import ArrivalsServer, arrivals_server, judge_arrivals, pinned
from peers import install
from peers.aiperf import AIPerf
from peers.process_cpu import CpuSampler, load_window
from peers.tools import REPO, AsyncioFloor, Cliffwatch, GuideLLM, Load, Tool, ToolView, Vegeta

CLIENT_CORE = 0
LOADS = {"plain": 0, "short": 16, "long": 256}  # token chunks per answer
DEFAULT_RATES = {
    "plain": (500, 1000, 2000, 3000, 4000, 6000, 8000),
    "short": (50, 100, 200, 400, 800, 1000, 1200),
    "long": (25, 50, 100, 150, 200),
}
GIVE_UP_AFTER = 2  # rates in a row a tool did not hold
HANG_AFTER_S = 150  # beyond its pass: GuideLLM starts in about 20 s, AIPerf in 6


@dataclass
class Pass:
    load: str
    tool: str
    rate: float
    server: dict[str, Any]
    p99_ms: float | None
    latency_error_p99_ms: float | None
    cpu_ms_per_request: float | None
    startup_cpu_s: float | None
    total_cpu_s: float
    exit_code: int
    errors: int | None
    limited: bool
    reasons: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def held(self) -> bool:
        return float(self.server["share"]) >= 0.99 and not self.limited

    def faithful(self, bound_ms: float) -> bool:
        error = self.latency_error_p99_ms
        return self.held and error is not None and error <= bound_ms


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_pass(tool: Tool, load_name: str, server: ArrivalsServer, rate: float, duration_s: float,
             latency_ms: float, chunk_interval_ms: float) -> Pass:  # fmt: skip
    chunks = LOADS[load_name]
    with tempfile.TemporaryDirectory(prefix=f"peers-{tool.name}-") as scratch:
        load = Load(server.base_url, rate, duration_s, chunks, Path(scratch))
        command = tool.command(load)
        argv = pinned(command.argv, CLIENT_CORE) if tool.pinned else command.argv
        server.drain()
        before = children_cpu_s()
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env={**os.environ, **command.env}, cwd=scratch, start_new_session=True)  # fmt: skip
        sampler = CpuSampler(process.pid, server.requests)
        hung = False
        try:
            stdout, stderr = process.communicate(command.stdin, timeout=duration_s + HANG_AFTER_S)
        except subprocess.TimeoutExpired:  # GuideLLM can deadlock at the end of a pass (its issues #431, #1152)
            hung = True
            os.killpg(process.pid, signal.SIGKILL)  # the tool and every worker process it started
            stdout, stderr = process.communicate()
        total_cpu = children_cpu_s() - before
        tail_s = (latency_ms + chunks * chunk_interval_ms) / 1000 + 0.3
        cpu = load_window(sampler.stop(total_cpu), tail_s)
        view = judge_arrivals(server.drain(), rate, duration_s).to_dict()
        done = subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)
        if hung:
            print(f"  {tool.name} had not ended {HANG_AFTER_S:g} s after its pass: killed, counted as failed")
            said = ToolView(p99_ms=None, errors=None, reasons=[f"hung: killed {HANG_AFTER_S:g} s after its pass"])
        else:
            if process.returncode not in tool.exit_ok:
                print(f"  {tool.name} exited {process.returncode}: {stderr.decode(errors='replace')[-600:]}")
            said = tool.read(load, done)
    return Pass(
        load=load_name,
        tool=tool.name,
        rate=rate,
        server=view,
        p99_ms=said.p99_ms,
        latency_error_p99_ms=None if said.p99_ms is None else said.p99_ms - latency_ms,
        cpu_ms_per_request=cpu.ms_per_request,
        startup_cpu_s=cpu.startup_s,
        total_cpu_s=total_cpu,
        exit_code=process.returncode,
        errors=said.errors,
        limited=said.limited or hung,
        reasons=said.reasons,
        extra=said.extra,
    )


# --- the report -----------------------------------------------------------------------------------------

HEADER = (
    "load  tool            rate  srv rate  share    cv  drift p99  err p99  cpu/req  start-up  errors  verdict\n"
    "                              (req/s)               (ms)      (ms)     (ms)   cpu (s)"
)


def verdict(p: Pass) -> str:
    if p.faithful(5):
        return "faithful ≤5 ms"
    if p.faithful(10):
        return "faithful ≤10 ms"
    return "held" if p.held else "NOT held"


def line(p: Pass) -> str:
    s = p.server

    def fmt(value: float | None, spec: str) -> str:
        return "–" if value is None else format(value, spec)

    reasons = f"  ({'; '.join(p.reasons)})" if p.reasons else ""
    return (f"{p.load:5} {p.tool:13} {p.rate:6g} {s['seen_rate']:9.1f} {100 * s['share']:6.1f}% "
            f"{fmt(s['interarrival_cv'], '.2f'):>5} {fmt(s['drift_p99_ms'], '.1f'):>9} "
            f"{fmt(p.latency_error_p99_ms, '.1f'):>8} {fmt(p.cpu_ms_per_request, '.3f'):>8} "
            f"{fmt(p.startup_cpu_s, '.1f'):>9} {fmt(p.errors, 'd'):>7}  {verdict(p)}{reasons}")  # fmt: skip


def highest(passes: list[Pass], test: Callable[[Pass], bool]) -> float | None:
    """The highest rate at which every pass passed ``test`` (a miss at a lower rate is shown by
    :func:`misses_below`, not allowed to hide the rates above it: one noisy pass is not a tool's limit)."""
    passed = [rate for rate in {p.rate for p in passes} if all(test(p) for p in passes if p.rate == rate)]
    return max(passed, default=None)


def misses_below(passes: list[Pass], test: Callable[[Pass], bool], rate: float | None) -> list[float]:
    """Rates below ``rate`` where some pass failed ``test``."""
    return sorted({p.rate for p in passes if rate is not None and p.rate < rate and not test(p)})


def summarise(passes: list[Pass]) -> dict[str, dict[str, dict[str, Any]]]:
    tests: dict[str, Callable[[Pass], bool]] = {
        "held": lambda p: p.held,
        "faithful_5ms": lambda p: p.faithful(5),
        "faithful_10ms": lambda p: p.faithful(10),
    }
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for load_name in LOADS:
        for tool in dict.fromkeys(p.tool for p in passes if p.load == load_name):
            mine = [p for p in passes if p.load == load_name and p.tool == tool]
            figures: dict[str, Any] = {"highest_rate_tried": max(p.rate for p in mine)}
            for key, test in tests.items():
                figures[f"highest_{key}"] = best = highest(mine, test)
                figures[f"misses_below_{key}"] = misses_below(mine, test, best)
            summary.setdefault(load_name, {})[tool] = figures
    return summary


def ratios(summary: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The issue's goals, as ratios of this run's figures."""
    lines = []

    def ratio(load_name: str, tool: str, key: str, peer: str, peer_key: str | None = None) -> None:
        mine = summary.get(load_name, {}).get(tool, {}).get(key)
        theirs = summary.get(load_name, {}).get(peer, {}).get(peer_key or key)
        if mine is not None and theirs:
            ceiling = theirs == summary[load_name][peer]["highest_rate_tried"]
            lines.append(f"{load_name}: {tool} {key} / {peer} {peer_key or key}: {mine:g} / {theirs:g} = "
                         f"{mine / theirs:.2f}" + (f" (at most: {peer} passed the highest rate tried)" if ceiling
                                                    else ""))  # fmt: skip
        elif theirs is not None or mine is not None:
            lines.append(f"{load_name}: {tool} {key} {mine} against {peer} {peer_key or key} {theirs}")

    ratio("plain", "cliffwatch", "highest_held", "vegeta")
    ratio("plain", "cliffwatch", "highest_faithful_5ms", "vegeta")
    ratio("plain", "cliffwatch", "highest_faithful_10ms", "vegeta")
    ratio("plain", "cliffwatch-aiohttp", "highest_faithful_5ms", "vegeta")
    ratio("plain", "cliffwatch-w2", "highest_held", "cliffwatch")
    for load_name in ("short", "long"):
        for peer in ("aiperf", "guidellm"):
            ratio(load_name, "cliffwatch", "highest_faithful_5ms", peer)
            ratio(load_name, "cliffwatch", "highest_faithful_10ms", peer)
    return lines


def cpu_ratios(passes: list[Pass], peer: str = "vegeta") -> list[str]:
    """Each tool's CPU per request over the peer's, at every rate both held (plain HTTP)."""
    theirs = {p.rate: p for p in passes if p.load == "plain" and p.tool == peer and p.held}
    lines = []
    for tool in dict.fromkeys(p.tool for p in passes if p.load == "plain" and p.tool != peer):
        shared = [(p, theirs[p.rate]) for p in passes if p.load == "plain" and p.tool == tool and p.held
                  and p.rate in theirs and p.cpu_ms_per_request and theirs[p.rate].cpu_ms_per_request]  # fmt: skip
        if shared:
            each = ", ".join(f"{mine.rate:g}: {(mine.cpu_ms_per_request or 0) / (other.cpu_ms_per_request or 1):.2f}"
                             for mine, other in shared)  # fmt: skip
            lines.append(f"plain: {tool} CPU per request / {peer}'s, by rate: {each}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", default="plain,short,long")
    parser.add_argument("--tools", default="cliffwatch,cliffwatch-w2,vegeta,asyncio-floor,guidellm,aiperf",
                        help="each runs only on the loads it can send")  # fmt: skip
    for load_name, rates in DEFAULT_RATES.items():
        parser.add_argument(f"--rates-{load_name}", default=",".join(str(r) for r in rates))
    parser.add_argument("--duration", type=float, default=15.0, help="seconds of load per pass")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--chunk-interval-ms", type=float, default=2.0)
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--report", metavar="JSON", help="print the tables of a saved --json file; run nothing")
    args = parser.parse_args(argv)
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        report([Pass(**p) for p in saved["passes"]])
        return 0
    if not (REPO / ".venv/bin/cliffwatch").exists():
        raise SystemExit("run `make check` first: the benchmark runs the repository's .venv/bin/cliffwatch")
    cliffwatches = (
        Cliffwatch(),
        Cliffwatch(workers=2),
        Cliffwatch(transport="aiohttp"),
        Cliffwatch(workers=2, transport="aiohttp"),
    )
    known: dict[str, Tool] = {t.name: t for t in (*cliffwatches, Vegeta(), GuideLLM(), AIPerf(), AsyncioFloor())}
    wanted = [known[name.strip()] for name in args.tools.split(",")]
    versions = {"vegeta": install.VEGETA, **{t.name: install.PYTHON_PEERS[t.name] for t in wanted
                                            if t.name in install.PYTHON_PEERS}}  # fmt: skip
    passes: list[Pass] = []
    print(HEADER, flush=True)
    for load_name in args.loads.split(","):
        chunks = LOADS[load_name]
        tools = [t for t in wanted if (t.streams if chunks else t.plain)]
        rates = [float(r) for r in getattr(args, f"rates_{load_name}").split(",")]
        misses = dict.fromkeys((t.name for t in tools), 0)
        with arrivals_server(args.latency_ms, chunks=chunks or 16, chunk_interval_ms=args.chunk_interval_ms) as server:
            for index, rate in enumerate(rates):
                order = tools if index % 2 == 0 else list(reversed(tools))  # none always runs first
                for tool in (t for t in order if misses[t.name] < GIVE_UP_AFTER):
                    passes.append(run_pass(tool, load_name, server, rate, args.duration, args.latency_ms,
                                           args.chunk_interval_ms))  # fmt: skip
                    misses[tool.name] = 0 if passes[-1].held else misses[tool.name] + 1
                    print(line(passes[-1]), flush=True)
    summary = report(passes, printed=True)
    if args.json_path:
        document = {"loads": args.loads, "duration_s": args.duration, "latency_ms": args.latency_ms,
                    "chunk_interval_ms": args.chunk_interval_ms, "versions": versions,
                    "python": sys.version.split()[0], "cores": os.cpu_count(),
                    "passes": [asdict(p) for p in passes], "summary": summary}  # fmt: skip
        Path(args.json_path).write_text(json.dumps(document, indent=1))
    return 0


def report(passes: list[Pass], printed: bool = False) -> dict[str, dict[str, dict[str, Any]]]:
    """Prints the passes (unless they were printed as they ran), each tool's highest rates and the goals'
    ratios; returns the summary."""
    if not printed:
        print(HEADER)
        for p in passes:
            print(line(p))
    summary = summarise(passes)
    print()
    for load_name, tools_summary in summary.items():
        for tool_name, figures in tools_summary.items():
            shown = ", ".join(
                f"{key} {figures[key]:g}" if figures[key] else f"{key} –"
                for key in figures
                if key.startswith("highest_") and key != "highest_rate_tried"
            )
            misses = {k: v for k, v in figures.items() if k.startswith("misses_below_") and v}
            shown += "".join(f"; {k.replace('_', ' ')}: {', '.join(f'{r:g}' for r in v)}" for k, v in misses.items())
            print(f"{load_name:5} {tool_name:13} {shown}")
    print()
    for text in (*ratios(summary), *cpu_ratios(passes)):
        print(text)
    return summary


if __name__ == "__main__":
    sys.exit(main())
