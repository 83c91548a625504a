"""The arrival-recording server of the whole-run and peer benchmarks, and what its record says.

``bench/arrivals_server`` (Go, standard library only) answers after a fixed delay and records the arrival of
every request on its own monotonic clock. It is built here with ``go build`` into ``bench/.build/`` and
started pinned to one core with ``GOMAXPROCS=1``, so it is light and never competes with the client for its
core. :func:`judge_arrivals` turns its record into what the benchmark reports: the rate and pacing the
*server* saw, independent of anything the load tool says about itself.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import statistics
import subprocess
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SERVER_SOURCE = BENCH / "arrivals_server"
BUILD = BENCH / ".build"
SERVER_CORE = 1  # the client gets core 0 (see pinned)


def build_server() -> Path:
    """Builds the Go server once (``go build`` caches); returns its binary."""
    if shutil.which("go") is None:
        raise SystemExit("the arrivals server needs Go (https://go.dev/dl/): go was not found on PATH")
    BUILD.mkdir(exist_ok=True)
    binary = BUILD / "arrivals_server"
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=SERVER_SOURCE, check=True)
    return binary


def pinned(argv: Sequence[str], core: int) -> list[str]:
    """``argv`` run on one core with ``taskset`` when the machine has two or more and taskset exists."""
    if (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
        return ["taskset", "-c", str(core), *argv]
    return list(argv)


@dataclass(frozen=True)
class ArrivalsServer:
    base_url: str

    def drain(self) -> list[int]:
        """The arrival times (ns, server clock) recorded since the last drain; the server forgets them."""
        with urllib.request.urlopen(f"{self.base_url}/__arrivals", timeout=30) as answer:
            return [int(ns) for ns in json.load(answer)["ns"]]

    def cpu_s(self) -> float:
        return float(self._stats()["cpu_s"])

    def requests(self) -> int:
        """How many requests it has recorded since it started (drains do not reset it)."""
        return int(self._stats()["requests"])

    def _stats(self) -> dict[str, float]:
        with urllib.request.urlopen(f"{self.base_url}/__stats", timeout=30) as answer:
            stats: dict[str, float] = json.load(answer)
            return stats


@contextmanager
def arrivals_server(latency_ms: float, chunks: int = 16, chunk_interval_ms: float = 2.0) -> Iterator[ArrivalsServer]:
    binary = build_server()
    argv = [str(binary), "-latency-ms", str(latency_ms), "-chunks", str(chunks),
            "-chunk-interval-ms", str(chunk_interval_ms)]  # fmt: skip
    process = subprocess.Popen(pinned(argv, SERVER_CORE), env={**os.environ, "GOMAXPROCS": "1"},
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("PORT "):
            raise SystemExit(f"the arrivals server did not start: {line!r}")
        yield ArrivalsServer(f"http://127.0.0.1:{int(line.split()[1])}")
    finally:
        if process.stdin is not None:
            process.stdin.close()  # it exits when its standard input closes
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


@dataclass(frozen=True)
class ServerView:
    """What the server's record says about one measured pass."""

    received: int  # requests of the pass that reached the server
    intended: int  # requests the pass should have sent
    seen_rate: float  # received / the planned duration
    share: float  # received / intended
    span_s: float  # first to last arrival
    interarrival_cv: float | None  # pacing: 0 for perfectly even arrivals
    drift_p99_ms: float | None  # each arrival against its slot in an even schedule from the first arrival

    def to_dict(self) -> dict[str, object]:
        return {
            "received": self.received,
            "intended": self.intended,
            "seen_rate": round(self.seen_rate, 2),
            "share": round(self.share, 4),
            "span_s": round(self.span_s, 3),
            "interarrival_cv": None if self.interarrival_cv is None else round(self.interarrival_cv, 3),
            "drift_p99_ms": None if self.drift_p99_ms is None else round(self.drift_p99_ms, 2),
        }


def judge_arrivals(arrivals_ns: Sequence[int], rate: float, duration_s: float) -> ServerView:
    """The server's view of a constant-rate pass of ``duration_s`` at ``rate`` (the server records no probe
    of its root path, so every arrival is the pass's)."""
    times = sorted(arrivals_ns)
    intended = round(rate * duration_s)
    received = len(times)
    span_s = (times[-1] - times[0]) / 1e9 if received > 1 else 0.0
    cv = drift = None
    if received > 2:
        gaps = [b - a for a, b in itertools.pairwise(times)]
        mean = statistics.fmean(gaps)
        cv = statistics.pstdev(gaps) / mean if mean > 0 else None
        interval_ns = 1e9 / rate
        errors = sorted(abs(t - times[0] - i * interval_ns) / 1e6 for i, t in enumerate(times))
        drift = errors[min(len(errors) - 1, int(0.99 * len(errors)))]
    return ServerView(
        received=received,
        intended=intended,
        seen_rate=received / duration_s,
        share=received / intended if intended else 0.0,
        span_s=span_s,
        interarrival_cv=cv,
        drift_p99_ms=drift,
    )
