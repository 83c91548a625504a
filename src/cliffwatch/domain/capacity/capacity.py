"""Capacity sweeps, the pure part: measured steps and their verdicts, the search over rates, and the result.

One import for callers; the parts live in ``capacity_stats`` (a step and Wilson intervals),
``capacity_steps`` (judging, pooling and settling a rate), ``capacity_search`` (which rate to measure next),
``capacity_result`` (usable capacity, peaks and the decision rule's verdict), ``drift`` (trials at one rate
that disagree: a target whose speed drifted), ``speed_drift`` (the recheck's median latency against the first
reading's) and ``found_capacity`` (the result a sweep ends with, and its JSON form). docs/sweep.md explains the
statistics and the search.
"""

from __future__ import annotations

from cliffwatch.domain.capacity.capacity_result import CONSTRAINED_SHARE, num, pct, settle_all, summarize
from cliffwatch.domain.capacity.capacity_search import CapacitySearch, NextStep, SearchConfig, round_sig
from cliffwatch.domain.capacity.capacity_steps import (
    PERCENTILES,
    Interval,
    PooledRate,
    SettledRate,
    StepStats,
    StepVerdict,
    judge,
    pool_rates,
    settle,
    wilson,
)
from cliffwatch.domain.capacity.found_capacity import CapacityResult

__all__ = [
    "CONSTRAINED_SHARE",
    "PERCENTILES",
    "CapacityResult",
    "CapacitySearch",
    "Interval",
    "NextStep",
    "PooledRate",
    "SearchConfig",
    "SettledRate",
    "StepStats",
    "StepVerdict",
    "judge",
    "num",
    "pct",
    "pool_rates",
    "round_sig",
    "settle",
    "settle_all",
    "summarize",
    "wilson",
]
