"""A generator worker takes its run's scheduling priority back when it was started at a lower one (Ray starts its
workers at nice 15), where the system lets it, and says at what priority it sends. Each case runs in a child
process: a test must not change the priority of the process that runs the suite."""

from __future__ import annotations

import os
import subprocess
import sys

from priority_kit import may_raise_priority_to


def settled(started_at: int, run: int) -> tuple[int, int]:
    """(what ``settle_niceness(run)`` returned, the nice value the child then had), in a child started at
    ``started_at`` more than this process."""
    code = ("import os; from cliffwatch.adapters.distributed.worker_process import settle_niceness; "
            f"os.nice({started_at}); said = settle_niceness({run}); "
            "print(said, os.getpriority(os.PRIO_PROCESS, 0))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    said, actual = map(int, done.stdout.split())
    return said, actual


def test_a_worker_started_at_a_lower_priority_takes_its_runs_back_when_it_may_and_says_which_it_has() -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    said, actual = settled(started_at=10, run=own)
    assert said == actual  # it reports the priority it really sends at
    assert actual == (own if may_raise_priority_to(own) else own + 10)


def test_a_worker_never_lowers_its_own_priority_to_match_its_run() -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert settled(started_at=0, run=own + 5) == (own, own)
