"""``target.metrics``: which Prometheus endpoint of the target to scrape during a run, how often, and which
series to keep (an engine profile's signals, with the scenario's own additions and overrides).

Parsed as part of the target (``parse_metrics``); the profiles themselves are in ``engine_profiles``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from cliffwatch.domain.scenario.metric_expr import Expr, ExprInvalid, parse_expr
from cliffwatch.domain.validation import Problems, Reader, short_repr

DEFAULT_INTERVAL_MS = 1_000.0
MIN_INTERVAL_MS = 100.0  # a scrape costs the server a page render: faster than this is load of its own
MAX_INTERVAL_MS = 60_000.0
MAX_SCRAPE_TIMEOUT_MS = 5_000.0
MAX_SERIES = 32
_SERIES_NAME = r"^[a-z][a-z0-9_]{0,62}$"


class EngineKind(StrEnum):
    AUTO = "auto"  # told by the first scrape's metric names
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"
    TRITON = "triton"
    BUILTIN = "builtin"


class Signal(StrEnum):
    """What a profile's series stands for; the evidence and the sweep read series by their signal."""

    WAITING = "waiting"  # requests queued in the server, not yet running
    RUNNING = "running"  # requests being processed (in the batch)
    KV_CACHE = "kv_cache_usage"  # share of the KV cache in use, 0–1
    PREEMPTIONS = "preemptions"  # requests preempted per second
    GENERATION_TOKENS = "generation_tokens"  # output tokens per second, as the server counts them
    PROMPT_TOKENS = "prompt_tokens"  # prompt tokens processed per second
    QUEUE_TIME = "queue_time"  # mean seconds a request waited in the queue, over the interval
    PREFIX_HITS = "prefix_cache_hits"  # prompt tokens per second served from the prefix cache
    PREFIX_QUERIES = "prefix_cache_queries"  # prompt tokens per second looked up in it


SIGNAL_UNITS: dict[Signal, str] = {
    Signal.WAITING: "requests",
    Signal.RUNNING: "requests",
    Signal.KV_CACHE: "fraction",
    Signal.PREEMPTIONS: "per s",
    Signal.GENERATION_TOKENS: "tokens/s",
    Signal.PROMPT_TOKENS: "tokens/s",
    Signal.QUEUE_TIME: "s",
    Signal.PREFIX_HITS: "tokens/s",
    Signal.PREFIX_QUERIES: "tokens/s",
}


@dataclass(frozen=True, kw_only=True)
class SeriesSpec:
    """One series the scenario adds (or a signal it overrides): its name, its expression, its unit."""

    name: str
    expr: Expr
    unit: str = ""


@dataclass(frozen=True, kw_only=True)
class MetricsSpec:
    url: str | None = None  # None: the target's own /metrics
    engine: EngineKind = EngineKind.AUTO
    interval_ms: float = DEFAULT_INTERVAL_MS
    timeout_ms: float = DEFAULT_INTERVAL_MS
    series: tuple[SeriesSpec, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "url": self.url,
            "engine": self.engine.value,
            "interval_ms": self.interval_ms,
            "timeout_ms": self.timeout_ms,
            "series": {s.name: {"expr": s.expr.text, "unit": s.unit} for s in self.series},
        }


def parse_metrics(
    reader: Reader, *, check_url: Callable[[object, str, Problems], str | None], builtin: bool
) -> MetricsSpec | None:
    """``target.metrics`` from its reader; ``check_url(value, path, problems)`` validates an http(s) URL as
    the target's own URL is. ``builtin``: the target is the built-in one (its profile is the default)."""
    url: str | None = None
    if reader.has("url"):
        url = check_url(reader.raw("url"), reader.child("url"), reader.problems)
        if url == "builtin":
            reader.error("url", "must be an http(s) URL; leave it out to scrape the target's own /metrics")
            url = None
    default_engine = EngineKind.BUILTIN if builtin and not reader.has("url") else EngineKind.AUTO
    engine = reader.string("engine", default_engine.value, choices=tuple(e.value for e in EngineKind))
    interval = reader.number("interval_ms", DEFAULT_INTERVAL_MS, ge=MIN_INTERVAL_MS, le=MAX_INTERVAL_MS)
    timeout_default = min(interval or DEFAULT_INTERVAL_MS, MAX_SCRAPE_TIMEOUT_MS)
    timeout = reader.number("timeout_ms", timeout_default, gt=0, le=MAX_SCRAPE_TIMEOUT_MS)
    series: list[SeriesSpec] = []
    ok = True
    section = reader.mapping("series", None)
    if section is not None:
        if len(section.data) > MAX_SERIES:
            section.error(None, f"at most {MAX_SERIES} series")
            ok = False
        for name, value in section.data.items():
            section.raw(name)
            if not re.fullmatch(_SERIES_NAME, name):
                section.error(name, "a series name is lowercase letters, digits and '_', starting with a letter")
                ok = False
                continue
            parsed = _parse_series(name, value, section.child(name), reader.problems)
            if parsed is None:
                ok = False
            else:
                series.append(parsed)
        section.done()
    elif reader.has("series"):
        ok = False
    reader.done()
    if None in (engine, interval, timeout) or (reader.has("url") and url is None) or not ok:
        return None
    if timeout > interval:
        reader.error("timeout_ms", f"must be <= interval_ms ({interval:g}): a scrape must end before the next")
        return None
    return MetricsSpec(url=url, engine=EngineKind(engine), interval_ms=float(interval), timeout_ms=float(timeout),
                       series=tuple(series))  # fmt: skip


def _parse_series(name: str, value: object, path: str, problems: Problems) -> SeriesSpec | None:
    """A series as an expression string, or a mapping ``{expr, unit}``."""
    unit = SIGNAL_UNITS.get(Signal(name), "") if name in {s.value for s in Signal} else ""
    text: object = value
    if isinstance(value, Mapping):
        reader = Reader.of(value, path, problems)
        if reader is None:
            return None
        text = reader.string("expr")
        unit = reader.string("unit", unit, nonempty=False)
        reader.done()
        if text is None or unit is None:
            return None
    if not isinstance(text, str) or not text.strip():
        problems.add(path, f"must be an expression or a mapping with expr, got {short_repr(value)}")
        return None
    try:
        expr = parse_expr(text)
    except ExprInvalid as exc:
        problems.add(path, f"{exc} in {short_repr(text)}")
        return None
    return SeriesSpec(name=name, expr=expr, unit=str(unit))
