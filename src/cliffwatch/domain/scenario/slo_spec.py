"""The SLO of a scenario, or of one traffic class: its latency bounds and timeout, validated together.

A class's SLO is read over the scenario's (``base``): a field it leaves out is the scenario's, and the
bounds are checked against each other as a whole.
"""

from __future__ import annotations

from cliffwatch.domain.outcomes import Slo
from cliffwatch.domain.validation import Reader

_BOUNDS = ("e2e_ms", "timeout_ms", "ttft_ms", "tpot_ms", "ttfa_ms")
MAX_MS = 3_600_000


def parse_slo(reader: Reader | None, *, base: Slo | None = None) -> Slo | None:
    """An SLO from its mapping; with ``base``, the fields it leaves out are ``base``'s (e2e_ms and timeout_ms
    are required only without one). Records every problem on ``reader`` and gives None when there is one."""
    if reader is None:
        return None

    def bound(key: str, required: bool) -> float | None:
        inherited = None if base is None else getattr(base, key)
        if required and base is None:
            return reader.number(key, gt=0, le=MAX_MS)  # type: ignore[no-any-return]
        return reader.number(key, inherited, gt=0, le=MAX_MS)  # type: ignore[no-any-return]

    e2e, timeout = bound("e2e_ms", True), bound("timeout_ms", True)
    ttft, tpot, ttfa = bound("ttft_ms", False), bound("tpot_ms", False), bound("ttfa_ms", False)
    reader.done()
    given_but_bad = any(reader.has(key) and value is None
                        for key, value in zip(_BOUNDS, (e2e, timeout, ttft, tpot, ttfa), strict=True))  # fmt: skip
    if e2e is None or timeout is None or given_but_bad:
        return None
    ok = True
    if timeout < e2e:
        reader.error("timeout_ms", f"must be >= e2e_ms ({e2e:g}): a request cannot be late after it was given up")
        ok = False
    if ttft is not None and ttft > e2e:
        reader.error("ttft_ms", f"must be <= e2e_ms ({e2e:g})")
        ok = False
    if ttfa is not None and ttfa > e2e:
        reader.error("ttfa_ms", f"must be <= e2e_ms ({e2e:g})")
        ok = False
    if ttfa is not None and ttft is not None and ttfa < ttft:
        reader.error("ttfa_ms", f"must be >= ttft_ms ({ttft:g}): the first answer token is a token too")
        ok = False
    if not ok:
        return None
    return Slo(e2e_ms=float(e2e), timeout_ms=float(timeout), ttft_ms=ttft, tpot_ms=tpot, ttfa_ms=ttfa)
