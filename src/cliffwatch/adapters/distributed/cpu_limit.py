"""How many cores this process may use: its CPU affinity, and its cgroup's CPU quota.

``client.workers: auto`` starts one worker a usable core. The affinity (``taskset``, a container's CPU set)
says which cores the process may run on; a CPU quota (``docker run --cpus``, a Kubernetes CPU limit) says how
much of them it may use per period, and the affinity does not show it: a pod limited to two CPUs on a
64-core node sees 64. Starting 16 workers there would have them throttled in turn, each falling behind its
schedule. The quota is cgroup v2's ``cpu.max`` or v1's ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``
(the kernel's cgroup-v2.rst and sched-bwc.rst), the smallest along the process's cgroup path (a parent's
limit binds its children), rounded down to whole cores and at least one, as uber-go/automaxprocs rounds it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def usable_cores(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> int:
    """The cores this process may use: its affinity, narrowed by its cgroup's CPU quota when it has one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: no affinity, no cgroups
        return os.cpu_count() or 1
    quota = cpu_quota(root, membership)
    return cores if quota is None else max(1, min(cores, math.floor(quota)))


def cpu_quota(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> float | None:
    """The CPU bandwidth this process's cgroups allow, in CPUs (quota over period), the smallest of them; None
    when none is set or none can be read (no cgroups, another layout): then the affinity alone counts."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:  # the unified (v2) hierarchy
            limits += [q for d in _levels(root, path) if (q := _v2(d / "cpu.max")) is not None]
        elif "cpu" in controllers.split(","):  # a v1 hierarchy with the cpu controller
            for mount in {root / controllers, root / "cpu"}:
                limits += [q for d in _levels(mount, path) if (q := _v1(d)) is not None]
    return min(limits, default=None)


def _levels(mount: Path, path: str) -> list[Path]:
    """The process's cgroup directory and its parents up to the mount. Inside a container the path may name
    the host's hierarchy, which is not mounted there: the mount itself is then the container's cgroup."""
    parts = [p for p in path.split("/") if p]
    return [mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _v2(cpu_max: Path) -> float | None:
    """``cpu.max``: "QUOTA PERIOD" in microseconds, or "max PERIOD" without a limit."""
    try:
        quota, period = cpu_max.read_text().split()
        return None if quota == "max" else _ratio(int(quota), int(period))
    except (OSError, ValueError):
        return None


def _v1(directory: Path) -> float | None:
    """``cpu.cfs_quota_us`` (-1 without a limit) over ``cpu.cfs_period_us``."""
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return _ratio(quota, period)


def _ratio(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None
