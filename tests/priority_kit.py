"""Whether this system lets a process raise its scheduling priority (lower its nice value), for the tests of
generator workers that take their run's priority back."""

from __future__ import annotations

import resource
from pathlib import Path

CAP_SYS_NICE = 23


def may_raise_priority_to(nice: int) -> bool:
    """Whether a process of this user may lower its nice value to ``nice``: with ``CAP_SYS_NICE``, or within
    its ``RLIMIT_NICE`` (a floor of ``20 - rlimit``)."""
    status = Path("/proc/self/status").read_text().splitlines()
    capabilities = int(next(line.split()[1] for line in status if line.startswith("CapEff:")), 16)
    return bool(capabilities >> CAP_SYS_NICE & 1) or 20 - resource.getrlimit(resource.RLIMIT_NICE)[0] <= nice
