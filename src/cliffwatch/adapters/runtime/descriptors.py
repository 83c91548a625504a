"""File descriptors: the process's ``RLIMIT_NOFILE``, raised toward its hard limit at start, and the share of
it each run's connection pool may take, so a run's ``client.pool_size`` can never exhaust the descriptors the
API, the database and Toxiproxy need.

Every connection of a run's pool is one descriptor of this process, and aiohttp's pool opens up to
``pool_size`` of them (requests beyond ``max_in_flight`` are not sent; those beyond the pool wait for a
connection, holding none). So the budget is counted in connections: what the soft limit leaves after the
descriptors open at start and ``CLIFFWATCH_FD_RESERVE`` (the API's clients, the database pool, Toxiproxy,
the children's pipes, the logs), shared by the runs that may run at once. A run whose pool is larger gets a
pool of its share, and says so: in a log line, on the CLI, and in its result's ``notes``.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, replace

import structlog

from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.scenario.scenario import Scenario

log = structlog.get_logger(__name__)

# Fewer connections than this per run would make most scenarios meaningless; refuse to start instead.
MIN_CONNECTIONS_PER_RUN = 8
# What an unlimited hard limit is raised to: Linux refuses more than fs.nr_open (1,048,576 by default).
UNLIMITED_CEILING = 1 << 20


class DescriptorsTooFew(CliffwatchError):
    """The descriptor limit leaves too few connections for each run, even raised to the hard limit."""

    def __init__(self, budget: DescriptorBudget) -> None:
        self.budget = budget
        super().__init__(
            f"the file descriptor limit ({budget.soft}, hard {budget.hard_text}) leaves {budget.per_run} "
            f"connection(s) to each of {budget.runs} run(s) after {budget.open_at_start} open and "
            f"{budget.reserve} reserved (CLIFFWATCH_FD_RESERVE); at least {MIN_CONNECTIONS_PER_RUN} are needed: "
            "raise the limit (ulimit -n, LimitNOFILE= for systemd, --ulimit nofile= for Docker), or lower "
            "CLIFFWATCH_MAX_CONCURRENT_RUNS or CLIFFWATCH_FD_RESERVE"
        )


@dataclass(frozen=True, kw_only=True)
class DescriptorBudget:
    """What the process may open, and each run's share of it in connections."""

    soft: int
    hard: int | None  # None: unlimited
    raised_from: int | None  # the soft limit before it was raised, None when it was not
    open_at_start: int
    reserve: int
    runs: int  # how many may run at once

    @property
    def per_run(self) -> int:
        return max(0, (self.soft - self.open_at_start - self.reserve) // self.runs)

    @property
    def hard_text(self) -> str:
        return "unlimited" if self.hard is None else str(self.hard)

    def describe(self) -> str:
        raised = f", raised from {self.raised_from}" if self.raised_from is not None else ""
        return (f"file descriptors: limit {self.soft} (hard {self.hard_text}{raised}); {self.open_at_start} open, "
                f"{self.reserve} reserved; each of {self.runs} run(s) may open {self.per_run} connections")  # fmt: skip


def settle_descriptors(*, runs: int, reserve: int) -> DescriptorBudget:
    """At start (``serve``, ``run``, ``sweep``): raises the soft ``RLIMIT_NOFILE`` to the hard limit where the
    system allows it, logs the budget and returns it. Raises ``DescriptorsTooFew`` when each run would get
    fewer than ``MIN_CONNECTIONS_PER_RUN`` connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = UNLIMITED_CEILING if hard == resource.RLIM_INFINITY else hard
    raised_from = None
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
            raised_from = soft
        except (ValueError, OSError) as exc:  # a sandbox may forbid it; the soft limit stays as it was
            log.warning("could not raise the file descriptor limit", soft=soft, hard=hard, error=str(exc))
    budget = replace(descriptor_budget(runs=runs, reserve=reserve), raised_from=raised_from)
    if budget.per_run < MIN_CONNECTIONS_PER_RUN:
        raise DescriptorsTooFew(budget)
    log.info("file descriptors", soft=budget.soft, hard=budget.hard_text, raised_from=raised_from,
             open=budget.open_at_start, reserve=reserve, runs=runs, per_run=budget.per_run)  # fmt: skip
    return budget


def descriptor_budget(*, runs: int, reserve: int) -> DescriptorBudget:
    """The budget under the limits as they are now, changing nothing."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return DescriptorBudget(
        soft=UNLIMITED_CEILING if soft == resource.RLIM_INFINITY else soft,
        hard=None if hard == resource.RLIM_INFINITY else hard,
        raised_from=None,
        open_at_start=_open_descriptors(),
        reserve=reserve,
        runs=runs,
    )


def within_budget(scenario: Scenario, budget: DescriptorBudget) -> tuple[Scenario, str | None]:
    """The scenario with its connection pool cut to the run's share, and the note saying so (None when it
    fits). Raises ``DescriptorsTooFew`` when the share is below ``MIN_CONNECTIONS_PER_RUN`` (a pool of 0 would
    be no limit at all to aiohttp)."""
    if budget.per_run < MIN_CONNECTIONS_PER_RUN:
        raise DescriptorsTooFew(budget)
    asked = scenario.client.pool_size
    if asked <= budget.per_run:
        return scenario, None
    note = (f"client.pool_size capped from {asked:,} to {budget.per_run:,} connections: the file descriptor "
            f"limit ({budget.soft}) shared by {budget.runs} run(s), after {budget.reserve} reserved for the "
            "service, allows no more (docs/security.md, \"Many connections\")")  # fmt: skip
    return replace(scenario, client=replace(scenario.client, pool_size=budget.per_run)), note


def _open_descriptors() -> int:
    """How many descriptors this process has open; 0 where that cannot be seen (no /proc, no /dev/fd)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 0
