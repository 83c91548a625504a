"""The simulated target's ``/metrics`` page in the Prometheus text exposition format (version 0.0.4).

Only rendering lives here: the numbers come from an :class:`~cliffwatch.simulator.batching.EngineStats`
snapshot, so one scrape is internally consistent.
"""

from __future__ import annotations

from dataclasses import dataclass

from cliffwatch.simulator.batching import EngineStats
from cliffwatch.simulator.sequences import Result

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "cliffwatch_target_"


@dataclass(frozen=True, kw_only=True)
class _Family:
    name: str
    kind: str  # "gauge", "counter" or "summary"
    help: str
    samples: tuple[tuple[str, int | float], ...]  # (label set as {k="v"} or "", value); a summary's: (suffix, value)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _families(stats: EngineStats) -> list[_Family]:
    def one(value: int | float) -> tuple[tuple[str, int | float], ...]:
        return (("", value),)

    return [
        _Family(
            name="waiting_requests",
            kind="gauge",
            help="Requests in the waiting queue, not yet admitted into the batch.",
            samples=one(stats.waiting),
        ),
        _Family(
            name="running_requests",
            kind="gauge",
            help="Sequences in the running batch, each decoding one token per step.",
            samples=one(stats.running),
        ),
        _Family(
            name="max_batch",
            kind="gauge",
            help="Configured maximum number of sequences decoded together.",
            samples=one(stats.max_batch),
        ),
        _Family(
            name="requests_total",
            kind="counter",
            help="Requests by how they ended.",
            samples=tuple(
                (f'{{result="{_escape_label(result.value)}"}}', stats.results.get(result, 0)) for result in Result
            ),
        ),
        _Family(
            name="prompt_tokens_total",
            kind="counter",
            help="Prompt tokens prefilled (counted when a request is admitted into the batch).",
            samples=one(stats.prompt_tokens_total),
        ),
        _Family(
            name="generation_tokens_total",
            kind="counter",
            help="Output tokens generated, including those of sequences aborted afterwards.",
            samples=one(stats.generation_tokens_total),
        ),
        _Family(
            name="queue_time_seconds",
            kind="summary",
            help="Seconds the requests admitted into the batch so far waited in the queue.",
            samples=(("_sum", stats.queue_time_seconds_sum), ("_count", stats.queue_time_count)),
        ),
        _Family(
            name="preemptions_total",
            kind="counter",
            help="Sequences preempted (and recomputed later) to give a tenant its fair share of the batch.",
            samples=one(stats.preemptions_total),
        ),
        _Family(
            name="prefix_cache_queries_total",
            kind="counter",
            help="Prompt tokens looked up in the prefix cache (as vLLM's prefix_cache_queries).",
            samples=one(stats.prefix_cache_queries_total),
        ),
        _Family(
            name="prefix_cache_hits_total",
            kind="counter",
            help="Prompt tokens found in the prefix cache, whose prefill was skipped (as vLLM's prefix_cache_hits).",
            samples=one(stats.prefix_cache_hits_total),
        ),
        _Family(
            name="kv_cache_usage_ratio",
            kind="gauge",
            help="The running sequences' tokens (prompt and output) over the KV cache's capacity, 0-1.",
            samples=one(round(stats.kv_cache_usage, 6)),
        ),
        _Family(
            name="steps_total",
            kind="counter",
            help="Engine steps run (each gives every running sequence one token).",
            samples=one(stats.steps_total),
        ),
    ]


def render(stats: EngineStats) -> str:
    """The exposition text: a HELP and a TYPE line per metric family, then its samples."""
    lines: list[str] = []
    for family in _families(stats):
        name = PREFIX + family.name
        lines.append(f"# HELP {name} {family.help}")
        lines.append(f"# TYPE {name} {family.kind}")
        if family.kind == "summary":  # its samples are the family's _sum and _count
            lines.extend(f"{name}{suffix} {value}" for suffix, value in family.samples)
        else:
            lines.extend(f"{name}{labels} {value}" for labels, value in family.samples)
    return "\n".join(lines) + "\n"
