"""CPU time of a load tool's whole process tree, sampled during its pass beside the server's request count.

A peer's CPU per request is only comparable if start-up is left out: GuideLLM imports PyTorch in each of its
worker processes and spends about 17 s of CPU before its first request, which at 50 req/s for 15 s would be
more than its sending costs. So the benchmark samples, every 100 ms, the CPU of the tool's process and all
its descendants (``/proc``) together with the number of requests the server has received, and reports the
CPU spent **while the load was arriving** (from the last sample before the first arrival to the first sample
after the last answer ended) per request received, and the start-up CPU separately.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
INTERVAL_S = 0.1


def tree_cpu_s(root: int) -> float:
    """utime + stime of ``root`` and its live descendants, plus what their reaped children spent (the
    tree is walked through ``/proc/PID/task/TID/children``, so a sample costs a few reads, not a scan)."""
    total = 0.0
    pending = [root]
    while pending:
        pid = pending.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:  # it ended while we looked: its parent's cutime has it once it is reaped
            continue
        total += sum(int(f) for f in fields[11:15]) / TICKS  # utime, stime, cutime, cstime
        for task in tasks:
            try:
                pending += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
            except OSError:
                continue
    return total


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic()
    requests: int  # the server's count of recorded requests
    cpu_s: float


@dataclass(frozen=True)
class CpuView:
    startup_s: float | None  # the tool's CPU before its first request reached the server
    load_s: float | None  # its CPU while the load arrived and was answered
    requests: int  # requests the server received in that window

    @property
    def ms_per_request(self) -> float | None:
        if self.load_s is None or self.requests <= 0:
            return None
        return 1000 * self.load_s / self.requests


class CpuSampler:
    """Samples a process tree's CPU and the server's request count in a thread until :meth:`stop`."""

    def __init__(self, root: int, requests: Callable[[], int]) -> None:
        self._root = root
        self._requests = requests
        self._samples: list[Sample] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            self._samples.append(Sample(time.monotonic(), self._requests(), tree_cpu_s(self._root)))
            self._done.wait(INTERVAL_S)

    def stop(self, final_cpu_s: float) -> list[Sample]:
        """Stops sampling; ``final_cpu_s`` (the reaped tool's own rusage) closes the record."""
        self._done.set()
        self._thread.join()
        last = self._samples[-1] if self._samples else Sample(time.monotonic(), 0, 0.0)
        return [*self._samples, Sample(time.monotonic(), last.requests, max(final_cpu_s, last.cpu_s))]


def load_window(samples: list[Sample], tail_s: float) -> CpuView:
    """The CPU spent from the last sample before the first arrival until ``tail_s`` (the longest answer)
    after the last arrival was seen."""
    if len(samples) < 2 or samples[-1].requests == samples[0].requests:
        return CpuView(None, None, 0)
    base, final = samples[0].requests, samples[-1].requests
    start = max(i for i, s in enumerate(samples) if s.requests == base)
    last_arrival = min(s.at for s in samples if s.requests == final)
    end = next((i for i, s in enumerate(samples) if s.at >= last_arrival + tail_s), len(samples) - 1)
    return CpuView(
        startup_s=samples[start].cpu_s,
        load_s=samples[end].cpu_s - samples[start].cpu_s,
        requests=samples[end].requests - samples[start].requests,
    )
