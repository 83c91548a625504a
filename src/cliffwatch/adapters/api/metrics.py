"""The service's own metrics, kept in process and rendered in the Prometheus text format for ``/metrics``.

A few counters and one histogram do not justify a client library: this registry holds exactly what the
service reports, and the worker and the API middleware feed it. It is used from the event loop's thread
only (the worker and the API share the loop), so it takes no locks.

What a scrape shows:

* ``cliffwatch_runs{status}``: runs in the database by status, every instance's (read at scrape time);
* ``cliffwatch_active_runs``: runs executing on this instance now;
* ``cliffwatch_emergency_stop``: 1 while the emergency stop is on;
* ``cliffwatch_request_outcomes_total{outcome}``: requests this instance's runs sent, by outcome class;
* ``cliffwatch_api_request_duration_seconds{route,method,status}``: the API's latency, by route template.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cliffwatch.domain.outcomes import Outcome

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class _Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))  # the last: +Inf
    total: float = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_S, value)] += 1
        self.total += value


class ServiceMetrics:
    """The in-process registry: the worker counts outcomes, the API middleware times requests."""

    def __init__(self) -> None:
        self._outcomes: Counter[str] = Counter({o.value: 0 for o in Outcome})
        self._latency: dict[tuple[str, str, str], _Histogram] = {}
        self._active_runs: Callable[[], int] = lambda: 0

    def count_outcomes(self, run_id: str, counts: Mapping[str, int]) -> None:
        """Adds a batch of finished requests of run ``run_id`` (outcome class → how many).

        The series is not labelled by run: run ids never stop coming, and a label per run would grow the
        scrape without bound. ``run_id`` is accepted so the worker's outcome callback fits as it is.
        """
        for outcome, count in counts.items():
            if count < 0:
                raise ValueError(f"run {run_id}: a negative count ({count}) of {outcome!r} outcomes")
            self._outcomes[outcome] += count

    def watch_active_runs(self, active: Callable[[], int]) -> None:
        """Where to read the number of runs executing on this instance (the worker's), at each scrape."""
        self._active_runs = active

    def observe_request(self, *, route: str, method: str, status: int, seconds: float) -> None:
        """One API request served: ``route`` is its template (``/api/v1/runs/{run_id}``), never the raw
        path, so ids do not become labels."""
        key = (route, method, str(status))
        histogram = self._latency.get(key)
        if histogram is None:
            histogram = self._latency[key] = _Histogram()
        histogram.observe(seconds)

    def outcome_totals(self) -> Mapping[str, int]:
        return dict(self._outcomes)

    def render(self, *, runs_by_status: Mapping[str, int], emergency_stop: bool) -> str:
        """The exposition text; the figures only the database knows are passed in."""
        lines: list[str] = []
        _family(lines, "cliffwatch_runs", "gauge", "Runs in the database by status, across every instance.")
        lines += [f"cliffwatch_runs{_labels(status=s)} {n}" for s, n in sorted(runs_by_status.items())]
        _family(lines, "cliffwatch_active_runs", "gauge", "Runs executing on this instance now.")
        lines.append(f"cliffwatch_active_runs {self._active_runs()}")
        _family(lines, "cliffwatch_emergency_stop", "gauge", "1 while the emergency stop refuses new runs.")
        lines.append(f"cliffwatch_emergency_stop {int(emergency_stop)}")
        _family(
            lines,
            "cliffwatch_request_outcomes_total",
            "counter",
            "Requests sent by this instance's runs, by outcome class.",
        )
        lines += [
            f"cliffwatch_request_outcomes_total{_labels(outcome=o)} {n}" for o, n in sorted(self._outcomes.items())
        ]
        name = "cliffwatch_api_request_duration_seconds"
        _family(lines, name, "histogram", "API request latency by route template, method and status.")
        for (route, method, status), histogram in sorted(self._latency.items()):
            lines += _histogram_lines(name, histogram, route=route, method=method, status=status)
        return "\n".join(lines) + "\n"


def _family(lines: list[str], name: str, kind: str, help_text: str) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")


def _histogram_lines(name: str, histogram: _Histogram, **labels: str) -> Iterable[str]:
    cumulative = 0
    bounds = [*(f"{b:g}" for b in LATENCY_BUCKETS_S), "+Inf"]
    for bound, count in zip(bounds, histogram.counts, strict=True):
        cumulative += count
        yield f"{name}_bucket{_labels(**labels, le=bound)} {cumulative}"
    yield f"{name}_sum{_labels(**labels)} {histogram.total:.6f}"
    yield f"{name}_count{_labels(**labels)} {cumulative}"


def _labels(**labels: str) -> str:
    body = ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items())
    return "{" + body + "}"


def _escape(value: str) -> str:
    # The text format's only escapes in label values: backslash, double quote and line feed.
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
