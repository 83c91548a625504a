"""The figures of the generator-fidelity benchmark: what a pass measured, its table row, the verdicts, ratios.

Pure functions of the samples the passes collected; nothing here opens a socket or reads a clock.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

TIMER = "timer"  # the machine's floor: the schedule kept with no requests at all
GENERATORS = ("peer", "cliffwatch")  # the two compared
MIN_ACHIEVED = 0.99  # faithful: at least this share of the intended rate ...
MAX_P99_LAG_MS = 2.0  # ... and 99 % of requests sent within this of their scheduled time (the default)
SATURATED_LAG_MS = 20.0  # saturated: short of the intended rate, or p99 lag past this (falling behind)
NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


@dataclass(frozen=True, kw_only=True)
class Config:
    mode: str  # "http": GET, small JSON answer; "sse": POST, OpenAI chat stream
    rates: tuple[float, ...]
    duration_s: float
    warmup_s: float
    latency_ms: float
    chunks: int
    chunk_interval_ms: float
    max_lag_p99_ms: float = MAX_P99_LAG_MS
    tokenizer: str | None = None  # sse: token-exact prompts under this tokenizer (request.tokenizer)

    @property
    def server_time_ms(self) -> float:
        """How long the server takes to answer completely, by construction."""
        if self.mode == "sse":
            return self.latency_ms + (self.chunks - 1) * self.chunk_interval_ms
        return self.latency_ms


@dataclass(kw_only=True)
class Samples:
    """What one measured pass saw; times in ns from the pass's start."""

    planned: int = 0
    last_scheduled_ns: int = 0
    lag_ns: list[int] = field(default_factory=list)
    latency_ns: list[int] = field(default_factory=list)
    last_sent_ns: int = 0
    failed: int = 0
    not_sent: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    limited: bool | None = None  # cliffwatch's own verdict (generator_limited); None for the peer
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Row:
    """One generator at one rate: the table's line and the JSON's record."""

    generator: str
    rate: float
    planned: int
    ok: int
    failed: int
    not_sent: int
    achieved_rate: float
    achieved_ratio: float
    lag_p50_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    overhead_p50_ms: float | None
    overhead_p99_ms: float | None
    cpu_s: float
    cpu_s_per_1k: float
    cpu_busy: float
    server_cpu_busy: float | None
    faithful: bool
    saturated: bool
    generator_limited: bool | None
    reasons: tuple[str, ...]


def summarise(generator: str, rate: float, samples: Samples, config: Config, server_cpu_busy: float | None) -> Row:
    """One table row from a pass's samples (for the timer floor, every wake-up counts as a request)."""
    ok = len(samples.lag_ns) if generator == TIMER else len(samples.latency_ns)
    # The sending span: the planned one, or longer when the last request left late.
    span_s = max(samples.last_sent_ns, samples.last_scheduled_ns) / NS_PER_S + 1.0 / rate
    achieved = ok / span_s
    lags_ms = sorted(max(0, lag) / NS_PER_MS for lag in samples.lag_ns) or [math.inf]
    overheads = sorted(latency / NS_PER_MS - config.server_time_ms for latency in samples.latency_ns)
    lag_p99 = _quantile(lags_ms, 0.99)
    sent = len(samples.lag_ns)
    return Row(
        generator=generator,
        rate=rate,
        planned=samples.planned,
        ok=ok,
        failed=samples.failed,
        not_sent=samples.not_sent,
        achieved_rate=achieved,
        achieved_ratio=achieved / rate,
        lag_p50_ms=_quantile(lags_ms, 0.5),
        lag_p99_ms=lag_p99,
        lag_max_ms=lags_ms[-1],
        overhead_p50_ms=_quantile(overheads, 0.5) if overheads else None,
        overhead_p99_ms=_quantile(overheads, 0.99) if overheads else None,
        cpu_s=samples.cpu_s,
        cpu_s_per_1k=samples.cpu_s / max(1, sent) * 1000,
        cpu_busy=samples.cpu_s / samples.wall_s if samples.wall_s > 0 else 0.0,
        server_cpu_busy=server_cpu_busy,
        faithful=achieved / rate >= MIN_ACHIEVED and lag_p99 <= config.max_lag_p99_ms,
        saturated=achieved / rate < MIN_ACHIEVED or lag_p99 > SATURATED_LAG_MS,
        generator_limited=samples.limited,
        reasons=samples.reasons,
    )


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of an ascending sequence."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def highest_faithful(rows: Sequence[Row], generator: str) -> float | None:
    """The highest rate at which ``generator`` was faithful; None when it was faithful at none."""
    return max((r.rate for r in rows if r.generator == generator and r.faithful), default=None)


def highest_unsaturated(rows: Sequence[Row], generator: str) -> float | None:
    """The highest rate below the first at which ``generator`` saturated (fell behind for good); a steadier
    figure than the highest faithful rate, whose p99 lag wobbles around the limit near the knee."""
    best: float | None = None
    for row in sorted((r for r in rows if r.generator == generator), key=lambda r: r.rate):
        if row.saturated:
            break
        best = row.rate
    return best


def unfaithful_below(rows: Sequence[Row], generator: str) -> list[float]:
    """Rates below the highest faithful one at which ``generator`` was not faithful (a noisy machine)."""
    best = highest_faithful(rows, generator)
    return [r.rate for r in rows if r.generator == generator and not r.faithful and best and r.rate < best]


def ratios(rows: Sequence[Row], rates: Sequence[float]) -> dict[str, Any]:
    """cliffwatch over peer: CPU per 1,000 requests and p99 lag (medians over the rates where both were
    faithful), and the highest faithful rates; ``capped`` says a generator was faithful at the top rate."""
    by_key = {(r.generator, r.rate): r for r in rows}
    both = [
        (by_key[("cliffwatch", rate)], by_key[("peer", rate)])
        for rate in rates
        if ("cliffwatch", rate) in by_key and ("peer", rate) in by_key
    ]
    faithful_pairs = [(c, p) for c, p in both if c.faithful and p.faithful] or both
    best = {g: highest_faithful(rows, g) for g in (TIMER, *GENERATORS)}
    cw_max, peer_max = best["cliffwatch"], best["peer"]
    tested = max(rates) if rates else None
    return {
        "cpu_per_1k_ratio": _median([c.cpu_s_per_1k / p.cpu_s_per_1k for c, p in faithful_pairs if p.cpu_s_per_1k]),
        "cpu_per_1k_ratio_by_rate": {str(c.rate): round(c.cpu_s_per_1k / p.cpu_s_per_1k, 3) for c, p in both},
        "lag_p99_ratio": _median([c.lag_p99_ms / p.lag_p99_ms for c, p in faithful_pairs if p.lag_p99_ms > 0]),
        "highest_faithful_rate": best,
        "unfaithful_below": {g: unfaithful_below(rows, g) for g in best},
        "highest_faithful_rate_ratio": _ratio_of(cw_max, peer_max),
        "capped": {g: rate == tested for g, rate in best.items()},
        "highest_unsaturated_rate": {g: highest_unsaturated(rows, g) for g in GENERATORS},
        "unsaturated_capped": {g: highest_unsaturated(rows, g) == tested for g in GENERATORS},
        "highest_unsaturated_rate_ratio": _ratio_of(
            highest_unsaturated(rows, "cliffwatch"), highest_unsaturated(rows, "peer")
        ),
    }


def _ratio_of(value: float | None, reference: float | None) -> float | None:
    return value / reference if value and reference else None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def header() -> str:
    """The table's two heading lines."""
    return (
        f"{'rate/s':>7} {'generator':<10} {'achieved':>8} {'lag p50':>8} {'p99':>7} {'max':>7} "
        f"{'ovh p50':>8} {'p99':>7} {'CPU s/1k':>8} {'CPU':>5} {'srv CPU':>7} {'faithful':<8}\n"
        f"{'':>7} {'':<10} {'/intend':>8} {'ms':>8} {'ms':>7} {'ms':>7} {'ms':>8} {'ms':>7} {'req':>8} {'busy':>5}"
    )


def line(row: Row) -> str:
    """The table's line for one row."""
    flag = "yes" if row.faithful else "no"
    if row.generator_limited:
        flag += " (cliffwatch says generator_limited)"
    return (
        f"{row.rate:>7g} {row.generator:<10} {row.achieved_ratio:>8.1%} {row.lag_p50_ms:>8.2f} "
        f"{row.lag_p99_ms:>7.2f} {row.lag_max_ms:>7.1f} {_ms(row.overhead_p50_ms):>8} {_ms(row.overhead_p99_ms):>7} "
        f"{row.cpu_s_per_1k:>8.3f} {row.cpu_busy:>5.0%} {_pct(row.server_cpu_busy):>7} {flag:<8}"
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def print_summary(result: dict[str, Any], out: TextIO) -> None:
    """The highest faithful rates, the ratios and the machine, after the table."""
    ratio = result["ratios"]
    best = ratio["highest_faithful_rate"]
    for generator in best:
        rate = best[generator]
        capped = " (faithful at the highest rate tested: a lower bound)" if ratio["capped"][generator] else ""
        shown = "none of the rates tested" if rate is None else f"{rate:g} req/s{capped}"
        if ratio["unfaithful_below"][generator]:
            below = ", ".join(f"{r:g}" for r in ratio["unfaithful_below"][generator])
            shown += f"; but not faithful at {below} req/s"
        print(f"highest faithful rate, {generator}: {shown}", file=out)
    unsaturated = ratio["highest_unsaturated_rate"]
    print(
        "highest rate before saturation (short of the rate, or p99 lag > "
        f"{SATURATED_LAG_MS:g} ms): "
        + ", ".join(
            f"{g} {_rate(rate)}"
            + (" (the highest rate tested: a lower bound)" if ratio["unsaturated_capped"][g] else "")
            for g, rate in unsaturated.items()
        ),
        file=out,
    )
    print(
        "cliffwatch / peer: "
        f"highest faithful rate {_ratio(ratio['highest_faithful_rate_ratio'])}, "
        f"highest rate before saturation {_ratio(ratio['highest_unsaturated_rate_ratio'])}, "
        f"CPU per 1,000 requests {_ratio(ratio['cpu_per_1k_ratio'])}, "
        f"p99 lag {_ratio(ratio['lag_p99_ratio'])}",
        file=out,
    )
    machine = result["machine"]
    print(
        f"machine: {machine['cpus']} CPUs, {machine['cpu_model']}, Python {machine['python']}, "
        f"aiohttp {machine['aiohttp']}; load average before/after {machine['load_before'][0]:.2f}/"
        f"{machine['load_after'][0]:.2f}",
        file=out,
        flush=True,
    )


def _rate(value: float | None) -> str:
    return "none" if value is None else f"{value:g} req/s"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"
