"""What stops a run early (``abort``: a sick baseline, an error rate) and what passes it (``score``)."""

from __future__ import annotations

from dataclasses import dataclass

from cliffwatch.domain.outcomes import NOT_ON_TIME, Outcome
from cliffwatch.domain.validation import Reader, short_repr


@dataclass(frozen=True, kw_only=True)
class BaselineGuard:
    """Abort before any stress when a baseline phase ended with fewer on-time requests than this share."""

    min_on_time_ratio: float


@dataclass(frozen=True, kw_only=True)
class ErrorRateGuard:
    """Abort when, over the last ``window_s``, the share of finished requests in ``outcomes`` is over the limit."""

    window_s: float
    max_ratio: float
    min_requests: int
    outcomes: frozenset[Outcome]


@dataclass(frozen=True, kw_only=True)
class AbortSpec:
    baseline: BaselineGuard | None = None
    error_rate: ErrorRateGuard | None = None


@dataclass(frozen=True, kw_only=True)
class ScoreSpec:
    threshold: float = 70.0  # pass mark, 0–100
    fast_fail_fraction: float = 0.1  # a refusal within this share of slo.e2e_ms counts as failing fast


def parse_abort(reader: Reader | None) -> AbortSpec | None:
    if reader is None:
        return AbortSpec()
    baseline: BaselineGuard | None = None
    error_rate: ErrorRateGuard | None = None
    ok = True
    guard = reader.mapping("baseline_unhealthy", None)
    if guard is not None:
        ratio = guard.number("min_on_time_ratio", gt=0, le=1)
        guard.done()
        ok = ok and ratio is not None
        baseline = BaselineGuard(min_on_time_ratio=ratio) if ratio is not None else None
    rate = reader.mapping("error_rate", None)
    if rate is not None:
        window = rate.number("window_s", 10.0, gt=0, le=3600)
        max_ratio = rate.number("max_ratio", gt=0, le=1)
        minimum = rate.number("min_requests", 20, ge=1, integer=True)
        outcomes = _parse_outcomes(rate)
        rate.done()
        if None in (window, max_ratio, minimum, outcomes):
            ok = False
        else:
            assert outcomes is not None
            error_rate = ErrorRateGuard(window_s=window, max_ratio=max_ratio, min_requests=minimum, outcomes=outcomes)
    reader.done()
    return AbortSpec(baseline=baseline, error_rate=error_rate) if ok else None


def _parse_outcomes(reader: Reader) -> frozenset[Outcome] | None:
    failures = tuple(o for o in NOT_ON_TIME if o is not Outcome.NOT_SENT)  # what a finished request can fail as
    if not reader.has("outcomes"):
        reader.raw("outcomes", None)
        return frozenset({Outcome.ERROR, Outcome.TIMEOUT})
    found: set[Outcome] = set()
    ok = True
    for path, item in reader.items("outcomes", nonempty=True):
        if item not in [o.value for o in failures]:
            reader.problems.add(path, f"must be one of {', '.join(o.value for o in failures)}, got {short_repr(item)}")
            ok = False
        else:
            found.add(Outcome(item))
    return frozenset(found) if ok and found else None


def parse_score(reader: Reader | None) -> ScoreSpec | None:
    if reader is None:
        return ScoreSpec()
    threshold = reader.number("threshold", 70.0, ge=0, le=100)
    fast = reader.number("fast_fail_fraction", 0.1, gt=0, le=1)
    reader.done()
    if threshold is None or fast is None:
        return None
    return ScoreSpec(threshold=float(threshold), fast_fail_fraction=float(fast))
